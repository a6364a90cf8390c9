"""MinHash LSH near-duplicate removal (FineWeb defaults: 5-word shingles, 14 bands x 8 rows).

1. Signatures (pass-through, per rank): b*r uint32 minimums per document (with the default ``numba``
   backend tokenising, hashing and minimums run in one compiled loop), folded at once into one 64-bit key
   per band and stored *band-major*: ``bands/<band>/<rank>.key.u64`` (8 bytes per document and band), plus
   the document's length. A bucket task reads only its own bands' keys; the full signatures (4*b*r bytes
   per document) are never written, so nothing is re-read once per band.
2. Buckets (phase, one task per group of bands): per band, (band key, document) records are grouped by
   key with the partitioned spill (memory within ``memory_budget_mb``); every group of equal keys gives
   candidate edges; with ``verify``, each edge must also pass a Jaccard / containment estimate from bottom-k
   shingle sketches written beside the band keys (:mod:`cuvee.dedup.sketch_verify`). A key found in a reused
   index (``reuse_index``) links the document to the cluster of the earlier run that holds the key (unchecked:
   an earlier run has no sketches). The band's sorted keys are written as this run's index
   (:mod:`cuvee.dedup.minhash_index`).
3. Clusters (phase, one task): union-find over the edges, streamed from the bucket files in chunks of
   ``memory_budget_mb``; the union-find state is dense over the run's documents (~13 bytes each, see
   ``MinhashClusters``). Keep rule, per cluster: if it touches an earlier run's cluster, no document is
   kept (the earlier run already holds a copy: the earlier cluster's keeper, the largest cluster's if several,
   stays the keeper); otherwise the longest text is kept, ties going to the smallest (rank, position). All
   others are listed for the filter. Every member's cluster (its size, the earlier runs' members counted, and
   its keeper) is written for the filter (:mod:`cuvee.dedup.clusters`) and into this run's index.
4. Filter: drops the listed documents as ``minhash_duplicate``; writes ``minhash_cluster_size`` on every document
   (FineWeb-2's name, for rehydration) and ``minhash_duplicate_of`` on the copies it drops (exclusion records).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.dedup.clusters import CLUSTER_RECORD, EARLIER, StringTableWriter, id_table_prefix
from cuvee.dedup.files import AtomicWriter, load_array, rank_file
from cuvee.dedup.minhash import MinHashConfig, MinHasher
from cuvee.dedup.minhash_index import (
    POS_BITS,
    POS_MASK,
    EarlierClusters,
    EarlierIndex,
    check_index,
    index_description,
)
from cuvee.dedup.sketch_verify import SketchStore, SketchWriter, VerifyParams, estimate, passes
from cuvee.dedup.spill import chunk_records, key_partitions
from cuvee.dedup.steps import DropListed, RecordingStep
from cuvee.dedup.unionfind import DenseUnionFind
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

log = logging.getLogger(__name__)

BAND_RECORD = np.dtype([("key", "<u8"), ("gid", "<u8")])
# bucket work per byte of band records: records, argsort, sorted copy, first/cumsum/anchor, pairs (measured)
BUCKET_OVERHEAD = 6.0
# parent (uint32) + best length, then keeper (uint32) + flag (bool) + members (uint32); 21 above 2^32 documents
CLUSTER_BYTES_PER_DOC = 13
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
    verify: VerifyParams | None = Field(
        None, description="second-stage check of every LSH edge (Jaccard / containment from bottom-k sketches): "
                          "lets a low-threshold band layout find partial copies without keeping false candidates")

    def config(self) -> MinHashConfig:
        return MinHashConfig(self.n_grams, self.num_bands, self.rows_per_band, self.seed, self.backend)

    def metadata_fields(self) -> dict[str, str]:
        return {"minhash_cluster_size": "int64"}  # and minhash_duplicate_of in exclusion records


def band_file(folder: Path, band: int, rank: int) -> Path:
    """One rank's 64-bit keys of one band, in document order (band-major signature storage)."""
    return rank_file(Path(folder) / "bands" / f"{band:03d}", rank, "key.u64")


