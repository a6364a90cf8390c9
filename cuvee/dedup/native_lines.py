"""Compiled (numba) line hashing for line dedup: ccNet's normalisation and a 64-bit hash per line, in one
loop over the document's code points, without a Python string per line.

The kernel computes exactly ``hash(normalize_line(line))`` for every ``line`` of ``text.split("\\n")``
(:func:`cuvee.dedup.text.normalize_line`: lower case, accents stripped, digits -> 0, punctuation -> space,
whitespace runs -> one space, stripped). Every character class it uses is read from tables built from
Python itself (``re``'s ``\\w`` and ``\\d``; ``unicodedata``'s NFD and combining classes), so the
kernel cannot drift from the Python definition; a test compares the two on real pages and odd Unicode.

Accents are stripped character by character: NFD decomposes each character on its own, and canonical
reordering only moves combining marks, which are all removed, so stripping a run equals stripping its
characters one by one.

Hash: FNV-1a over the normalised line's code points, then the splitmix64 finaliser (as the MinHash
kernel's word hash), with bit 0 set so that 0 can mark a line that normalises to nothing.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numba as nb
import numpy as np

from cuvee.dedup.native import _FNV_OFFSET, _FNV_PRIME, MAX_CODE_POINT, code_points, mix, word_char_table

# per code point: bit 0 \w, bit 1 \d (Python's re, str patterns). Everything else separates words: re's \s is
# exactly str.isspace() (both are Py_UNICODE_ISSPACE; a test checks), so punctuation turned into a space and
# whitespace split by str.split() are the same thing.
_WORD, _DIGIT = np.uint8(1), np.uint8(2)
_NEWLINE, _ZERO, _BLANK = 10, 48, 32


def _runs(pattern: str, every: str, table: np.ndarray, bit: int) -> None:
    for m in re.finditer(pattern, every):
        table[m.start():m.end()] |= bit


@lru_cache(maxsize=1)
def char_classes() -> np.ndarray:
    """uint8[0x110000] of re's \\w / \\d membership (bits 0, 1), built from re itself."""
    every = np.arange(MAX_CODE_POINT, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    table = word_char_table().copy()
    _runs(r"\d+", every, table, 2)
    return table


@lru_cache(maxsize=1)
def accent_folding() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start int32[0x110000], length uint8[0x110000], code points uint32[]): what each code point becomes once
    accents are stripped (NFD, combining marks removed). Identity characters have length 1 and point at
    themselves through ``start = -1`` (not stored)."""
    start = np.full(MAX_CODE_POINT, -1, dtype=np.int32)
    length = np.ones(MAX_CODE_POINT, dtype=np.uint8)
    data: list[int] = []
    combining = unicodedata.combining
    every = np.arange(MAX_CODE_POINT, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    for base in range(0x80, MAX_CODE_POINT, 128):
        block = every[base:base + 128]
        # most blocks hold no character that NFD changes (Hangul included) and no combining mark: skip them whole
        if unicodedata.is_normalized("NFD", block) and not any(map(combining, block)):
            continue
        for cp in range(base, base + 128):
            c = chr(cp)
            folded = "".join(x for x in unicodedata.normalize("NFD", c) if not combining(x))
            if folded == c:
                continue
            start[cp] = len(data)
            length[cp] = len(folded)
            data.extend(ord(x) for x in folded)
    return start, length, np.array(data, dtype=np.uint32)


@nb.njit(cache=True, nogil=True, inline="always")
def _feed(c, classes, h, words, in_word):
    """One code point of the accent-stripped text; returns (h, words, in_word)."""
    k = classes[c]
    if k & _DIGIT:
        c = _ZERO
    elif c == 95 or not (k & _WORD):  # "_", punctuation and whitespace only separate words
        return h, words, False
    if not in_word:
        if words:
            h = (h ^ np.uint64(_BLANK)) * _FNV_PRIME
        words += 1
    h = (h ^ np.uint64(c)) * _FNV_PRIME
    return h, words, True


@nb.njit(cache=True, nogil=True)
def line_hashes_batch(cps, offsets, classes, fold_start, fold_len, fold_data, out, n_lines):
    """out[...]: one hash per line of each document (0: nothing left after normalising); n_lines[d]: its count.
    ``out`` must hold (newlines + documents) entries."""
    j = 0
    for d in range(offsets.shape[0] - 1):
        first = j
        h = _FNV_OFFSET
        words = 0
        in_word = False
        for i in range(offsets[d], offsets[d + 1]):
            c = cps[i]
            if c == _NEWLINE:
                out[j] = (mix(h) | np.uint64(1)) if words else np.uint64(0)
                j += 1
                h = _FNV_OFFSET
                words = 0
                in_word = False
                continue
            s = fold_start[c]
            if s < 0:
                h, words, in_word = _feed(c, classes, h, words, in_word)
            else:
                for t in range(s, s + fold_len[c]):
                    h, words, in_word = _feed(fold_data[t], classes, h, words, in_word)
        out[j] = (mix(h) | np.uint64(1)) if words else np.uint64(0)
        j += 1
        n_lines[d] = j - first
    return j


def line_hashes_of(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hash of every line of every text, concatenated; uint32 line count per text)."""
    cps, offsets = code_points(texts)
    out = np.empty(int(np.count_nonzero(cps == _NEWLINE)) + len(texts), dtype=np.uint64)
    n_lines = np.empty(len(texts), dtype=np.uint32)
    start, length, data = accent_folding()
    used = line_hashes_batch(cps, offsets, char_classes(), start, length, data, out, n_lines)
    return out[:used], n_lines


def reference_line_hash(normalised: str) -> int:
    """The kernel's hash of one already normalised line, in plain Python (the definition tests check)."""
    if not normalised:
        return 0
    h = int(_FNV_OFFSET)
    for ch in normalised:
        h = ((h ^ ord(ch)) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    x = h
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) | 1
