"""Compiled whitespace folding for exact dedup: the UTF-8 bytes of ``normalize_text(text)`` without one Python
string per word.

``" ".join(text.lower().split())`` spends most of its time making and joining a string per word. Here Python
still lower-cases (so every special case of ``str.lower`` is Python's own), and one numba loop walks the UTF-8
bytes, drops leading and trailing whitespace and folds every run of it into one space. Whitespace is exactly
``str.isspace`` (the table is built from Python, and ``str.split()`` splits on the same characters). The
bytes hash to the same 128-bit key as the string did (xxhash hashes a str as its UTF-8 bytes); a test checks
the bytes equal ``normalize_text(text).encode()`` on every code point.
"""

from __future__ import annotations

from functools import lru_cache

import numba as nb
import numpy as np

MAX_CODE_POINT = 0x110000


@lru_cache(maxsize=1)
def space_table() -> np.ndarray:
    """uint8[0x110000]: 1 where ``str.isspace`` is true."""
    table = np.zeros(MAX_CODE_POINT, dtype=np.uint8)
    every = np.arange(MAX_CODE_POINT, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    table[[i for i, c in enumerate(every[:0x3100]) if c.isspace()]] = 1  # no whitespace above U+3000
    return table


@nb.njit(cache=True, nogil=True)
def fold_spaces(src, out, space):
    """Copy the UTF-8 bytes ``src`` to ``out`` without leading/trailing whitespace, each inner run of it as one
    space; returns the length written."""
    n = len(src)
    i = 0
    j = 0
    pending = False
    while i < n:
        b = np.int64(src[i])
        if b < 0x80:
            cp, size = b, 1
        elif b < 0xE0:
            cp, size = ((b & 0x1F) << 6) | (np.int64(src[i + 1]) & 0x3F), 2
        elif b < 0xF0:
            cp = ((b & 0x0F) << 12) | ((np.int64(src[i + 1]) & 0x3F) << 6) | (np.int64(src[i + 2]) & 0x3F)
            size = 3
        else:
            cp = (((b & 0x07) << 18) | ((np.int64(src[i + 1]) & 0x3F) << 12) | ((np.int64(src[i + 2]) & 0x3F) << 6)
                  | (np.int64(src[i + 3]) & 0x3F))
            size = 4
        if space[cp]:
            pending = True
        else:
            if pending and j > 0:
                out[j] = 32
                j += 1
            pending = False
            for k in range(size):
                out[j + k] = src[i + k]
            j += size
        i += size
    return j


def normalized_utf8(text: str) -> bytes:
    """``normalize_text(text).encode("utf-8", "surrogatepass")``: lower case, whitespace runs as one space,
    no surrounding whitespace."""
    src = text.lower().encode("utf-8", "surrogatepass")
    if not src:
        return b""
    out = np.empty(len(src), dtype=np.uint8)
    n = fold_spaces(np.frombuffer(src, dtype=np.uint8), out, space_table())
    return out[:n].tobytes()
