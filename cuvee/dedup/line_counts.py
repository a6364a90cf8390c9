"""In-memory counts of line hashes for one-pass line dedup: a compiled open-addressing table (numba).

A Python dict of int -> int costs ~100 bytes per distinct line and a Python call per line; this table costs
20 bytes per slot (key, count, the last document that counted it) and decides a whole batch in one compiled
call. Keys are the line hashes of :mod:`cuvee.dedup.native_lines`, whose bit 0 is always set, so 0 marks an
empty slot and a blank line (hash 0) is never counted or removed.

Decision rule, in stream order. ``per_document``: a line is removed from a document when ``threshold`` earlier
documents already held it (the document's own lines are counted after it is decided, once each). Otherwise
occurrence by occurrence: a line is removed when it occurred ``threshold`` times before, earlier in the same
document included. With threshold 1 and occurrences counted, this keeps the first copy of every line and
removes every later one, Dolma's paragraph rule.
"""

from __future__ import annotations

import numba as nb
import numpy as np

SLOT_BYTES = 8 + 4 + 8  # key uint64, count uint32, stamp int64
MAX_LOAD = 0.5  # the table doubles before half its slots are used


@nb.njit(cache=True, nogil=True, inline="always")
def _slot(keys, h, mask):
    i = np.int64(h >> np.uint64(1)) & mask
    while keys[i] != 0 and keys[i] != h:
        i = (i + 1) & mask
    return i


@nb.njit(cache=True, nogil=True)
def _decide_and_count(hashes, n_lines, keys, counts, stamps, first_doc, threshold, per_document, remove, removed):
    """remove[j]: line j is dropped; removed[d]: lines dropped from document d. Returns slots newly used."""
    mask = np.int64(keys.shape[0] - 1)
    used = 0
    j0 = 0
    for d in range(n_lines.shape[0]):
        j1 = j0 + np.int64(n_lines[d])
        r = 0
        if not per_document:  # occurrence by occurrence: decide, then count, line by line
            for j in range(j0, j1):
                h = hashes[j]
                hit = False
                if h != 0:
                    i = _slot(keys, h, mask)
                    if keys[i] == 0:
                        keys[i] = h
                        used += 1
                    hit = counts[i] >= threshold
                    if counts[i] < np.uint32(0xFFFFFFFF):
                        counts[i] += 1
                remove[j] = hit
                r += hit
            removed[d] = r
            j0 = j1
            continue
        for j in range(j0, j1):  # decide on the counts of earlier documents only
            h = hashes[j]
            hit = False
            if h != 0:
                i = _slot(keys, h, mask)
                hit = keys[i] == h and counts[i] >= threshold
            remove[j] = hit
            r += hit
        removed[d] = r
        stamp = first_doc + d
        for j in range(j0, j1):  # then count this document's lines
            h = hashes[j]
            if h == 0:
                continue
            i = _slot(keys, h, mask)
            if keys[i] == 0:
                keys[i] = h
                counts[i] = 1
                stamps[i] = stamp
                used += 1
            elif stamps[i] != stamp:
                if counts[i] < np.uint32(0xFFFFFFFF):
                    counts[i] += 1
                stamps[i] = stamp
        j0 = j1
    return used


@nb.njit(cache=True, nogil=True)
def _rehash(keys, counts, stamps, new_keys, new_counts, new_stamps):
    mask = np.int64(new_keys.shape[0] - 1)
    for i in range(keys.shape[0]):
        if keys[i] != 0:
            k = _slot(new_keys, keys[i], mask)
            new_keys[k], new_counts[k], new_stamps[k] = keys[i], counts[i], stamps[i]


class LineCountTable:
    """Counts of line hashes within ``max_bytes``; ``decide(hashes, n_lines, first_doc)`` decides and counts one
    batch. Past the budget it raises with what to change (nothing is silently forgotten)."""

    def __init__(self, threshold: int, per_document: bool, max_bytes: int, initial_slots: int = 1 << 16):
        self.threshold = threshold
        self.per_document = per_document
        # a power of two whose table, and the half-size one it was grown from (held during the rehash), fit
        self.max_slots = 1 << max(4, int(max_bytes // (SLOT_BYTES * 1.5)).bit_length() - 1)
        self._alloc(min(initial_slots, self.max_slots))
        self.used = 0

    def _alloc(self, n: int) -> None:
        self.keys = np.zeros(n, dtype=np.uint64)
        self.counts = np.zeros(n, dtype=np.uint32)
        self.stamps = np.full(n, -1, dtype=np.int64)

    def clear(self) -> None:
        self.keys[:] = 0
        self.counts[:] = 0
        self.stamps[:] = -1
        self.used = 0

    def _make_room(self, new_lines: int, budget_mb: int) -> None:
        size = len(self.keys)
        while self.used + new_lines > size * MAX_LOAD:
            if size * 2 > self.max_slots:
                # the largest table: run at a higher load, always leaving a free slot for every line of the batch
                if self.used + new_lines <= size * 0.9:
                    break
                raise MemoryError(f"line_dedup one_pass: {self.used:,} distinct lines fill "
                                  f"memory_budget_mb={budget_mb}; raise it, lower bucket_size, or drop one_pass "
                                  "(the default barrier spills to disk)")
            size *= 2
        if size != len(self.keys):
            old = (self.keys, self.counts, self.stamps)
            self._alloc(size)
            _rehash(*old, self.keys, self.counts, self.stamps)

    def decide(self, hashes: np.ndarray, n_lines: np.ndarray, first_doc: int, budget_mb: int):
        """(bool per line: remove it; removed lines per document)."""
        self._make_room(len(hashes), budget_mb)
        remove = np.empty(len(hashes), dtype=np.bool_)
        removed = np.empty(len(n_lines), dtype=np.int64)
        self.used += _decide_and_count(hashes, n_lines, self.keys, self.counts, self.stamps, first_doc,
                                       self.threshold, self.per_document, remove, removed)
        return remove, removed

    @property
    def nbytes(self) -> int:
        return len(self.keys) * SLOT_BYTES
