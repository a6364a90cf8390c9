"""Compiled normalisation for exact dedup: the UTF-8 bytes of ``normalize_text(text)`` (lower case, whitespace
runs folded to one space, no surrounding whitespace) without one Python string per word.

``" ".join(text.lower().split())`` spends most of its time making and joining a string per word, and
``str.lower`` on a non-ASCII page costs about as much again. Here one numba loop per batch walks the UTF-8
bytes of every text, lowers each code point through a table taken from ``str.lower`` itself, drops leading
and trailing whitespace and folds every run of it into one space. Whitespace is exactly ``str.isspace`` (the
table is built from Python; ``str.split()`` splits on the same characters). Two code points ``str.lower``
does not map one to one are left to Python: U+0130 (lowered to two code points) and U+03A3 (capital sigma,
lowered by its context): a text holding either is lowered by ``str.lower`` and then only folded. The bytes
hash to the same 128-bit key as the normalised string did (xxhash hashes a str as its UTF-8 bytes); a test
checks them equal to ``normalize_text(text).encode()`` for every code point, alone and in runs.
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


@lru_cache(maxsize=1)
def lower_table() -> np.ndarray:
    """int32[0x110000]: ``str.lower`` of each code point, or -1 where it is not one code point to one (U+0130)
    or depends on the neighbours (U+03A3, final sigma)."""
    context = np.array([0x130, 0x3A3], dtype=np.uint32)
    probe = np.arange(MAX_CODE_POINT, dtype=np.uint32)
    probe[context] = ord("a")
    lowered = probe.tobytes().decode("utf-32-le", "surrogatepass").lower()
    if len(lowered) != MAX_CODE_POINT:
        raise RuntimeError("str.lower expands a code point other than U+0130: the lowering table would misalign")
    table = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int32)
    table[context] = -1
    return table


@lru_cache(maxsize=2)
def ascii_table(lower: bool = True) -> np.ndarray:
    """int16[128]: each ASCII byte (lowered by ``str.lower`` when ``lower``), -1 for ASCII whitespace."""
    table = lower_table()[:128].astype(np.int16) if lower else np.arange(128, dtype=np.int16)
    table[space_table()[:128] == 1] = -1
    return table


@nb.njit(cache=True, nogil=True, inline="always")
def decode_utf8(src, i, b):
    """(code point, byte length) of the multi-byte UTF-8 sequence at ``src[i]``, whose lead byte ``b`` is >= 0x80
    (the text was encoded by Python, so the sequence is whole and valid)."""
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (np.int64(src[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((np.int64(src[i + 1]) & 0x3F) << 6) | (np.int64(src[i + 2]) & 0x3F), 3
    return (((b & 0x07) << 18) | ((np.int64(src[i + 1]) & 0x3F) << 12)
            | ((np.int64(src[i + 2]) & 0x3F) << 6) | (np.int64(src[i + 3]) & 0x3F)), 4


@nb.njit(cache=True, nogil=True)
def _fold_batch(src, starts, out, out_ends, lower, space, ascii_map, do_lower):
    """For text t (UTF-8 bytes ``src[starts[t]:starts[t+1]]``): write its lowered, whitespace-folded bytes to
    ``out`` from ``2 * starts[t]`` (lowering can lengthen a code point's UTF-8 by half: U+023A -> U+2C65, so
    each text gets twice its length) and the end to ``out_ends[t]``; a text holding a
    code point the table cannot lower gets ``out_ends[t] = -1`` (with ``do_lower`` False nothing is lowered:
    the texts were lowered by Python; ``ascii_map`` is then the unlowered table). Returns how many texts got -1.

    Whitespace is folded without a branch on ASCII: every byte is written, and the write position advances
    unless the byte is whitespace following whitespace (leading whitespace counts as following; a trailing
    space is taken back at the end). Branching per byte cost twice as much (4.7 against 2 ns a byte)."""
    unlowered = 0
    for t in range(len(starts) - 1):
        i = starts[t]
        n = starts[t + 1]
        j = 2 * i
        first = j
        prev_ws = np.int64(1)
        bad = False
        while i < n:
            b = np.int64(src[i])
            if b < 0x80:  # ASCII: lowered and classified by one small-table lookup
                c = np.int64(ascii_map[b])
                ws = np.int64(c < 0)
                out[j] = 32 if ws else c
                j += 1 - (ws & prev_ws)
                prev_ws = ws
                i += 1
                continue
            cp, size = decode_utf8(src, i, b)
            i += size
            if do_lower:
                cp = np.int64(lower[cp])
                if cp < 0:
                    bad = True
                    break
            if space[cp]:
                out[j] = 32
                j += 1 - prev_ws
                prev_ws = 1
                continue
            prev_ws = 0
            if cp < 0x80:
                out[j] = cp
                j += 1
            elif cp < 0x800:
                out[j] = 0xC0 | (cp >> 6)
                out[j + 1] = 0x80 | (cp & 0x3F)
                j += 2
            elif cp < 0x10000:
                out[j] = 0xE0 | (cp >> 12)
                out[j + 1] = 0x80 | ((cp >> 6) & 0x3F)
                out[j + 2] = 0x80 | (cp & 0x3F)
                j += 3
            else:
                out[j] = 0xF0 | (cp >> 18)
                out[j + 1] = 0x80 | ((cp >> 12) & 0x3F)
                out[j + 2] = 0x80 | ((cp >> 6) & 0x3F)
                out[j + 3] = 0x80 | (cp & 0x3F)
                j += 4
        if bad:
            out_ends[t] = -1
            unlowered += 1
        else:
            if prev_ws and j > first:  # the space written for trailing whitespace
                j -= 1
            out_ends[t] = j
    return unlowered


def _fold(encoded: list[bytes], do_lower: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(buffer, starts, ends, how many texts were left unlowered) for the UTF-8 ``encoded`` texts."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    src = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    out = np.empty(2 * len(src), dtype=np.uint8)
    ends = np.zeros(len(encoded), dtype=np.int64)
    unlowered = _fold_batch(src, starts, out, ends, lower_table(), space_table(), ascii_table(do_lower), do_lower)
    return out, starts, ends, unlowered


def normalized_batch(texts: list[str]) -> list[memoryview]:
    """``[normalize_text(t).encode("utf-8", "surrogatepass") for t in texts]``, as views of one buffer (xxhash
    reads them without a copy); one compiled call for the whole batch."""
    out, starts, ends, unlowered = _fold([t.encode("utf-8", "surrogatepass") for t in texts], True)
    mv = memoryview(out)
    ends = ends.tolist()
    views = [mv[2 * a:z] for a, z in zip(starts.tolist(), ends)]
    if unlowered:  # a code point str.lower maps by context or to two: those texts go through Python's lower
        again = [i for i, z in enumerate(ends) if z < 0]
        out, starts, ends, _ = _fold([texts[i].lower().encode("utf-8", "surrogatepass") for i in again], False)
        mv = memoryview(out)
        for i, a, z in zip(again, starts.tolist(), ends.tolist()):
            views[i] = mv[2 * a:z]
    return views


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) the kernel, as :func:`normalized_batch` calls it."""
    normalized_batch(["Warm Up", ""])


KERNELS = (_fold_batch,)
