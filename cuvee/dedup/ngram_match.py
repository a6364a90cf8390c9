"""Containment of eval items in training text: shared word (or token) n-grams, the standard contamination test.

Why n-grams and not whole-document similarity: an eval item copied into a long page, cut across lines, or
lightly edited keeps most of its n-grams, while its Jaccard similarity with the page is near 0. Why 13:
GPT-3 (Brown et al. 2020, appendix C) flags a test item when it shares a 13-gram with the training data, as do
PaLM and the Llama 2 study; datatrove's ``NGramsDecontConfig`` uses 12. 13 words is long enough that unrelated
texts share almost none (phrases like "at the end of the day" are far shorter), short enough that a few
edits leave many windows intact (10 % of words substituted keeps ~0.9^13 = 25 % of an item's 13-grams).

Everything works on sequences of integer ids, so the same index serves words (the ``decontaminate`` stage:
:func:`word_ids`) and token ids (anneal decontamination). Words are normalised before hashing: Unicode NFKC,
case-folded, punctuation dropped (``\\w+`` runs), so case, punctuation, whitespace and line breaks do not
matter and an item split over lines or paragraphs is one stream of words.

The index (:class:`NgramIndex`) holds the sorted unique 64-bit n-gram hashes of every item that has at least
``n`` ids, and for each hash the items holding it (CSR arrays). It is saved as flat ``.npy``-free arrays that
each task memory-maps (one copy in the page cache, whatever the task count); a lookup is one ``searchsorted``
per document. Items shorter than ``n`` are *too short to test*: counted, never indexed, so they never match
by chance. A 64-bit collision needs ~2^32 grams per indexed gram: negligible at 10^7 indexed grams.

Match rule: item ``i`` is found in a text when at least ``min(min_ngrams, grams(i))`` of its distinct
n-grams occur there (``min_ngrams`` 1: GPT-3's and datatrove's "any shared n-gram").
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from cuvee.dedup.files import load_array, save_array
from cuvee.dedup.minhash import ngram_hashes
from cuvee.kernel.atomic import write_json

DEFAULT_N = 13
SEED = 0x13C0  # fixed: an index and the texts checked against it must hash alike
FORMAT = 1
_WORD_RE = re.compile(r"\w+")


def gram_multipliers(n: int) -> np.ndarray:
    """The ``n`` odd 64-bit multipliers of the n-gram hash (``minhash.ngram_hashes``), from a fixed seed."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    return rng.integers(1, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def normalise_word(w: str) -> str:
    return w.casefold() if w.isascii() else unicodedata.normalize("NFKC", w).casefold()


