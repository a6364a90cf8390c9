"""Dedup by one key per document (URL dedup, exact content dedup): keep one document per key.

Recording: each document becomes one fixed-size record (128-bit key hash, two priorities, rank,
position), written to the spill-friendly file of the phase task that owns its key. Phase task p
gathers every rank's records of its key range (within the memory budget, see ``spill``), sorts them by
key then priority, keeps the first record of each key and lists the others, per origin rank, for the
filter. The keep rule is therefore: highest ``p1``, then highest ``p2``, then smallest (rank, position). Every
document of a key shared by several is also given its cluster (the key's documents: their count and the keeper),
per origin rank (:mod:`cuvee.dedup.clusters`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from datatrove.pipeline.base import PipelineStep

from cuvee.dedup.clusters import CLUSTER_RECORD, save_cluster_records
from cuvee.dedup.files import AtomicWriter, save_array
from cuvee.dedup.spill import chunk_records, key_partitions
from cuvee.dedup.steps import RecordingStep

KEY_RECORD = np.dtype([("khi", "<u8"), ("klo", "<u8"), ("p1", "<i8"), ("p2", "<i8"), ("rank", "<u4"), ("pos", "<u8")])


class KeyRecorder(RecordingStep):
    """Writes one KEY_RECORD per document; ``keyer(batch)`` returns, per document, (key_hi, key_lo, p1, p2)
    or None to leave it out of dedup (it is then always kept, and counted as ``no_key``). A batch at a time,
    so a keyer can do its work in one compiled call; a keyer without priorities may instead give
    ``key_arrays(batch)`` -> (indexes in the batch with a key, key hi, key lo), the same records without a
    Python tuple per document."""

    name = "🔑 dedup keys"
    records_id_text = True  # the phase names each cluster's keeper

    def __init__(self, folder: str | Path, partitions: int, keyer: Callable):
        super().__init__(folder)
        self.partitions = partitions
        self.keyer = keyer

    def open(self, rank: int) -> None:
        self.rank = rank
        self.pos = 0
        self.writers = [AtomicWriter(self.folder / "keys" / f"{p:05d}" / f"{rank:05d}.bin") for p in range(self.partitions)]

    def record(self, batch: list) -> None:
        arrays = getattr(self.keyer, "key_arrays", None)
        if arrays is not None:  # a keyer without priorities that gives its keys as arrays (exact dedup)
            keyed, hi, lo = arrays(batch)
            recs = np.zeros(len(keyed), dtype=KEY_RECORD)
            recs["khi"], recs["klo"], recs["rank"], recs["pos"] = hi, lo, self.rank, self.pos + keyed
            if len(keyed) < len(batch):
                self.stat_update("no_key", value=len(batch) - len(keyed))
            self.pos += len(batch)
            self._write(recs)
            return
        rows = []
        for i, k in enumerate(self.keyer(batch)):
            if k is None:
                self.stat_update("no_key")
                continue
            rows.append((*k, self.rank, self.pos + i))
        self.pos += len(batch)
        self._write(np.array(rows, dtype=KEY_RECORD))

    def _write(self, recs: np.ndarray) -> None:
        part = recs["khi"] % np.uint64(self.partitions)
        for p in np.unique(part):
            self.writers[int(p)].write(recs[part == p])

    def close(self, ok: bool) -> None:
        for w in self.writers:
            w.close() if ok else w.abort()


class FindKeyDuplicates(PipelineStep):
    """Phase: for key partition ``rank``, list every document whose key was already taken by a better one."""

    type = "🫂 - DEDUP"
    name = "🔑 find duplicates"

    def __init__(self, folder: str | Path, source_tasks: int, memory_budget_mb: int):
        super().__init__()
        self.folder = Path(folder)
        self.source_tasks = source_tasks
        self.budget = memory_budget_mb * 2**20

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        files = [self.folder / "keys" / f"{rank:05d}" / f"{r:05d}.bin" for r in range(self.source_tasks)]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise FileNotFoundError(f"dedup keys missing (recording tasks not finished?): {missing[:3]}")
        total = sum(f.stat().st_size for f in files) // KEY_RECORD.itemsize
        step = chunk_records(self.budget, KEY_RECORD.itemsize)

        def chunks():
            for f in files:
                mm = np.memmap(f, dtype=KEY_RECORD, mode="r") if f.stat().st_size else []
                for i in range(0, len(mm), step):
                    yield np.array(mm[i:i + step])

        drops: list[list[np.ndarray]] = [[] for _ in range(self.source_tasks)]
        clusters: list[list[np.ndarray]] = [[] for _ in range(self.source_tasks)]
        with self.track_time():
            for part in key_partitions(chunks, KEY_RECORD, "khi", total, self.budget, self.folder,
                                       stats=lambda k, v: self.stat_update(k, value=v)):
                if not len(part):
                    continue
                order = np.lexsort((part["pos"], part["rank"], -part["p2"], -part["p1"], part["klo"], part["khi"]))
                part = part[order]
                first = np.ones(len(part), dtype=bool)
                first[1:] = (part["khi"][1:] != part["khi"][:-1]) | (part["klo"][1:] != part["klo"][:-1])
                dup = part[~first]
                self.stat_update("documents", value=len(part))
                self.stat_update("unique_keys", value=int(first.sum()))
                self.stat_update("duplicates", value=len(dup))
                for r in np.unique(dup["rank"]):
                    drops[int(r)].append(dup["pos"][dup["rank"] == r])
                for r, recs in _cluster_records(part, first):
                    clusters[r].append(recs)
            for r in range(self.source_tasks):
                arr = np.sort(np.concatenate(drops[r])) if drops[r] else np.zeros(0, dtype=np.uint64)
                save_array(self.folder / "drops" / f"{rank:05d}" / f"{r:05d}.u64", arr.astype(np.uint64))
                save_cluster_records(self.folder / "clusters" / f"{rank:05d}" / f"{r:05d}.bin", clusters[r])
        return
        yield  # a generator, as datatrove expects


def _cluster_records(part: np.ndarray, first: np.ndarray):
    """(origin rank, its CLUSTER_RECORDs) for the documents of ``part`` (sorted, ``first`` marking each key's
    keeper) whose key is shared: a cluster is the documents of one key."""
    group = np.cumsum(first) - 1
    sizes = np.bincount(group)
    shared = sizes[group] > 1
    if not shared.any():
        return
    keeper = np.flatnonzero(first)[group[shared]]
    recs = np.zeros(int(shared.sum()), dtype=CLUSTER_RECORD)
    recs["pos"], recs["size"] = part["pos"][shared], sizes[group[shared]]
    recs["krank"], recs["kpos"] = part["rank"][keeper], part["pos"][keeper]
    ranks = part["rank"][shared]
    for r in np.unique(ranks):
        yield int(r), recs[ranks == r]
