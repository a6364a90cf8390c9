"""Compiled (numba) line hashing for line dedup: ccNet's normalisation and a 64-bit hash per line, in one
loop over the document's UTF-8 bytes (ASCII through a 128-entry table), without a Python string per line.

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

from cuvee.dedup.native import _FNV_OFFSET, _FNV_PRIME, MAX_CODE_POINT, mix, word_char_table
from cuvee.dedup.native_exact import decode_utf8, lower_table
from cuvee.dedup.splitmix import mix64_int

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


@lru_cache(maxsize=1)
def ascii_feed() -> np.ndarray:
    """int16[128]: what each ASCII byte feeds the line hash once lowered: the character, ``0`` for a digit,
    -1 for a separator (from the same tables as the rest; no ASCII character has an accent to strip)."""
    lower, classes = lower_table(), char_classes()
    start, _, _ = accent_folding()
    table = np.empty(128, dtype=np.int16)
    for b in range(128):
        c = int(lower[b])
        if start[c] >= 0 or c >= 128:  # the kernel's ASCII shortcut would then differ from the definition
            raise RuntimeError(f"ASCII {b} lowers or folds outside ASCII: the line-hash tables need rebuilding")
        k = classes[c]
        table[b] = _ZERO if k & _DIGIT else -1 if c == 95 or not (k & _WORD) else c
    table[_NEWLINE] = -2
    return table


@nb.njit(cache=True, nogil=True)
def line_hashes_batch(src, starts, lower, feed, classes, fold_start, fold_len, fold_data, out, n_lines):
    """out[...]: one hash per line of each text (UTF-8 bytes ``src[starts[d]:starts[d+1]]``; 0: nothing left
    after normalising); n_lines[d]: its count. ``out`` must hold (newlines + texts) entries.

    Lowers each code point through ``lower`` (str.lower's table: the caller lowers in Python the texts holding
    the two code points it cannot). ASCII bytes, most of most pages, take one small-table lookup (``feed``);
    other code points are decoded, lowered, accent-stripped and fed one by one."""
    j = 0
    for d in range(starts.shape[0] - 1):
        first = j
        h = _FNV_OFFSET
        words = 0
        in_word = False
        i = starts[d]
        n = starts[d + 1]
        while i < n:
            b = np.int64(src[i])
            if b < 0x80:
                i += 1
                c = np.int64(feed[b])
                if c >= 0:
                    if not in_word:
                        if words:
                            h = (h ^ np.uint64(_BLANK)) * _FNV_PRIME
                        words += 1
                        in_word = True
                    h = (h ^ np.uint64(c)) * _FNV_PRIME
                elif c == -1:
                    in_word = False
                else:  # newline
                    out[j] = (mix(h) | np.uint64(1)) if words else np.uint64(0)
                    j += 1
                    h = _FNV_OFFSET
                    words = 0
                    in_word = False
                continue
            c, size = decode_utf8(src, i, b)
            i += size
            c = np.int64(lower[c])
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
    """(uint64 hash of every line of every text, concatenated; uint32 line count per text).

    The kernel reads UTF-8 (for a mostly ASCII page, encoding it is a copy; UTF-32 cost 5 us a page more) and
    lowers as it goes; a text holding U+0130 or U+03A3, which ``str.lower`` does not map one to one, is lowered
    by ``str.lower`` first (its output lowers to itself)."""
    enc = [(t.lower() if "\u0130" in t or "\u03a3" in t else t).encode("utf-8", "surrogatepass") for t in texts]
    starts = np.zeros(len(enc) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=len(enc)), out=starts[1:])
    src = np.frombuffer(b"".join(enc), dtype=np.uint8)
    out = np.empty(int(np.count_nonzero(src == _NEWLINE)) + len(texts), dtype=np.uint64)
    n_lines = np.empty(len(texts), dtype=np.uint32)
    start, length, data = accent_folding()
    used = line_hashes_batch(src, starts, lower_table(), ascii_feed(), char_classes(), start, length, data, out,
                             n_lines)
    return out[:used], n_lines


def reference_line_hash(normalised: str) -> int:
    """The kernel's hash of one already normalised line, in plain Python (the definition tests check)."""
    if not normalised:
        return 0
    h = int(_FNV_OFFSET)
    for ch in normalised:
        h = ((h ^ ord(ch)) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return mix64_int(h) | 1
