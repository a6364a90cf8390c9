"""MinHash LSH near-duplicate removal (FineWeb defaults: 5-word shingles, 14 bands x 8 rows).

1. Signatures (pass-through, per rank): b*r uint32 minimums per document (with the default ``numba``
   backend tokenising, hashing and minimums run in one compiled loop), folded at once into one 64-bit key
   per band and stored *band-major*: ``bands/<band>/<rank>.key.u64`` (8 bytes per document and band), plus
   the document's length. A bucket task reads only its own bands' keys; the full signatures (4*b*r bytes
   per document) are never written, so nothing is re-read once per band.
2. Buckets (phase, one task per group of bands): per band, (band key, document) records are grouped by
   key with the partitioned spill (memory within ``memory_budget_mb``); every group of equal keys gives
   candidate edges. Keys found in a reused index (``reuse_index``) link the document to "the earlier
   run". The band's sorted keys are written as this run's index.
3. Clusters (phase, one task): union-find over the edges, streamed from the bucket files in chunks of
   ``memory_budget_mb``; the union-find state is dense over the run's documents (~9 bytes each, see
   ``MinhashClusters``). Keep rule, per cluster: if it touches an earlier run's index, no document is
   kept (the earlier run already holds a copy); otherwise the longest text is kept, ties going to the
   smallest (rank, position). All others are listed for the filter.
4. Filter: drops the listed documents as ``minhash_duplicate``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.dedup.files import AtomicWriter, load_array, rank_file
from cuvee.dedup.minhash import MinHashConfig, MinHasher
from cuvee.dedup.spill import chunk_records, key_partitions
from cuvee.dedup.steps import DropListed, RecordingStep
from cuvee.dedup.unionfind import DenseUnionFind
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

log = logging.getLogger(__name__)

POS_BITS = 40  # document id = rank << 40 | position
POS_MASK = np.uint64(2**POS_BITS - 1)
EARLIER_RUN = np.uint64(2**64 - 1)  # node standing for "a document of a reused index"
BAND_RECORD = np.dtype([("key", "<u8"), ("gid", "<u8")])
# bucket work per byte of band records: records, argsort, sorted copy, first/cumsum/anchor, pairs (measured)
BUCKET_OVERHEAD = 6.0
CLUSTER_BYTES_PER_DOC = 9  # parent (uint32) + best length (uint32) + flag (bool); 13 above 2^32 documents
DOC_META = np.dtype([("len", "<u4"), ("has", "u1")])


class MinhashDedupParams(StageParams):
    n_grams: int = Field(5, ge=1, description="words per shingle")
    num_bands: int = Field(14, ge=1)
    rows_per_band: int = Field(8, ge=1)
    seed: int = 1
    backend: Literal["numba", "numpy", "rensa"] = Field(
        "numba", description="numba: compiled tokenise+hash+minimum (fastest); numpy/rensa: Python word split + "
                             "xxh3, minimums in numpy / Rust")
    memory_budget_mb: int = Field(1024, ge=1, description="per bucket task; larger bands spill to disk")
    reuse_index: list[str] = Field(default_factory=list, description="index folders of earlier runs to dedup against")
    write_index: bool = Field(True, description="write this run's band keys as an index for later runs")
    index_dir: str | None = Field(None, description="where to write the index; default <stage work dir>/index")

    def config(self) -> MinHashConfig:
        return MinHashConfig(self.n_grams, self.num_bands, self.rows_per_band, self.seed, self.backend)


def index_description(cfg: MinHashConfig) -> dict:
    return {"format": "cuvee-minhash-index-v1", "n_grams": cfg.n_grams, "num_bands": cfg.num_bands,
            "rows_per_band": cfg.rows_per_band, "seed": cfg.seed, "backend": cfg.backend,
            "fingerprint": MinHasher(cfg).fingerprint()}


def check_index(path: str | Path, cfg: MinHashConfig) -> Path:
    """An earlier index is usable only with the same hash functions; say what differs otherwise."""
    path = Path(path)
    desc_path = path / "index.json"
    if not desc_path.exists():
        raise ValueError(f"minhash_dedup.reuse_index: {path} is not a MinHash index (no index.json)")
    theirs = json.loads(desc_path.read_text())
    ours = index_description(cfg)
    diff = {k: (theirs.get(k), v) for k, v in ours.items() if theirs.get(k) != v}
    if diff:
        raise ValueError(f"minhash_dedup.reuse_index: {path} was built with other settings "
                         f"(key: (index, this run)): {diff}")
    missing = [b for b in range(cfg.num_bands) if not (path / f"band{b:03d}.u64").exists()]
    if missing:
        raise ValueError(f"minhash_dedup.reuse_index: {path} lacks bands {missing} (index phase not finished?)")
    return path


def band_file(folder: Path, band: int, rank: int) -> Path:
    """One rank's 64-bit keys of one band, in document order (band-major signature storage)."""
    return rank_file(Path(folder) / "bands" / f"{band:03d}", rank, "key.u64")


