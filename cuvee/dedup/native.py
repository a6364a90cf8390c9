"""Compiled (numba) MinHash kernel: the per-word work that dominated MinHash dedup in Python.

One jitted loop per batch walks the lower-cased text's code points, finds ``\\w+`` words with
a table built from Python's own regex (so word boundaries are exactly ``re.findall(r"\\w+")``'s),
hashes each word (FNV-1a over code points + splitmix64 finaliser), combines n consecutive word
hashes into a shingle hash (the same random linear combination + finaliser as ``MinHasher.shingles``)
and keeps the minimum of the b*r permutations a_i x + b_i mod 2^64. No per-word Python object is made.

numba compiles on first use and caches the machine code on disk (``cache=True``), so a process pays
the compile once per machine; ``warm_up()`` triggers it explicitly (benchmarks time it separately).
"""

from __future__ import annotations

import re
import time
from functools import lru_cache

import numba as nb
import numpy as np

from cuvee.dedup.native_exact import lower_table
from cuvee.dedup.splitmix import finalise

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MAX_CODE_POINT = 0x110000


@lru_cache(maxsize=1)
def word_char_table() -> np.ndarray:
    """uint8[0x110000]: 1 where Python's ``re`` counts the code point as ``\\w`` (built from re itself)."""
    every = np.arange(MAX_CODE_POINT, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    table = np.zeros(MAX_CODE_POINT, dtype=np.uint8)
    for m in re.finditer(r"\w+", every):  # word characters come in a few hundred runs
        table[m.start():m.end()] = 1
    return table


def code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 code points of the lower-cased texts, concatenated; int64 offsets [n+1]).

    Lowered through ``str.lower``'s own table, one numpy gather per batch (``str.lower`` cost ~9 us on a 1.6 KB
    page); texts holding the two code points it does not lower one to one (U+0130, U+03A3) go through
    ``str.lower`` itself, so the result is exactly ``t.lower()``'s code points."""
    enc = [t.encode("utf-32-le", "surrogatepass") for t in texts]
    lowered = lower_table()[np.frombuffer(b"".join(enc), dtype=np.uint32)]
    if (lowered < 0).any():
        enc = [t.lower().encode("utf-32-le", "surrogatepass") if "\u0130" in t or "\u03a3" in t else e
               for t, e in zip(texts, enc)]
        lowered = lower_table()[np.frombuffer(b"".join(enc), dtype=np.uint32)]  # str.lower's output maps to itself
    offsets = np.zeros(len(enc) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(e) >> 2 for e in enc), dtype=np.int64, count=len(enc)), out=offsets[1:])
    return lowered.view(np.uint32), offsets


# constants as uint64 scalars: numba would promote a mix of int64 and uint64 to float64
_S32 = np.uint64(32)
_FNV_OFFSET, _FNV_PRIME = np.uint64(FNV_OFFSET), np.uint64(FNV_PRIME)

mix = nb.njit(cache=True, inline="always")(finalise)  # splitmix64's finaliser, compiled from its one definition


@nb.njit(cache=True, nogil=True)
def word_hashes_of(cps, lo, hi, is_word, out):
    """Hashes of the \\w+ words of cps[lo:hi] into out; returns how many."""
    nw = 0
    in_word = False
    h = _FNV_OFFSET
    for i in range(lo, hi):
        c = cps[i]
        if is_word[c]:
            if not in_word:
                h = _FNV_OFFSET
                in_word = True
            h = (h ^ np.uint64(c)) * _FNV_PRIME
        elif in_word:
            out[nw] = mix(h)
            nw += 1
            in_word = False
    if in_word:
        out[nw] = mix(h)
        nw += 1
    return nw


@nb.njit(cache=True, inline="always")
def shingle_minimums(items, count, n, gram_mult, a, b, mins):
    """mins[p] = top 32 bits of min(a_p * s + b_p) over the n-item shingles s of items[:count] (n <= count).

    A shingle is mix(sum_j items[i+j] * gram_mult[j] + n): ``MinHasher.shingles``'s combination, compiled."""
    mins[:] = 0xFFFFFFFF
    for i in range(count - n + 1):
        acc = np.uint64(0)
        for j in range(n):
            acc += items[i + j] * gram_mult[j]
        x = mix(acc + np.uint64(n))
        # the top 32 bits are monotone: min(top32(v)) == top32(min(v)), and 32-bit minimums vectorise
        for p in range(a.shape[0]):
            mins[p] = min(mins[p], np.uint32((a[p] * x + b[p]) >> _S32))


