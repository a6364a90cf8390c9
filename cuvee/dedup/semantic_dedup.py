"""Semantic near-duplicate removal: SemDeDup (Abbas et al. 2023) on the run's embedding store.

1. Record (pass-through, per rank): each document's id (as text, to name keepers), its
   :func:`~cuvee.dedup.embed_store.id_hash` and its length. The vectors are the ``embed`` stage's, read from its
   store (``store``), never recomputed.
2. ``semantic_kmeans`` (one task): each document's row in the store; spherical k-means (faiss) fitted on the
   documents of smallest id hash (``fit_fraction``, at least 39 per centroid, at most ``max_fit_documents``:
   the fit's memory), ``clusters`` centroids or one per ``docs_per_cluster`` documents.
3. ``semantic_pairs`` (the run's task count, clusters split by number): every document goes to its nearest
   centroid; inside each cluster :mod:`cuvee.dedup.semdedup` decides (the keep rule's order, a member removed when
   its cosine to an earlier one exceeds ``threshold``, its keeper at the end of its chain). Drop lists and
   cluster records are written per source rank. Each task assigns every document to its centroid and keeps its own
   clusters' (k x dim multiply-adds a document: small next to embedding it), so no assignment files are written.
4. Filter: drops the listed documents as ``semantic_duplicate``; ``semantic_cluster_size`` on every document it
   keeps, ``semantic_duplicate_of`` (the keeper's id) on each dropped one's exclusion record.

Every decision depends on the vectors, ids and lengths alone (the sample, the order inside a cluster and its
ties), so the same documents are kept with any task count as long as a text's vector does not depend on its
batch (the embed stage's CPU default). Pairs split over two clusters are not compared: SemDeDup's recall trade.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.dedup import kmeans, semdedup
from cuvee.dedup.clusters import CLUSTER_RECORD, save_cluster_records
from cuvee.dedup.embed_store import EmbedStore, gather, id_hashes, match_rows, store_dir, writer_of
from cuvee.dedup.files import AtomicWriter, load_array, rank_file, save_array
from cuvee.dedup.steps import DropListed, RecordingStep
from cuvee.kernel import atomic
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

log = logging.getLogger(__name__)

DOC_KEY = np.dtype([("idh", "<u8"), ("len", "<u4")])
ASSIGN_CHUNK = 65_536  # documents assigned to centroids per call


class SemanticDedupParams(StageParams):
    threshold: float = Field(0.95, gt=0, lt=1, description="cosine above which a later member of a cluster is a "
                                                           "duplicate of an earlier one (SemDeDup's 1 - eps); 0.95: "
                                                           "precision >= 0.90 on MRPC's dev pairs (bench_semdedup)")
    keep: Literal["farthest", "nearest", "longest"] = Field(
        "farthest", description="which member of a group is kept: farthest from its centroid (SemDeDup, Curator's "
                                "'hard'), nearest, or the longest text; ties by id hash")
    store: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the embed stage's store")
    clusters: int | None = Field(None, ge=1, description="k-means centroids; default one per docs_per_cluster")
    docs_per_cluster: int = Field(2000, ge=2, description="documents per centroid when clusters is not given")
    fit_fraction: float = Field(0.1, gt=0, le=1, description="share of documents the k-means is fitted on")
    max_fit_documents: int = Field(100_000, ge=1, description="most documents in the fit (its memory: 4 x dim "
                                                              "bytes each)")
    iterations: int = Field(20, ge=1, description="k-means iterations")
    seed: int = 1
    memory_budget_mb: int = Field(512, ge=1, description="per pairs task: similarity blocks of a cluster")

    def metadata_fields(self) -> dict[str, str]:
        return {"semantic_cluster_size": "int64"}  # and semantic_duplicate_of in exclusion records


class SemanticRecorder(RecordingStep):
    name = "🧭 semantic dedup keys"
    records_id_text = True  # keepers are named by id

    def open(self, rank: int) -> None:
        self.keys = AtomicWriter(rank_file(self.folder / "keys", rank, "bin"))

    def record(self, batch: list) -> None:
        keys = np.zeros(len(batch), dtype=DOC_KEY)
        keys["idh"] = id_hashes(batch)
        keys["len"] = np.minimum([len(d.text) for d in batch], 2**32 - 1)
        self.keys.write(keys)

    def close(self, ok: bool) -> None:
        self.keys.close() if ok else self.keys.abort()


def _keys(folder: Path, rank: int) -> np.ndarray:
    path = rank_file(folder / "keys", rank, "bin")
    if not path.exists():
        raise FileNotFoundError(f"semantic dedup: {path} missing (recording task {rank} not finished?)")
    return load_array(path, DOC_KEY)


class SemanticKMeans(PipelineStep):
    """Phase (one task): rows in the store, the fit sample, the centroids."""

    type = "🫂 - DEDUP"
    name = "🧭 semantic k-means"

    def __init__(self, folder, store: Path, source_tasks: int, p: SemanticDedupParams):
        super().__init__()
        self.folder, self.store, self.source_tasks, self.p = Path(folder), Path(store), source_tasks, p

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with self.track_time():
            store = EmbedStore(self.store)
            keys = [_keys(self.folder, r) for r in range(self.source_tasks)]
            for r, k in enumerate(keys):
                rows = match_rows(store.hashes(r), k["idh"], f"semantic dedup (task {r})")
                save_array(rank_file(self.folder / "rows", r, "i64"), rows)
            n = sum(len(k) for k in keys)
            p = self.p
            k, m = kmeans.plan(n, p.clusters, p.docs_per_cluster, p.fit_fraction, p.max_fit_documents)
            dim = int(store.description(0)["dim"]) if self.source_tasks else 0
            centroids = np.zeros((0, dim), dtype=np.float32)
            if k:
                cut = kmeans.sample_cut(np.concatenate([k_["idh"] for k_ in keys]), m)
                parts, order = [], []
                for r, keys_r in enumerate(keys):
                    pick = np.flatnonzero(keys_r["idh"] <= cut)
                    rows = load_array(rank_file(self.folder / "rows", r, "i64"), np.int64)[pick]
                    parts.append(gather(store.vectors(r), rows))
                    order.append(keys_r["idh"][pick])
                x = np.concatenate(parts)
                x = x[np.argsort(np.concatenate(order), kind="stable")]  # by id hash: the same for any split
                centroids = kmeans.fit(x, k, p.seed, p.iterations)
            save_array(self.folder / "kmeans" / "centroids.f32", centroids)
            atomic.write_json(self.folder / "kmeans" / "kmeans.json",
                              {"documents": n, "clusters": k, "fit_documents": m, "dim": dim, "seed": p.seed,
                               "iterations": p.iterations})
            for key, value in (("documents", n), ("clusters", k), ("fit_documents", m)):
                self.stat_update(key, value=value)
        return
        yield


class SemanticPairs(PipelineStep):
    """Phase: each task takes the clusters whose number is its rank modulo the task count and decides in them."""

    type = "🫂 - DEDUP"
    name = "🧭 semantic pairs"

    def __init__(self, folder, store: Path, source_tasks: int, p: SemanticDedupParams):
        super().__init__()
        self.folder, self.store, self.source_tasks, self.p = Path(folder), Path(store), source_tasks, p

    def _members(self, store: EmbedStore, centroids: np.ndarray, rank: int, world_size: int) -> dict:
        """This task's documents: cluster, cosine to its centroid, length, id hash, source rank and position."""
        cols: dict[str, list] = {c: [] for c in ("label", "sim", "len", "idh", "rank", "pos", "row")}
        for r in range(self.source_tasks):
            keys = _keys(self.folder, r)
            rows = load_array(rank_file(self.folder / "rows", r, "i64"), np.int64)
            vectors = store.vectors(r)
            for a in range(0, len(rows), ASSIGN_CHUNK):
                labels, sims = kmeans.assign(gather(vectors, rows[a:a + ASSIGN_CHUNK]), centroids)
                mine = np.flatnonzero(labels % world_size == rank)
                for c, v in (("label", labels[mine]), ("sim", sims[mine]), ("len", keys["len"][a:][mine]),
                             ("idh", keys["idh"][a:][mine]), ("rank", np.full(len(mine), r, dtype=np.int64)),
                             ("pos", mine + a), ("row", rows[a:][mine])):
                    cols[c].append(v)
        return {c: np.concatenate(v) if v else np.zeros(0) for c, v in cols.items()}

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with self.track_time():
            store = EmbedStore(self.store)
            centroids = load_array(self.folder / "kmeans" / "centroids.f32", np.float32)
            dim = int(store.description(0)["dim"]) if self.source_tasks else 1
            centroids = centroids.reshape(-1, dim)
            vectors = [store.vectors(r) for r in range(self.source_tasks)]
            drops: list[list[np.ndarray]] = [[] for _ in range(self.source_tasks)]
            records: list[list[np.ndarray]] = [[] for _ in range(self.source_tasks)]
            counts = dict.fromkeys(("clusters", "duplicates", "groups", "pairs_compared", "largest_cluster"), 0)
            d = self._members(store, centroids, rank, world_size) if len(centroids) else {"label": []}
            if len(d["label"]):
                # by cluster, then the keep rule's order inside it, ties by id hash, source rank, position
                within = semdedup.keep_order(self.p.keep, d["sim"], d["len"], [d["idh"], d["rank"], d["pos"]])
                order = within[np.argsort(d["label"][within], kind="stable")]
                d = {c: v[order] for c, v in d.items()}
                bounds = np.flatnonzero(np.diff(d["label"])) + 1
                for a, b in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(order)]])):
                    counts["clusters"] += 1
                    counts["largest_cluster"] = max(counts["largest_cluster"], int(b - a))
                    if b - a > 1:
                        self._decide(vectors, {c: v[a:b] for c, v in d.items()}, drops, records, counts)
            for r in range(self.source_tasks):
                dropped = np.sort(np.concatenate(drops[r])) if drops[r] else np.zeros(0, dtype=np.uint64)
                save_array(self.folder / "drops" / f"t{rank:03d}.{r:05d}.u64", dropped.astype(np.uint64))
                save_cluster_records(self.folder / "clusters" / f"t{rank:03d}.{r:05d}.bin", records[r])
            for key, value in counts.items():
                self.stat_update(key, value=value)
        return
        yield

    def _decide(self, vectors: list, c: dict, drops: list, records: list, counts: dict) -> None:
        """One cluster (members in keep order): drop lists and cluster records of its groups of two or more."""
        x = np.empty((len(c["row"]), vectors[0].shape[1] if vectors else 0), dtype=np.float32)
        for r in np.unique(c["rank"]):
            at = np.flatnonzero(c["rank"] == r)
            x[at] = gather(vectors[r], c["row"][at])
        keeper, size = semdedup.decide(x, self.p.threshold, self.p.memory_budget_mb * 2**20)
        m = len(keeper)
        counts["pairs_compared"] += m * (m - 1) // 2
        grouped = np.flatnonzero(size > 1)
        removed = keeper != np.arange(m)
        counts["duplicates"] += int(removed.sum())
        counts["groups"] += int(np.count_nonzero(~removed & (size > 1)))
        for r in np.unique(c["rank"][grouped]):
            mine = grouped[c["rank"][grouped] == r]
            rec = np.zeros(len(mine), dtype=CLUSTER_RECORD)
            rec["pos"] = c["pos"][mine]
            rec["size"] = size[mine]
            rec["krank"] = c["rank"][keeper[mine]]
            rec["kpos"] = c["pos"][keeper[mine]]
            records[r].append(rec)
            gone = mine[removed[mine]]
            if len(gone):
                drops[r].append(c["pos"][gone].astype(np.uint64))


@register_stage("semantic_dedup", SemanticDedupParams)
def build_semantic_dedup(p: SemanticDedupParams, ctx: BuildContext):
    """SemDeDup semantic near-duplicate removal: k-means (faiss) on the embed stage's vectors, cosine within clusters."""
    writer_of(ctx, p.store, "semantic_dedup")
    folder, store = ctx.stage_dir(), store_dir(ctx.work_dir, p.store)
    return Barrier(
        before=[SemanticRecorder(folder)],
        phases=[Phase("semantic_kmeans", [SemanticKMeans(folder, store, ctx.tasks, p)], tasks=1),
                Phase("semantic_pairs", [SemanticPairs(folder, store, ctx.tasks, p)], tasks=ctx.tasks)],
        after=[DropListed(folder, "drops/t*.{rank}.u64", "semantic_duplicate", ctx.exclusion_writer(),
                          clusters_glob="clusters/t*.{rank}.bin", kind="semantic")],
    )
