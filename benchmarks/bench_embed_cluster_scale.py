"""Throughput of the embedding uses (issue #35): CPU documents per second per core for ``embed`` (real pages),
and for ``cluster`` and ``semantic_dedup`` at 100,000 documents, with the work split over tasks as a run splits it.

1. ``embed``: the stage itself (``run_recipe``, one task, one torch thread) on the first ``--pages`` WCXB pages
   of ``data/curated`` (CC-BY-4.0), its encoder CPU per document from ``stats.json`` (``embeddings``); the peer is
   sentence-transformers' ``SentenceTransformer.encode`` as its users call it (batch 32, the same shipped MiniLM,
   the same 256 word pieces, one thread), on the same texts. Both give unit vectors: their cosine is printed.
2. ``cluster`` and ``semantic_dedup`` at ``--docs`` documents: **synthetic copies, stated**. The real pages'
   vectors from (1), each copied with Gaussian noise (sigma ``--noise`` per coordinate, then renormalised, so a copy
   keeps a cosine of about 0.8-0.95 to its page) into an embedding store of ``--tasks`` ranks, and documents of a
   few words each. The stages' own steps run as the executor runs them (recorder per task, the k-means phase in
   one task, the pairs phase in ``--tasks`` tasks, the filter/assignment per task), in this process; CPU seconds
   per phase (``getrusage``), median [min-max] of ``--runs``.

GPU: not measured here (no GPU on this machine); NeMo Curator's published semantic dedup runs on GPUs only.

    python benchmarks/bench_embed_cluster_scale.py --docs 100000 --tasks 2 --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from datatrove.data import Document

from cuvee.dedup.embed_store import EmbedStore, StoreWriter, store_dir
from cuvee.dedup.semantic_dedup import SemanticDedupParams, SemanticKMeans, SemanticPairs, SemanticRecorder
from cuvee.dedup.steps import DropListed
from cuvee.dedup.topic_clusters import ClusterAssign, ClusterParams, cluster_report
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
WORDS = ("river", "market", "python", "garden", "engine", "course", "health", "camera", "travel", "music")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def spread(v: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}-{fmt.format(max(v))}]"


def pages(n: int) -> list[str]:
    out = []
    with gzip.open(PAGES, "rt", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line).get("main_content")
            if t:
                out.append(t)
            if len(out) == n:
                break
    return out


def embed_stage(texts: list[str], tmp: Path) -> tuple[float, np.ndarray]:
    """The embed stage's encoder CPU ms per document, and the vectors it stored."""
    src = tmp / "in"
    src.mkdir(parents=True, exist_ok=True)
    (src / "p.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    run_dir = tmp / "run"
    stats = run_recipe({"name": "bench", "run_dir": str(run_dir), "input": {"paths": [str(src)], "format": "jsonl"},
                        "stages": [{"stage": "embed", "threads": 1}], "output": {"format": "jsonl"},
                        "executor": {"kind": "local", "tasks": 1, "workers": 1}})
    vectors = np.asarray(EmbedStore(store_dir(run_dir / "work", "default")).vectors(0), dtype=np.float32)
    return stats["embeddings"][0]["cpu_ms_per_doc"], vectors


def peer_embed(texts: list[str]) -> tuple[float, np.ndarray]:
    """sentence-transformers on the same texts: CPU ms per document (model loading excluded, as for the stage)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from cuvee.classifiers.embedder import bundled_minilm_path

    torch.set_num_threads(1)
    model = SentenceTransformer(bundled_minilm_path(), device="cpu")
    model.max_seq_length = 256
    c = cpu()
    v = model.encode(texts, batch_size=32, normalize_embeddings=True)
    return 1000 * (cpu() - c) / len(texts), np.asarray(v, dtype=np.float32)


def synthetic_store(base: np.ndarray, n: int, tasks: int, noise: float, folder: Path, seed: int) -> list[list]:
    """``n`` noisy copies of the base vectors dealt over ``tasks`` ranks of a store; the documents of each rank."""
    rng = np.random.default_rng(seed)
    docs_by_rank = []
    for r in range(tasks):
        ids = np.arange(r, n, tasks)
        x = base[ids % len(base)] + rng.normal(0, noise, (len(ids), base.shape[1])).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        docs = [Document(text=f"{WORDS[i % 10]} {WORDS[(i // 10) % 10]} page {i}", id=f"s{i}") for i in ids.tolist()]
        w = StoreWriter(folder, r, base.shape[1])
        for a in range(0, len(docs), 4096):
            w.write(docs[a:a + 4096], x[a:a + 4096])
        w.close(True, {"model": "synthetic"})
        docs_by_rank.append(docs)
    return docs_by_rank


def drain(step, docs, rank: int, world: int) -> list:
    return list(step.run(iter(docs), rank=rank, world_size=world))


def record_and_fit(store: Path, docs_by_rank: list, work: Path, p) -> dict[str, float]:
    """The two steps both stages share (SemanticRecorder in every task, SemanticKMeans in one), CPU seconds each."""
    tasks = len(docs_by_rank)
    t = {}
    c = cpu()
    for r, docs in enumerate(docs_by_rank):
        drain(SemanticRecorder(work), docs, r, tasks)
    t["record"] = cpu() - c
    c = cpu()
    list(SemanticKMeans(work, store, tasks, p).run() or ())
    t["k-means fit"] = cpu() - c
    return t


def cluster_once(store: Path, docs_by_rank: list, work: Path, k: int) -> dict[str, float]:
    tasks = len(docs_by_rank)
    p = ClusterParams(clusters=k)
    t = record_and_fit(store, docs_by_rank, work, p)
    c = cpu()
    labels = [m.metadata["cluster"] for r, docs in enumerate(docs_by_rank)
              for m in drain(ClusterAssign(work, store, p), docs, r, tasks)]
    t["assign + describe"] = cpu() - c
    c = cpu()
    cluster_report(p, work, {})
    t["report"] = cpu() - c
    t["_largest"] = max(np.bincount(labels))
    return t


def semantic_once(store: Path, docs_by_rank: list, work: Path) -> dict[str, float]:
    tasks = len(docs_by_rank)
    t = record_and_fit(store, docs_by_rank, work, SemanticDedupParams())
    c = cpu()
    for r in range(tasks):
        list(SemanticPairs(work, store, tasks, SemanticDedupParams()).run(rank=r, world_size=tasks) or ())
    t["pairs"] = cpu() - c
    c = cpu()
    kept = sum(len(drain(DropListed(work, "drops/t*.{rank}.u64", "semantic_duplicate"), docs, r, tasks))
               for r, docs in enumerate(docs_by_rank))
    t["filter"] = cpu() - c
    t["_dropped"] = sum(map(len, docs_by_rank)) - kept
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--clusters", type=int, default=64, help="the cluster stage's k")
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"# {time.strftime('%Y-%m-%d')} {platform.node()} {platform.processor() or platform.machine()}, "
          f"torch threads 1; {a.pages} WCXB pages; {a.docs:,} synthetic documents over {a.tasks} tasks")
    texts = pages(a.pages)
    ours, peer, base = [], [], None
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as tmp:
            ms, v = embed_stage(texts, Path(tmp))
        ours.append(ms)
        base = v
        pms, pv = peer_embed(texts)
        peer.append(pms)
        if i == 0:
            cos = np.sum(v * pv, axis=1) / np.linalg.norm(v, axis=1) / np.linalg.norm(pv, axis=1)
            print(f"embed vs sentence-transformers, same texts: cosine min {cos.min():.4f} median {np.median(cos):.4f}")
    print(f"embed (stage, batch 1): {spread(ours, '{:.1f}')} ms CPU/doc = "
          f"{spread([1000 / x for x in ours], '{:.1f}')} docs/s per core")
    print(f"sentence-transformers encode (batch 32): {spread(peer, '{:.1f}')} ms CPU/doc; ratio ours/peer "
          f"{statistics.median(ours) / statistics.median(peer):.2f}")
    for name, once in (("cluster", lambda s, d, w: cluster_once(s, d, w, a.clusters)), ("semantic_dedup", semantic_once)):
        per: dict[str, list[float]] = {}
        for run in range(a.runs):
            with tempfile.TemporaryDirectory() as tmp:
                store = Path(tmp) / "store"
                docs = synthetic_store(base, a.docs, a.tasks, a.noise, store, seed=run)
                for k, v in once(store, docs, Path(tmp) / "work").items():
                    per.setdefault(k, []).append(v)
        extra = {k: v for k, v in per.items() if k.startswith("_")}
        total = [sum(v[i] for k, v in per.items() if not k.startswith("_")) for i in range(a.runs)]
        print(f"{name} at {a.docs:,} docs: total {spread(total)} s CPU = "
              f"{spread([a.docs / t for t in total], '{:,.0f}')} docs/s per core; "
              + "; ".join(f"{k} {spread(v)} s" for k, v in per.items() if not k.startswith("_"))
              + "".join(f"; {k[1:]} {statistics.median(v):,.0f}" for k, v in extra.items()))


if __name__ == "__main__":
    main()