@nb.njit(cache=True, nogil=True)
def minhash_batch(cps, offsets, is_word, gram_mult, a, b, sigs, has):
    """sigs[d] = top 32 bits of min_i(a_i * shingle + b_i) over document d's shingles."""
    n_docs = offsets.shape[0] - 1
    k = a.shape[0]
    n_max = gram_mult.shape[0]
    longest = 1
    for d in range(n_docs):
        longest = max(longest, offsets[d + 1] - offsets[d])
    words = np.empty(longest // 2 + 2, dtype=np.uint64)
    mins = np.empty(k, dtype=np.uint32)
    for d in range(n_docs):
        nw = word_hashes_of(cps, offsets[d], offsets[d + 1], is_word, words)
        if nw == 0:
            has[d] = False
            continue
        has[d] = True
        shingle_minimums(words, nw, min(n_max, nw), gram_mult, a, b, mins)
        sigs[d, :] = mins


@nb.njit(cache=True, nogil=True)
def token_minhash(flat, offsets, gram_mult, a, b, sigs, has):
    """sigs[d] = the signature of document d's shingles of exactly n token ids; shorter documents have none."""
    n = gram_mult.shape[0]
    mins = np.empty(a.shape[0], dtype=np.uint32)
    for d in range(offsets.shape[0] - 1):
        lo, hi = offsets[d], offsets[d + 1]
        if hi - lo < n:
            has[d] = False
            continue
        has[d] = True
        shingle_minimums(flat[lo:hi], hi - lo, n, gram_mult, a, b, mins)
        sigs[d, :] = mins


@nb.njit(cache=True, nogil=True)
def shingles_of(cps, lo, hi, is_word, gram_mult):
    words = np.empty((hi - lo) // 2 + 2, dtype=np.uint64)
    nw = word_hashes_of(cps, lo, hi, is_word, words)
    if nw == 0:
        return np.empty(0, dtype=np.uint64)
    n = min(gram_mult.shape[0], nw)
    out = np.empty(nw - n + 1, dtype=np.uint64)
    for i in range(nw - n + 1):
        acc = np.uint64(0)
        for j in range(n):
            acc += words[i + j] * gram_mult[j]
        out[i] = mix(acc + np.uint64(n))
    return out


MAX_BATCH_CODE_POINTS = 1 << 22  # 16 MB of UTF-32 per kernel call, however long the documents are


def minhash_signatures(texts: list[str], gram_mult: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(uint32 signatures [n, len(a)], has_shingles [n]); rows without words are all 0xFFFFFFFF."""
    sigs = np.full((len(texts), len(a)), 0xFFFFFFFF, dtype=np.uint32)
    has = np.zeros(len(texts), dtype=np.bool_)
    table = word_char_table()
    lo = 0
    while lo < len(texts):
        hi, size = lo, 0
        while hi < len(texts) and (hi == lo or size + len(texts[hi]) <= MAX_BATCH_CODE_POINTS):
            size += len(texts[hi])
            hi += 1
        cps, offsets = code_points(texts[lo:hi])
        minhash_batch(cps, offsets, table, gram_mult, a, b, sigs[lo:hi], has[lo:hi])
        lo = hi
    return sigs, has


def shingle_hashes(text: str, gram_mult: np.ndarray) -> np.ndarray:
    cps, offsets = code_points([text])
    return shingles_of(cps, 0, int(offsets[1]), word_char_table(), gram_mult)


def warm_up() -> float:
    """Compile (or load from the on-disk cache) every kernel; returns the seconds it took."""
    t = time.perf_counter()
    g = np.ones(5, dtype=np.uint64)
    minhash_signatures(["warm up text", ""], g, g[:2], g[:2])
    shingle_hashes("warm up", g)
    return time.perf_counter() - t


KERNELS = (minhash_batch, shingles_of)  # what warm_up compiles (token_minhash only for a tokenizer's shingles)
