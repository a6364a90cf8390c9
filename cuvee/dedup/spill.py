"""Bounded-memory grouping of hashed records: an external sort by key range.

Whole-corpus dedup phases must see all records with the same key together. When the records fit the
memory budget they are simply loaded; otherwise they are streamed once into 2^k spill files by the
top k bits of their (uniformly distributed, hashed) key, and each file -- a disjoint key range that
fits the budget -- is loaded in turn. Partitions come out in ascending key order, so per-partition
sorted results concatenate into a globally sorted result.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from cuvee.kernel.atomic import temp_path

log = logging.getLogger(__name__)

# bytes of working memory per byte of records while sorting a partition (records, argsort, sorted copy,
# the per-record masks and prefix sums of the phases); 3.0 measured 5-20% over budget, hence 4
SORT_OVERHEAD = 4.0


def chunk_records(budget_bytes: int, itemsize: int) -> int:
    """How many records to read at a time so that reading never dominates the budget."""
    return max(1024, int(budget_bytes / 8 / max(itemsize, 1)))


def partition_bits(total_bytes: int, budget_bytes: int, overhead: float = SORT_OVERHEAD) -> int:
    if total_bytes * overhead <= budget_bytes:
        return 0
    return max(1, math.ceil(math.log2(total_bytes * overhead / budget_bytes)))


def key_partitions(
    chunks: Callable[[], Iterable[np.ndarray]],
    dtype: np.dtype,
    key: str,
    total_records: int,
    budget_bytes: int,
    tmp_dir: str | Path,
    stats: Callable[[str, int], None] | None = None,
    overhead: float = SORT_OVERHEAD,
) -> Iterator[np.ndarray]:
    """Yield arrays that together hold every record from ``chunks()``; records with equal ``key`` (a uint64
    field) are always in the same array, arrays come in ascending key range, each (unsorted) within budget.

    ``chunks`` is a callable returning a fresh iterator of record arrays (read lazily from disk);
    ``overhead`` is the caller's working memory per byte of a partition's records."""
    dtype = np.dtype(dtype)
    bits = partition_bits(total_records * dtype.itemsize, budget_bytes, overhead)
    if bits == 0:
        parts = [c for c in chunks() if len(c)]
        yield np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        return
    n_parts = 1 << bits
    if stats:
        stats("spill_partitions", n_parts)
        stats("spilled_bytes", total_records * dtype.itemsize)
    # this call's files under the kernel's temporary names: what a killed task spilled is swept on the rerun
    stem = f"spill-{os.urandom(6).hex()}"
    paths = [temp_path(Path(tmp_dir) / f"{stem}-{p:05d}.bin") for p in range(n_parts)]
    try:
        files = [open(path, "wb") for path in paths]
        try:
            for c in chunks():
                if not len(c):
                    continue
                part = (c[key] >> np.uint64(64 - bits)).astype(np.int64)
                order = np.argsort(part, kind="stable")
                bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
                c = c[order]
                for p in np.flatnonzero(np.diff(bounds)):
                    files[p].write(c[bounds[p]:bounds[p + 1]].tobytes())
        finally:
            for f in files:
                f.close()
        for p, path in enumerate(paths):
            arr = np.fromfile(path, dtype=dtype)
            path.unlink()
            if arr.nbytes * overhead > budget_bytes * 2:
                log.warning("spill partition %d holds %d bytes (budget %d): many records share few keys",
                            p, arr.nbytes, budget_bytes)
            yield arr
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
