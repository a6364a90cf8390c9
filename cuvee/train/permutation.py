"""O(1)-memory pseudo-random permutation of ``range(n)`` (a keyed Feistel network with cycle walking).

Why not ``np.random.permutation``: that costs 8 bytes per document (8 GB for a billion documents) and
must be rebuilt or stored on every resume. A Feistel network is a bijection on ``[0, 2^(2h))`` for any
round function; "cycle walking" (re-applying it until the value falls below ``n``) restricts it to a
bijection on ``[0, n)``. Indexing is random access: ``perm[i]`` needs no state, so resuming is free.
"""

from __future__ import annotations

import xxhash

_ROUNDS = 4


class FeistelPermutation:
    def __init__(self, n: int, seed: int):
        if n <= 0:
            raise ValueError("cannot permute an empty range")
        self.n = n
        self.seed = seed
        bits = max(2, (n - 1).bit_length())
        self.half_bits = (bits + 1) // 2
        self.mask = (1 << self.half_bits) - 1
        self._keys = [xxhash.xxh64_intdigest(f"{seed}:{r}".encode()) for r in range(_ROUNDS)]

    def _round(self, value: int, r: int) -> int:
        return xxhash.xxh64_intdigest(value.to_bytes(8, "little"), seed=self._keys[r]) & self.mask

    def _encrypt(self, x: int) -> int:
        left, right = x >> self.half_bits, x & self.mask
        for r in range(_ROUNDS):
            left, right = right, left ^ self._round(right, r)
        return (left << self.half_bits) | right

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(i)
        x = self._encrypt(i)
        while x >= self.n:  # domain is < 4n, so the expected number of walks is < 4
            x = self._encrypt(x)
        return x

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return (self[i] for i in range(self.n))