class MinhashSignatures(RecordingStep):
    name = "🎯 minhash signatures"
    batch_size = 512  # one compiled call per batch

    def __init__(self, folder, config: MinHashConfig):
        super().__init__(folder)
        self.config = config
        self._hasher: MinHasher | None = None

    def open(self, rank: int) -> None:
        self._hasher = self._hasher or MinHasher(self.config)
        self.bands = [AtomicWriter(band_file(self.folder, b, rank)) for b in range(self.config.num_bands)]
        self.meta = AtomicWriter(rank_file(self.folder / "sigs", rank, "meta"))

    def record(self, batch: list) -> None:
        sig, has = self._hasher.signatures([d.text for d in batch])
        meta = np.zeros(len(batch), dtype=DOC_META)
        meta["len"] = np.minimum([len(d.text) for d in batch], 2**32 - 1)
        meta["has"] = has
        self.stat_update("no_shingles", value=int((~has).sum()))
        for b, w in enumerate(self.bands):
            w.write(self._hasher.band_keys(sig, b))
        self.meta.write(meta)

    def close(self, ok: bool) -> None:
        for w in (*self.bands, self.meta):
            w.close() if ok else w.abort()


class MinhashBuckets(PipelineStep):
    """Phase: candidate pairs per band (equal band keys), matches against reused indexes, this run's index."""

    type = "🫂 - DEDUP"
    name = "🎯 minhash buckets"

    def __init__(self, folder, config: MinHashConfig, source_tasks: int, memory_budget_mb: int,
                 reuse_index: list[str], index_dir: str | None):
        super().__init__()
        self.folder = Path(folder)
        self.config = config
        self.source_tasks = source_tasks
        self.budget = memory_budget_mb * 2**20
        self.reuse_index = [Path(p) for p in reuse_index]
        self.index_dir = Path(index_dir) if index_dir else None

    def _chunks(self, band: int):
        step = chunk_records(self.budget, BAND_RECORD.itemsize)

        def gen():
            for r in range(self.source_tasks):
                band_keys = load_array(band_file(self.folder, band, r), np.uint64, mmap=True)
                meta = load_array(rank_file(self.folder / "sigs", r, "meta"), DOC_META, mmap=True)
                for i in range(0, len(band_keys), step):
                    keys = np.asarray(band_keys[i:i + step])
                    has = np.asarray(meta["has"][i:i + step]).astype(bool)
                    rec = np.zeros(int(has.sum()), dtype=BAND_RECORD)
                    rec["key"] = keys[has]
                    rec["gid"] = (np.uint64(r) << np.uint64(POS_BITS)) | (np.flatnonzero(has) + i).astype(np.uint64)
                    yield rec

        return gen

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        metas = [rank_file(self.folder / "sigs", r, "meta") for r in range(self.source_tasks)]
        bands = [band_file(self.folder, b, r) for b in range(rank, self.config.num_bands, world_size)
                 for r in range(self.source_tasks)]
        missing = [str(f) for f in metas + bands if not f.exists()]
        if missing:
            raise FileNotFoundError(f"minhash: signatures missing (signature tasks not finished?): {missing[:3]}")
        total = sum(f.stat().st_size for f in metas) // DOC_META.itemsize
        if self.index_dir is not None:
            self.index_dir.mkdir(parents=True, exist_ok=True)
            desc = json.dumps(index_description(self.config), indent=1)
            with AtomicWriter(self.index_dir / "index.json") as w:
                w.write(np.frombuffer(desc.encode(), dtype=np.uint8))
        with self.track_time():
            for band in range(rank, self.config.num_bands, world_size):
                earlier = [load_array(p / f"band{band:03d}.u64", np.uint64, mmap=True) for p in self.reuse_index]
                edges = AtomicWriter(self.folder / "edges" / f"band{band:03d}.u64")
                index = AtomicWriter(self.index_dir / f"band{band:03d}.u64") if self.index_dir else None
                try:
                    for part in key_partitions(self._chunks(band), BAND_RECORD, "key", total, self.budget,
                                               self.folder, stats=lambda k, v: self.stat_update(k, value=v),
                                               overhead=BUCKET_OVERHEAD):
                        part = part[np.argsort(part["key"], kind="stable")]
                        first = np.ones(len(part), dtype=bool)
                        first[1:] = part["key"][1:] != part["key"][:-1]
                        anchor = part["gid"][first][np.cumsum(first) - 1]
                        pairs = np.stack([anchor[~first], part["gid"][~first]], axis=1)
                        edges.write(pairs)
                        self.stat_update("candidate_pairs", value=len(pairs))
                        for old in earlier:
                            if not len(old) or not len(part):
                                continue
                            idx = np.minimum(np.searchsorted(old, part["key"]), len(old) - 1)
                            hit = old[idx] == part["key"]
                            if hit.any():
                                g = part["gid"][hit]
                                edges.write(np.stack([g, np.full(len(g), EARLIER_RUN)], axis=1))
                                self.stat_update("index_hits", value=len(g))
                        if index is not None:
                            index.write(part["key"][first])
                except BaseException:
                    edges.abort()
                    index and index.abort()
                    raise
                edges.close()
                index and index.close()
                self.stat_update("bands")
        return
        yield


