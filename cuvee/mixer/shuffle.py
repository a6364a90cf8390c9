"""O(1)-memory document shuffle: a full-period linear congruential generator used as a bijection.

Why: a permutation array of a billion document indices costs 8 GB per worker; an LCG over the next power of
two, with values >= n skipped (cycle walking), visits every index in [0, n) exactly once with three integers of
state (the idea of IBM's fms-fsdp loader). Hull-Dobell: modulus 2^k, odd increment and multiplier = 1 mod 4
give full period. An extra xorshift-multiply bijection on the state hides the LCG's weak low bits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from any parts, stable across Python runs (unlike ``hash``)."""
    data = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


class LCGPermutation:
    """Iterates a seeded permutation of ``range(n)`` without materialising it."""

    def __init__(self, n: int, seed: int):
        if n < 0:
            raise ValueError("n must be >= 0")
        self.n = n
        self.bits = max(2, (max(n, 1) - 1).bit_length())
        self.m = 1 << self.bits
        self.mask = self.m - 1
        h = hashlib.sha256(seed.to_bytes(16, "little", signed=False)).digest()
        r = [int.from_bytes(h[i : i + 8], "little") for i in range(0, 32, 8)]
        self.a = ((r[0] << 2) | 1) & self.mask  # = 1 mod 4
        self.c = (r[1] | 1) & self.mask  # odd
        self.x0 = r[2] & self.mask
        self.k = (r[3] | 1) & self.mask  # odd multiplier: a bijection mod 2^bits
        self.shift = max(1, self.bits // 2)

    def _mix(self, x: int) -> int:
        x = (x * self.k) & self.mask
        return x ^ (x >> self.shift)

    def __iter__(self) -> Iterator[int]:
        n, a, c, mask, mix = self.n, self.a, self.c, self.mask, self._mix
        x = self.x0
        for _ in range(self.m):
            x = (a * x + c) & mask
            y = mix(x)
            if y < n:
                yield y

    def __len__(self) -> int:
        return self.n


def epoch_stream(n: int, seed: int, name: str) -> Iterator[tuple[int, int]]:
    """(epoch, document index) forever: each epoch is a fresh permutation of all n documents."""
    if n == 0:
        return
    epoch = 0
    while True:
        for i in LCGPermutation(n, derive_seed(seed, name, epoch)):
            yield epoch, i
        epoch += 1
