"""``cluster``: each document's k-means cluster over the run's embeddings, as metadata a mix can select (CLIMB's
clusters as mix sources: ``where: {cluster: 3}``), with a short description of each cluster for the card.

It reads the ``embed`` stage's store, as ``semantic_dedup`` does, and shares its machinery: the recording pass
(:class:`~cuvee.dedup.semantic_dedup.SemanticRecorder`, each document's id hash), the k-means phase
(:class:`~cuvee.dedup.semantic_dedup.SemanticKMeans`: spherical faiss k-means fitted on the documents of smallest
id hash, so the centroids are the same for any task count) and :func:`cuvee.dedup.kmeans.assign`.

After the barrier :class:`ClusterAssign` writes ``<key>`` (the nearest centroid's number) and ``<key>_cosine`` (the
cosine to it) on every document, and per task the clusters' sizes, word document frequencies (the 500 most frequent
words of each cluster in that task, from each document's first 5,000 characters) and the first titles or URLs; the
stage's report (stats.json ``clusters``) merges them and names each cluster by its most *distinctive* words: a
word's share of the cluster's documents times the log of how much more often it occurs there than in the corpus
(a word as common everywhere as in the cluster scores 0, so no stop-word list is needed).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.dedup import kmeans
from cuvee.dedup.embed_store import EmbedStore, RowWalker, gather, id_hashes, store_dir, writer_of
from cuvee.dedup.files import load_array, rank_file
from cuvee.dedup.semantic_dedup import SemanticKMeans, SemanticRecorder
from cuvee.kernel import atomic
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

WORD = re.compile(r"[^\W\d_]{3,}")
WORDS_PER_CLUSTER = 500  # kept per cluster and task for the description
CHARS_READ = 5000  # of each document, for the description's words
BATCH = 256


class ClusterParams(StageParams):
    clusters: int = Field(8, ge=1, le=4096, description="k-means centroids (at most one per fitted document)")
    store: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the embed stage's store")
    key: str = Field("cluster", pattern=r"^[a-z][a-z0-9_]{0,40}$",
                     description="metadata key of the cluster number (and <key>_cosine)")
    fit_fraction: float = Field(1.0, gt=0, le=1, description="share of documents the k-means is fitted on (at "
                                                             "least 39 per centroid)")
    max_fit_documents: int = Field(100_000, ge=1, description="most documents in the fit (its memory: 4 x dim "
                                                              "bytes each)")
    iterations: int = Field(20, ge=1, description="k-means iterations")
    seed: int = 1
    describe_terms: int = Field(8, ge=0, le=50, description="distinctive words per cluster in the card")
    describe_samples: int = Field(3, ge=0, le=20, description="titles (or URLs) per cluster in the card")

    @property
    def docs_per_cluster(self) -> int:  # what SemanticKMeans reads when clusters is unset: never here
        return 2

    def metadata_fields(self) -> dict[str, str]:
        return {self.key: "int64", f"{self.key}_cosine": "double"}


class ClusterAssign(PipelineStep):
    """After the barrier: each document's nearest centroid (and cosine) into its metadata; this task's description
    counts into ``describe/NNNNN.json``."""

    type = "🤖 - CLASSIFIER"
    name = "🧭 cluster"
    replays_exactly = True  # the centroids and the store decide: the same on every read

    def __init__(self, folder, store: Path, p: ClusterParams):
        super().__init__()
        self.folder, self.store, self.p = Path(folder), Path(store), p

    def run(self, data, rank: int = 0, world_size: int = 1):
        store = EmbedStore(self.store)
        dim = int(store.description(rank)["dim"])
        centroids = load_array(self.folder / "kmeans" / "centroids.f32", np.float32).reshape(-1, dim)
        walker = RowWalker(store.hashes(rank), f"cluster (task {rank})")
        vectors = store.vectors(rank)
        sizes: Counter = Counter()
        words: dict[int, Counter] = {}
        samples: dict[int, list[str]] = {}
        batch: list = []
        for doc in data or ():
            batch.append(doc)
            if len(batch) >= BATCH:
                yield from self._assign(batch, walker, vectors, centroids, sizes, words, samples)
                batch = []
        if batch:
            yield from self._assign(batch, walker, vectors, centroids, sizes, words, samples)
        (self.folder / "describe").mkdir(parents=True, exist_ok=True)
        atomic.write_json(rank_file(self.folder / "describe", rank, "json"), {
            "sizes": {str(c): n for c, n in sorted(sizes.items())},
            "words": {str(c): dict(w.most_common(WORDS_PER_CLUSTER)) for c, w in sorted(words.items())},
            "samples": {str(c): s for c, s in sorted(samples.items())}})

    def _assign(self, batch, walker, vectors, centroids, sizes, words, samples):
        self.stat_update("total", value=len(batch))
        with self.track_time("batch"):
            labels, sims = kmeans.assign(gather(vectors, walker.take(id_hashes(batch))), centroids)
            for doc, c, s in zip(batch, labels.tolist(), sims.tolist()):
                doc.metadata[self.p.key] = c
                doc.metadata[f"{self.p.key}_cosine"] = round(float(s), 6)
                sizes[c] += 1
                words.setdefault(c, Counter()).update(set(WORD.findall(doc.text[:CHARS_READ].lower())))
                took = samples.setdefault(c, [])
                if len(took) < self.p.describe_samples:
                    took.append(_sample_name(doc))
        self.stat_update("forwarded", value=len(batch))
        yield from batch


def _sample_name(doc) -> str:
    """A document as the card names it: its title, else its URL, else its first line (cut to 100 characters)."""
    m = doc.metadata
    name = m.get("title") or m.get("url") or (doc.text.strip().splitlines() or [""])[0]
    return " ".join(str(name).split())[:100]


def distinctive(words: Counter, size: int, corpus: Counter, total: int, top: int) -> list[str]:
    """The ``top`` words that most set a cluster apart: share in the cluster x log(share there / share overall);
    words in under 2 documents of the cluster are left out."""
    scored = []
    for w, df in words.items():
        if df < 2:
            continue
        inside, overall = df / size, corpus[w] / total
        scored.append((-inside * math.log(inside / overall), w))
    return [w for s, w in sorted(scored) if s < 0][:top]


def cluster_report(p: ClusterParams, stage_dir: Path, counters: dict) -> dict:
    """stats.json ``clusters``: per cluster its documents, share, distinctive words and first titles (merged over
    the tasks that finished)."""
    folder = Path(stage_dir)
    meta = folder / "kmeans" / "kmeans.json"
    fit = json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else {}
    sizes: Counter = Counter()
    words: dict[str, Counter] = {}
    samples: dict[str, list] = {}
    for f in sorted((folder / "describe").glob("*.json")):
        d = json.loads(f.read_text(encoding="utf-8"))
        sizes.update(d["sizes"])
        for c, w in d["words"].items():
            words.setdefault(c, Counter()).update(w)
        for c, s in d["samples"].items():
            samples.setdefault(c, []).extend(s)
    total = sum(sizes.values())
    corpus: Counter = Counter()
    for w in words.values():
        corpus.update(w)
    rows = [{"cluster": int(c), "documents": n, "share": round(n / total, 6) if total else 0.0,
             "terms": distinctive(words.get(c, Counter()), n, corpus, total, p.describe_terms),
             "samples": samples.get(c, [])[:p.describe_samples]}
            for c, n in sorted(sizes.items(), key=lambda kv: int(kv[0]))]
    return {"key": p.key, "store": p.store, "clusters_asked": p.clusters, "clusters": fit.get("clusters"),
            "fit_documents": fit.get("fit_documents"), "documents": total, "seed": p.seed,
            "rule": "spherical k-means (faiss) on the embed stage's vectors, fitted on the documents of smallest "
                    "id hash; each document to its nearest centroid by cosine",
            "by_cluster": rows}


@register_stage("cluster", ClusterParams, report=("clusters", cluster_report))
def build_cluster(p: ClusterParams, ctx: BuildContext):
    """k-means clusters of the embed stage's vectors as metadata (cluster, cluster_cosine), described in the card."""
    writer_of(ctx, p.store, "cluster")
    folder, store = ctx.stage_dir(), store_dir(ctx.work_dir, p.store)
    kmeans_step = SemanticKMeans(folder, store, ctx.tasks, p)
    kmeans_step.name = "🧭 cluster k-means"
    return Barrier(before=[SemanticRecorder(folder)],
                   phases=[Phase("cluster_kmeans", [kmeans_step], tasks=1)],
                   after=[ClusterAssign(folder, store, p)])