class MinhashClusters(PipelineStep):
    """Phase (one task): union-find over all candidate edges, one keeper per cluster, drop lists per rank.

    Memory: the edges are streamed from the bucket files in chunks sized by ``memory_budget_mb``; the
    union-find state is dense over the run's documents: 4 bytes (parent) + 4 (best length of the
    component) + 1 (flags) per document, plus chunk-sized temporaries. That per-document state, not the
    number of candidate pairs, is what bounds this phase (10 M documents: ~90 MB)."""

    type = "🫂 - DEDUP"
    name = "🎯 minhash clusters"

    def __init__(self, folder, config: MinHashConfig, source_tasks: int, memory_budget_mb: int = 1024):
        super().__init__()
        self.folder = Path(folder)
        self.config = config
        self.source_tasks = source_tasks
        self.budget = memory_budget_mb * 2**20

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with self.track_time():
            files = [self.folder / "edges" / f"band{b:03d}.u64" for b in range(self.config.num_bands)]
            missing = [str(f) for f in files if not f.exists()]
            if missing:
                raise FileNotFoundError(f"minhash: bucket results missing (bucket tasks not finished?): {missing[:3]}")
            metas = [load_array(rank_file(self.folder / "sigs", r, "meta"), DOC_META, mmap=True)
                     for r in range(self.source_tasks)]
            start = np.concatenate([[0], np.cumsum([len(m) for m in metas])]).astype(np.int64)
            start_u = start.astype(np.uint64)  # uint64 with uint64: numpy would turn int64 + uint64 into float64
            n = int(start[-1])
            old = n  # dense id of "a document of a reused index"
            state = CLUSTER_BYTES_PER_DOC * (n + 1)
            self.stat_update("cluster_state_bytes", value=state)
            if state > self.budget:
                log.warning("minhash clusters: the union-find state of %d documents takes %.0f MB, over the "
                            "memory budget of %.0f MB (this phase needs ~%d bytes per document)",
                            n, state / 1e6, self.budget / 1e6, CLUSTER_BYTES_PER_DOC)
            uf = DenseUnionFind(n + 1)
            step = chunk_records(self.budget, 16 * 4)  # an edge chunk and its temporaries

            def dense(gid: np.ndarray) -> np.ndarray:
                is_old = gid == EARLIER_RUN
                out = start_u[np.where(is_old, 0, gid >> np.uint64(POS_BITS)).astype(np.int64)] + (gid & POS_MASK)
                out[is_old] = old
                return out

            for f in files:
                edges = load_array(f, np.uint64, mmap=True).reshape(-1, 2)
                for i in range(0, len(edges), step):
                    e = np.asarray(edges[i:i + step])
                    uf.union(dense(e[:, 0]), dense(e[:, 1]))
            chunk = max(1024, step // 2)
            root = uf.compress(chunk)
            lengths = [m["len"] for m in metas]

            def length_of(lo: int, hi: int) -> np.ndarray:
                """Text lengths of dense ids lo..hi-1 (never including ``old``)."""
                parts = []
                for r in range(self.source_tasks):
                    a, z = max(lo, int(start[r])), min(hi, int(start[r + 1]))
                    if a < z:
                        parts.append(np.asarray(lengths[r][a - int(start[r]):z - int(start[r])]))
                return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

            # pass 1: which roots have members, and each component's longest text
            has_member = np.zeros(n + 1, dtype=bool)
            best = np.zeros(n + 1, dtype=np.uint32)
            for lo in range(0, n, chunk):
                hi = min(n, lo + chunk)
                r = root[lo:hi]
                has_member[r[r != np.arange(lo, hi, dtype=r.dtype)]] = True
                np.maximum.at(best, r, length_of(lo, hi))
            old_root = int(root[old])
            touches_old = old_root != old  # some document matched a reused index
            # pass 2, in increasing (rank, position) order: keepers and drop lists, written as they are found
            writers = [AtomicWriter(self.folder / "drops" / f"{r:05d}.u64") for r in range(self.source_tasks)]
            n_clusters = n_in = n_old = n_drop = 0
            try:
                for lo in range(0, n, chunk):
                    hi = min(n, lo + chunk)
                    ids = np.arange(lo, hi, dtype=np.int64)
                    r = root[lo:hi].astype(np.int64)
                    in_cluster = (r != ids) | has_member[lo:hi]
                    if not in_cluster.any():
                        continue
                    ids, r = ids[in_cluster], r[in_cluster]
                    n_in += len(ids)
                    n_clusters += int(np.count_nonzero(r == ids))
                    # the first (smallest (rank, position)) document of the component's best length is kept,
                    # none in the component of a reused index; has_member now means "keeper not found yet"
                    open_ = has_member[r] & (r != old_root if touches_old else True)
                    cand = np.flatnonzero(open_ & (length_of(lo, hi)[in_cluster] == best[r]))
                    _, first = np.unique(r[cand], return_index=True)
                    winners = cand[first]
                    has_member[r[winners]] = False
                    keep = np.zeros(len(ids), dtype=bool)
                    keep[winners] = True
                    dropped = ids[~keep]
                    n_drop += len(dropped)
                    n_old += int(np.count_nonzero(r[~keep] == old_root)) if touches_old else 0
                    for rk in range(self.source_tasks):
                        a, z = np.searchsorted(dropped, [start[rk], start[rk + 1]])
                        if z > a:
                            writers[rk].write((dropped[a:z] - start[rk]).astype(np.uint64))
            except BaseException:
                for w in writers:
                    w.abort()
                raise
            for w in writers:
                w.close()
            self.stat_update("clusters", value=n_clusters - int(touches_old))
            self.stat_update("docs_in_clusters", value=n_in)
            self.stat_update("matched_earlier_index", value=n_old)
            self.stat_update("duplicates", value=n_drop)
        return
        yield


@register_stage("minhash_dedup", MinhashDedupParams)
def build_minhash_dedup(p: MinhashDedupParams, ctx: BuildContext):
    """MinHash LSH near-duplicate removal (FineWeb: 5-gram shingles, 14 bands x 8 rows), union-find clusters."""
    cfg = p.config()
    if p.backend == "numba":
        from cuvee.dedup import native
        from cuvee.pipeline.first_use import kernels_before_run

        kernels_before_run(ctx.stage_name, native.KERNELS, native.warm_up)
    reuse = [str(check_index(path, cfg)) for path in p.reuse_index]
    folder = ctx.stage_dir()
    index_dir = (p.index_dir or str(folder / "index")) if p.write_index else None
    return Barrier(
        before=[MinhashSignatures(folder, cfg)],
        phases=[
            Phase("minhash_buckets", [MinhashBuckets(folder, cfg, ctx.tasks, p.memory_budget_mb, reuse, index_dir)],
                  tasks=min(ctx.tasks, p.num_bands)),
            Phase("minhash_clusters", [MinhashClusters(folder, cfg, ctx.tasks, p.memory_budget_mb)], tasks=1),
        ],
        after=[DropListed(folder, "drops/{rank}.u64", "minhash_duplicate", ctx.exclusion_writer())],
    )