class MinhashSignatures(RecordingStep):
    name = "🎯 minhash signatures"
    batch_size = 512  # one compiled call per batch
    records_id_text = True  # the clusters phase names each cluster's keeper

    def __init__(self, folder, config: MinHashConfig, verify: VerifyParams | None = None):
        super().__init__(folder)
        self.config = config
        self.verify = verify
        self._hasher: MinHasher | None = None

    def open(self, rank: int) -> None:
        self._hasher = self._hasher or MinHasher(self.config)
        self.bands = [AtomicWriter(band_file(self.folder, b, rank)) for b in range(self.config.num_bands)]
        self.meta = AtomicWriter(rank_file(self.folder / "sigs", rank, "meta"))
        self.sketches = SketchWriter(self.folder, rank, self.verify.sketch_size) if self.verify else None

    def record(self, batch: list) -> None:
        sig, has = self._hasher.signatures([d.text for d in batch])
        meta = np.zeros(len(batch), dtype=DOC_META)
        meta["len"] = np.minimum([len(d.text) for d in batch], 2**32 - 1)
        meta["has"] = has
        self.stat_update("no_shingles", value=int((~has).sum()))
        for b, w in enumerate(self.bands):
            w.write(self._hasher.band_keys(sig, b))
        self.meta.write(meta)
        if self.sketches:
            self.sketches.write([self._hasher.shingles(d.text) for d in batch])

    def close(self, ok: bool) -> None:
        for w in (*self.bands, self.meta):
            w.close() if ok else w.abort()
        if self.sketches:
            self.sketches.close(ok)


class MinhashBuckets(PipelineStep):
    """Phase: candidate pairs per band (equal band keys), matches against reused indexes, this run's index."""

    type = "🫂 - DEDUP"
    name = "🎯 minhash buckets"

    def __init__(self, folder, config: MinHashConfig, source_tasks: int, memory_budget_mb: int,
                 reuse_index: list[str], index_dir: str | None, verify: VerifyParams | None = None):
        super().__init__()
        self.folder = Path(folder)
        self.config = config
        self.verify = verify
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
        sketches = SketchStore(self.folder, self.source_tasks, self.verify.sketch_size) if self.verify else None
        with self.track_time():
            for band in range(rank, self.config.num_bands, world_size):
                earlier = [EarlierIndex(p, i).band_with_refs(band) for i, p in enumerate(self.reuse_index)]
                edges = AtomicWriter(self.folder / "edges" / f"band{band:03d}.u64")
                hits = AtomicWriter(self.folder / "edges" / f"earlier{band:03d}.u64")
                index = AtomicWriter(self.index_dir / f"band{band:03d}.u64") if self.index_dir else None
                holders = AtomicWriter(self.index_dir / f"band{band:03d}.gid.u64") if self.index_dir else None
                writers = [w for w in (edges, hits, index, holders) if w is not None]
                try:
                    for part in key_partitions(self._chunks(band), BAND_RECORD, "key", total, self.budget,
                                               self.folder, stats=lambda k, v: self.stat_update(k, value=v),
                                               overhead=BUCKET_OVERHEAD):
                        part = part[np.argsort(part["key"], kind="stable")]
                        first = np.ones(len(part), dtype=bool)
                        first[1:] = part["key"][1:] != part["key"][:-1]
                        anchor = part["gid"][first][np.cumsum(first) - 1]
                        pairs = np.stack([anchor[~first], part["gid"][~first]], axis=1)
                        self.stat_update("candidate_pairs", value=len(pairs))
                        if sketches is not None and len(pairs):
                            pairs = pairs[self._verified(pairs, sketches)]
                            self.stat_update("verified_pairs", value=len(pairs))
                        edges.write(pairs)
                        for old, refs in earlier:  # a key of a reused index: an edge to that run's cluster
                            if not len(old) or not len(part):
                                continue
                            idx = np.minimum(np.searchsorted(old, part["key"]), len(old) - 1)
                            hit = old[idx] == part["key"]
                            if hit.any():
                                g = part["gid"][hit]
                                hits.write(np.stack([g, refs(idx[hit])], axis=1))
                                self.stat_update("index_hits", value=len(g))
                        if index is not None:
                            index.write(part["key"][first])
                            holders.write(part["gid"][first])
                except BaseException:
                    for w in writers:
                        w.abort()
                    raise
                for w in writers:
                    w.close()
                self.stat_update("bands")
        return
        yield

    def _verified(self, pairs: np.ndarray, sketches: SketchStore) -> np.ndarray:
        """Which (anchor, member) edges the sketches confirm. An edge is only checked against its bucket's
        anchor: a member that fails there can still join its cluster through another band."""
        rank_a, pos_a = pairs[:, 0] >> np.uint64(POS_BITS), (pairs[:, 0] & POS_MASK).astype(np.int64)
        rank_b, pos_b = pairs[:, 1] >> np.uint64(POS_BITS), (pairs[:, 1] & POS_MASK).astype(np.int64)
        sa, na = sketches.rows(rank_a, pos_a)
        sb, nb_ = sketches.rows(rank_b, pos_b)
        return passes(self.verify, *estimate(sa, na, sb, nb_))


