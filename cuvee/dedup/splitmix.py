"""splitmix64's finaliser: the one 64-bit mixer behind cuvee's word, line, shingle and band hashes.

It spreads every input bit over the whole output, so sums and products of hashes (shingles, band keys)
stay well distributed. ``finalise`` is the single definition: its operations mean the same on numpy
uint64 arrays and scalars and inside numba kernels (``cuvee.dedup.native`` compiles this very function),
so the vectorised, compiled and plain-integer hashes cannot drift apart.
"""

from __future__ import annotations

import numpy as np

# uint64 scalars: numba would promote a mix of int64 and uint64 to float64
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def finalise(x):
    """splitmix64's finaliser of uint64 ``x`` (array, scalar, or a value inside a numba kernel), mod 2^64."""
    x = x ^ (x >> _S30)
    x = x * M1
    x = x ^ (x >> _S27)
    x = x * M2
    return x ^ (x >> _S31)


def mix64(x: np.ndarray) -> np.ndarray:
    """``finalise`` over a numpy uint64 array (or scalar); wrap-around is the point, so no overflow warning."""
    with np.errstate(over="ignore"):
        return finalise(x)


def mix64_int(x: int) -> int:
    """``finalise`` of a Python integer in [0, 2^64): the plain reference the tests compare kernels with."""
    return int(mix64(np.uint64(x)))