def word_spans(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word ids uint64, start offsets, end offsets) of the normalised words of ``text``, in order."""
    h = xxhash.xxh3_64_intdigest
    ids, starts, ends = [], [], []
    for m in _WORD_RE.finditer(text):
        ids.append(h(normalise_word(m.group())))
        starts.append(m.start())
        ends.append(m.end())
    return (np.array(ids, dtype=np.uint64), np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


def word_ids(text: str) -> np.ndarray:
    """The normalised words of ``text`` as uint64 ids (xxh3 of each NFKC, case-folded ``\\w+`` word)."""
    h = xxhash.xxh3_64_intdigest
    return np.fromiter((h(normalise_word(w)) for w in _WORD_RE.findall(text)), dtype=np.uint64)


@dataclass(frozen=True)
class Match:
    """One item found in one text: which item, how many of its distinct n-grams occur, and the ranges of ids
    (``[start, end)`` positions, merged where windows overlap) that those n-grams cover."""

    item: int
    grams: int
    spans: tuple[tuple[int, int], ...]


def merge_windows(windows: np.ndarray, n: int) -> tuple[tuple[int, int], ...]:
    """Sorted window starts -> merged ``[start, start + n)`` ranges."""
    out: list[list[int]] = []
    for w in windows.tolist():
        if out and w <= out[-1][1]:
            out[-1][1] = max(out[-1][1], w + n)
        else:
            out.append([w, w + n])
    return tuple((a, b) for a, b in out)


class NgramIndex:
    """Sorted n-gram hashes of eval items and, per hash, the items holding it. Built by :meth:`build`, or
    loaded (memory-mapped) from a folder written by :meth:`save`."""

    def __init__(self, n: int, hashes: np.ndarray, offsets: np.ndarray, owners: np.ndarray, item_grams: np.ndarray,
                 min_ngrams: int = 1):
        if n < 1 or min_ngrams < 1:
            raise ValueError(f"n and min_ngrams must be >= 1 (got {n}, {min_ngrams})")
        self.n = n
        self.hashes, self.offsets, self.owners, self.item_grams = hashes, offsets, owners, item_grams
        self.min_ngrams = min_ngrams
        self.mult = gram_multipliers(n)

    @classmethod
    def build(cls, items, n: int = DEFAULT_N, min_ngrams: int = 1) -> NgramIndex:
        """``items``: id sequences, item ``i`` being the i-th. Items with fewer than ``n`` ids get no grams
        (``item_grams[i] == 0``): they cannot match."""
        mult = gram_multipliers(n)
        grams, owner, counts = [], [], []
        for i, ids in enumerate(items):
            g = np.unique(ngram_hashes(np.asarray(ids, dtype=np.uint64), mult))
            grams.append(g)
            owner.append(np.full(len(g), i, dtype=np.uint32))
            counts.append(len(g))
        item_grams = np.array(counts, dtype=np.uint32)
        if not grams or not item_grams.sum():
            empty = np.zeros(0, dtype=np.uint64)
            return cls(n, empty, np.zeros(1, dtype=np.uint64), np.zeros(0, dtype=np.uint32), item_grams, min_ngrams)
        flat, own = np.concatenate(grams), np.concatenate(owner)
        order = np.lexsort((own, flat))
        flat, own = flat[order], own[order]
        hashes, first = np.unique(flat, return_index=True)
        offsets = np.append(first, len(flat)).astype(np.uint64)
        return cls(n, hashes, offsets, own, item_grams, min_ngrams)

    @property
    def too_short(self) -> np.ndarray:
        """Boolean per item: fewer than ``n`` ids, so never tested."""
        return self.item_grams == 0

    def find(self, ids: np.ndarray) -> list[Match]:
        """Every item found in the id sequence ``ids``, by item number, with the id ranges its n-grams cover."""
        if not len(self.hashes) or len(ids) < self.n:
            return []
        grams = ngram_hashes(np.asarray(ids, dtype=np.uint64), self.mult)
        pos = np.searchsorted(self.hashes, grams)
        pos[pos >= len(self.hashes)] = 0
        wins = np.flatnonzero(self.hashes[pos] == grams)
        if not wins.size:
            return []
        hp = pos[wins]
        lo, hi = self.offsets[hp].astype(np.int64), self.offsets[hp + 1].astype(np.int64)
        reps = hi - lo
        win_rep = np.repeat(wins, reps)
        hash_rep = np.repeat(hp, reps)
        idx = np.repeat(lo - np.cumsum(reps) + reps, reps) + np.arange(int(reps.sum()))
        items = self.owners[idx].astype(np.int64)
        order = np.lexsort((win_rep, items))
        items, win_rep, hash_rep = items[order], win_rep[order], hash_rep[order]
        bounds = np.flatnonzero(np.diff(items)) + 1
        out = []
        for it, w, h in zip(np.split(items, bounds), np.split(win_rep, bounds), np.split(hash_rep, bounds)):
            item = int(it[0])
            distinct = len(np.unique(h))
            if distinct >= min(self.min_ngrams, int(self.item_grams[item])):
                out.append(Match(item, distinct, merge_windows(w, self.n)))
        return out

    # ---- on disk: flat arrays + a small JSON header, memory-mapped by every task ------------------------------
    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        """Write the arrays, then ``index.json`` last: a folder with ``index.json`` holds a complete index."""
        folder = Path(folder)
        save_array(folder / "hashes.u64", self.hashes)
        save_array(folder / "offsets.u64", self.offsets)
        save_array(folder / "owners.u32", self.owners)
        save_array(folder / "item_grams.u32", self.item_grams)
        header = {"format": FORMAT, "n": self.n, "seed": SEED, "hashes": len(self.hashes),
                  "items": len(self.item_grams), **(extra or {})}
        write_json(folder / "index.json", header, indent=None)

    @classmethod
    def load(cls, folder: str | Path, min_ngrams: int = 1) -> NgramIndex:
        folder = Path(folder)
        header = read_header(folder)
        arrays = [load_array(folder / name, dtype, mmap=True) for name, dtype in
                  (("hashes.u64", np.uint64), ("offsets.u64", np.uint64), ("owners.u32", np.uint32),
                   ("item_grams.u32", np.uint32))]
        if len(arrays[0]) != header["hashes"] or len(arrays[3]) != header["items"]:
            raise ValueError(f"n-gram index {folder}: arrays do not match index.json (partly written?)")
        return cls(header["n"], *arrays, min_ngrams=min_ngrams)


def read_header(folder: str | Path) -> dict:
    path = Path(folder) / "index.json"
    if not path.is_file():
        raise FileNotFoundError(f"n-gram index {folder}: index.json missing (the index phase did not finish)")
    header = json.loads(path.read_text())
    if header.get("format") != FORMAT or header.get("seed") != SEED:
        raise ValueError(f"n-gram index {folder}: format {header.get('format')}/seed {header.get('seed')} is not "
                         f"this cuvee's ({FORMAT}/{SEED}); rebuild it")
    return header


def char_spans(match: Match, starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """A word-level match's ranges as character offsets into the text ``starts``/``ends`` came from."""
    return [(int(starts[a]), int(ends[b - 1])) for a, b in match.spans]