class MinhashClusters(PipelineStep):
    """Phase (one task): union-find over all candidate edges, one keeper per cluster, drop lists and cluster
    records per rank, and this run's cluster records in its index.

    Memory: the edges are streamed from the bucket files in chunks sized by ``memory_budget_mb``; the
    union-find state is dense over the run's documents: 4 bytes (parent) + 4 (best length of the component, then
    its keeper) + 4 (members) + 1 (flags) per document, plus chunk-sized temporaries. That per-document state,
    not the number of candidate pairs, is what bounds this phase (10 M documents: ~130 MB). Each cluster of a
    reused index that documents matched is one more node (:class:`~cuvee.dedup.minhash_index.EarlierClusters`)."""

    type = "🫂 - DEDUP"
    name = "🎯 minhash clusters"

    def __init__(self, folder, config: MinHashConfig, source_tasks: int, memory_budget_mb: int = 1024,
                 reuse_index: list[str] | None = None, index_dir: str | None = None):
        super().__init__()
        self.folder = Path(folder)
        self.config = config
        self.source_tasks = source_tasks
        self.budget = memory_budget_mb * 2**20
        self.reuse_index = [Path(p) for p in reuse_index or []]
        self.index_dir = Path(index_dir) if index_dir else None

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with self.track_time():
            bands = range(self.config.num_bands)
            files = [self.folder / "edges" / f"band{b:03d}.u64" for b in bands]
            hit_files = [self.folder / "edges" / f"earlier{b:03d}.u64" for b in bands]
            missing = [str(f) for f in files + hit_files if not f.exists()]
            if missing:
                raise FileNotFoundError(f"minhash: bucket results missing (bucket tasks not finished?): {missing[:3]}")
            metas = [load_array(rank_file(self.folder / "sigs", r, "meta"), DOC_META, mmap=True)
                     for r in range(self.source_tasks)]
            start = np.concatenate([[0], np.cumsum([len(m) for m in metas])]).astype(np.int64)
            n = int(start[-1])
            earlier = EarlierClusters.from_edge_files(hit_files, self.reuse_index)
            state = CLUSTER_BYTES_PER_DOC * (n + len(earlier))
            self.stat_update("cluster_state_bytes", value=state)
            if state > self.budget:
                log.warning("minhash clusters: the union-find state of %d documents takes %.0f MB, over the "
                            "memory budget of %.0f MB (this phase needs ~%d bytes per document)",
                            n, state / 1e6, self.budget / 1e6, CLUSTER_BYTES_PER_DOC)
            self.step = chunk_records(self.budget, 16 * 4)  # an edge chunk and its temporaries
            root = self._components(files, hit_files, start, n, earlier)
            self._keep_and_record(root, metas, start, n, earlier)
        return
        yield

    def _components(self, files, hit_files, start, n: int, earlier: EarlierClusters) -> np.ndarray:
        """Every node's root (its component's smallest node): documents 0..n-1, then one node per earlier cluster."""
        uf = DenseUnionFind(n + len(earlier))
        start_u = start.astype(np.uint64)  # uint64 with uint64: numpy would turn int64 + uint64 into float64

        def dense(gid: np.ndarray) -> np.ndarray:
            return start_u[(gid >> np.uint64(POS_BITS)).astype(np.int64)] + (gid & POS_MASK)

        for f, hits in zip(files, hit_files):
            edges = load_array(f, np.uint64, mmap=True).reshape(-1, 2)
            for i in range(0, len(edges), self.step):
                e = np.asarray(edges[i:i + self.step])
                uf.union(dense(e[:, 0]), dense(e[:, 1]))
            edges = load_array(hits, np.uint64, mmap=True).reshape(-1, 2)
            for i in range(0, len(edges), self.step):
                e = np.asarray(edges[i:i + self.step])
                uf.union(dense(e[:, 0]), n + earlier.nodes(e[:, 1]))
        return uf.compress(max(1024, self.step // 2))

    def _keep_and_record(self, root: np.ndarray, metas, start, n: int, earlier: EarlierClusters) -> None:
        chunk = max(1024, self.step // 2)
        lengths = [m["len"] for m in metas]

        def length_of(lo: int, hi: int) -> np.ndarray:
            """Text lengths of documents lo..hi-1."""
            parts = []
            for r in range(self.source_tasks):
                a, z = max(lo, int(start[r])), min(hi, int(start[r + 1]))
                if a < z:
                    parts.append(np.asarray(lengths[r][a - int(start[r]):z - int(start[r])]))
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

        def chunks():
            for lo in range(0, n, chunk):
                hi = min(n, lo + chunk)
                yield np.arange(lo, hi, dtype=np.int64), root[lo:hi].astype(np.int64), length_of(lo, hi)

        # pass 1: which roots have other members, each component's longest text and its member count
        total = len(root)
        has_member = np.zeros(total, dtype=bool)
        best = np.zeros(total, dtype=root.dtype)  # longest text; from pass 2 on, the keeper once found
        members = np.zeros(total, dtype=np.uint32)
        for ids, r, length in chunks():
            has_member[r[r != ids]] = True
            np.maximum.at(best, r, length)
            u, c = np.unique(r, return_counts=True)
            members[u] += c.astype(np.uint32)
        # components holding an earlier run's cluster: that run's members, and the keeper (its largest cluster)
        e_root = root[n:].astype(np.int64)
        has_member[e_root] = True
        order = np.lexsort((np.arange(len(e_root)), -earlier.sizes.astype(np.int64), e_root))
        touched, first = np.unique(e_root[order], return_index=True)
        e_keeper = order[first]
        e_members = np.add.reduceat(earlier.sizes[order], first) if len(order) else np.zeros(0, dtype=np.uint64)

        def touching(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            i = np.minimum(np.searchsorted(touched, r), max(len(touched) - 1, 0))
            return (touched[i] == r) if len(touched) else np.zeros(len(r), dtype=bool), i

        # pass 2, in increasing (rank, position) order: the first document of the component's best length is its
        # keeper, none in a component of an earlier run; has_member now means "keeper not found yet"
        for ids, r, length in chunks():
            cand = np.flatnonzero(has_member[r] & ~touching(r)[0] & (length == best[r]))
            _, first = np.unique(r[cand], return_index=True)
            winners = cand[first]
            has_member[r[winners]] = False
            best[r[winners]] = ids[winners]
        # pass 3: drop lists, every member's cluster record, and the index's cluster of every document
        writers = [AtomicWriter(self.folder / "drops" / f"{r:05d}.u64") for r in range(self.source_tasks)]
        records = [AtomicWriter(self.folder / "clusters" / f"{r:05d}.bin") for r in range(self.source_tasks)]
        index = [AtomicWriter(self.index_dir / name) for name in ("cluster.u64", "size.u64")] if self.index_dir else []
        earlier_ids = StringTableWriter(self.folder / "clusters" / "earlier")
        counts = dict.fromkeys(("clusters", "docs_in_clusters", "matched_earlier_index", "duplicates"), 0)
        try:
            for ids, r, _ in chunks():
                hit, i = touching(r)
                size = members[r].astype(np.uint64)
                if len(touched):
                    size[hit] += e_members[i[hit]].astype(np.uint64)
                in_cluster = size > 1
                keeper = best[r].astype(np.int64)
                kept = in_cluster & ~hit & (keeper == ids)
                dropped = ids[in_cluster & ~kept]
                counts["clusters"] += int(np.count_nonzero(kept))
                counts["docs_in_clusters"] += int(np.count_nonzero(in_cluster))
                counts["matched_earlier_index"] += int(np.count_nonzero(hit))
                counts["duplicates"] += len(dropped)
                rec = np.zeros(int(in_cluster.sum()), dtype=CLUSTER_RECORD)
                rank_of = np.searchsorted(start, ids, side="right") - 1
                k_rank = np.searchsorted(start, keeper, side="right") - 1
                rec["pos"] = (ids - start[rank_of])[in_cluster]
                rec["size"] = size[in_cluster]
                rec["krank"] = np.where(hit, EARLIER, k_rank)[in_cluster]
                rec["kpos"] = np.where(hit, e_keeper[i] if len(touched) else 0, keeper - start[k_rank])[in_cluster]
                for rk in range(self.source_tasks):
                    a, z = np.searchsorted(dropped, [start[rk], start[rk + 1]])
                    if z > a:
                        writers[rk].write((dropped[a:z] - start[rk]).astype(np.uint64))
                    mine = rank_of[in_cluster] == rk
                    if mine.any():
                        records[rk].write(rec[mine])
                if index:  # the string number of each document's keeper: its own id, another's, or an earlier one
                    string = np.where(hit, n + (e_keeper[i] if len(touched) else 0), np.where(in_cluster, keeper, ids))
                    index[0].write(string.astype(np.uint64))
                    index[1].write(size)
            earlier_ids.write(earlier.keepers)
            if index:  # an earlier cluster's string: the size of the component that holds it
                index[1].write(members[e_root].astype(np.uint64) + e_members[np.searchsorted(touched, e_root)]
                               if len(e_root) else np.zeros(0, dtype=np.uint64))
                self._write_index_ids(start, earlier)
        except BaseException:
            for w in (*writers, *records, *index):
                w.abort()
            earlier_ids.close(ok=False)
            raise
        for w in (*writers, *records, *index):
            w.close()
        earlier_ids.close()
        counts["earlier_clusters"] = len(touched)  # components joined to a cluster of a reused index
        for key, value in counts.items():
            self.stat_update(key, value=value)

    def _write_index_ids(self, start: np.ndarray, earlier: EarlierClusters) -> None:
        """The index's strings (this run's document ids by number, then the earlier keepers) and rank starts."""
        ids = StringTableWriter(self.index_dir / "ids")
        try:
            for r in range(self.source_tasks):
                ids.copy_from(id_table_prefix(self.folder, r))
            ids.write(earlier.keepers)
        except BaseException:
            ids.close(ok=False)
            raise
        ids.close()
        with AtomicWriter(self.index_dir / "ranks.u64") as w:
            w.write(start[:-1].astype(np.uint64))


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
        before=[MinhashSignatures(folder, cfg, p.verify)],
        phases=[
            Phase("minhash_buckets", [MinhashBuckets(folder, cfg, ctx.tasks, p.memory_budget_mb, reuse, index_dir,
                                                     p.verify)],
                  tasks=min(ctx.tasks, p.num_bands)),
            Phase("minhash_clusters", [MinhashClusters(folder, cfg, ctx.tasks, p.memory_budget_mb, reuse, index_dir)],
                  tasks=1),
        ],
        after=[DropListed(folder, "drops/{rank}.u64", "minhash_duplicate", ctx.exclusion_writer(),
                          clusters_glob="clusters/{rank}.bin", kind="minhash")],
    )
