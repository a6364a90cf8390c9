"""MinHash dedup throughput and quality: cuvee vs datatrove's MinHash stages vs datasketch, same corpus, one run.

Corpus: benchmarks/_neardup_eval.py (>= 20k real-text documents with near-duplicates at known Jaccard).
Every tool does the whole job on one core: read the corpus file -> signatures -> LSH buckets ->
clustering -> filtering -> write the kept documents (uncompressed JSONL for every tool), with the
FineWeb setting (5-word shingles, 14 bands x 8 rows). Throughput is documents / wall second of that
whole job (single task, single worker = per core). Quality is scored against the known pairs.
cuvee's numba kernels are compiled (or loaded from numba's on-disk cache) before the clock starts;
that one-off time is printed separately.

    python benchmarks/bench_minhash.py [--docs 20000] [--backends numba,rensa] [--skip-datatrove]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._neardup_eval import build_corpus, print_scurve, quality, scurve_check, write_jsonl  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "minhash"


def quiet():
    from datatrove.utils.logging import logger

    logger.remove()


def kept_from(folder: Path) -> set[str]:
    from cuvee.pipeline.io import iter_documents

    return {d.id for d in iter_documents(str(folder))} if folder.exists() else set()


def dedup_step_seconds(logs: Path) -> float:
    """Time datatrove recorded in the dedup steps themselves (readers and writers excluded)."""
    import json

    total = 0.0
    for stats in logs.glob("*/stats.json"):
        for step in json.loads(stats.read_text()):
            if not step["name"].startswith(("📖", "💽")):
                total += step["time_stats"]["total"]
    return total


def run_cuvee(corpus_file: Path, backend: str) -> tuple[float, set[str], dict]:
    from datatrove.pipeline.readers import JsonlReader

    import cuvee.dedup.local_run as local_run

    work = OUT / f"cuvee_{backend}"
    shutil.rmtree(work, ignore_errors=True)
    barrier = local_run.build("minhash_dedup", {"backend": backend}, work, 1)
    chain = local_run.executors(barrier, [JsonlReader(str(corpus_file.parent), glob_pattern=corpus_file.name)],
                                work, 1)
    t = time.perf_counter()
    chain[-1].run()
    wall = time.perf_counter() - t
    return wall, kept_from(work / "output"), local_run.merged_counters(work)


def run_datatrove(corpus_file: Path) -> tuple[float, set[str], dict]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.utils.hashing import HashConfig

    from cuvee.pipeline.writers import intermediate_writer  # uncompressed JSONL, as cuvee's output here

    work = OUT / "datatrove"
    shutil.rmtree(work, ignore_errors=True)
    cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8, n_grams=5)
    reader = lambda: JsonlReader(str(corpus_file.parent), glob_pattern=corpus_file.name)  # noqa: E731
    times = {}
    stages = [
        ("signatures", [reader(), MinhashDedupSignature(str(work / "sigs"), config=cfg)], 1),
        ("buckets", [MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=cfg)], cfg.num_buckets),
        ("cluster", [MinhashDedupCluster(str(work / "buckets"), str(work / "remove_ids"), config=cfg)], 1),
        ("filter", [reader(), MinhashDedupFilter(str(work / "remove_ids")), intermediate_writer(work / "output")], 1),
    ]
    for name, pipe, tasks in stages:
        t = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipe, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name)).run()
        times[name] = time.perf_counter() - t
    return sum(times.values()), kept_from(work / "output"), times


def run_datasketch(corpus_file: Path) -> tuple[float, set[str], dict]:
    """The usual datasketch recipe: MinHash per document, MinHashLSH insert + query, union-find, keep the
    longest; like the other tools it reads the corpus file and writes the kept documents."""
    import gzip
    import json

    from datasketch import MinHash, MinHashLSH

    from cuvee.dedup.text import words

    t = time.perf_counter()
    with gzip.open(corpus_file, "rt") as f:
        docs = [json.loads(line) for line in f]
    t_read = time.perf_counter() - t
    lsh = MinHashLSH(num_perm=112, params=(14, 8))
    sigs = {}
    for d in docs:
        w = words(d["text"])
        grams = {" ".join(w[i:i + 5]).encode() for i in range(max(1, len(w) - 4))} if w else set()
        m = MinHash(num_perm=112, seed=1)
        m.update_batch(list(grams))
        sigs[d["id"]] = m
        lsh.insert(d["id"], m)
    t_sig = time.perf_counter() - t - t_read
    parent = {d["id"]: d["id"] for d in docs}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for d in docs:
        for other in lsh.query(sigs[d["id"]]):
            a, b = find(d["id"]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    best = {}
    for d in docs:  # keep the longest text of each cluster, the first one on ties
        r = find(d["id"])
        if r not in best or len(d["text"]) > len(best[r]["text"]):
            best[r] = d
    kept = {d["id"] for d in best.values()}
    t_w = time.perf_counter()
    out = OUT / "datasketch" / "output.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            if d["id"] in kept:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    t_write = time.perf_counter() - t_w
    return time.perf_counter() - t, kept, {"read": round(t_read, 2), "signatures+insert": round(t_sig, 2),
                                           "write": round(t_write, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--backends", default="numba,rensa", help="cuvee backends to run, the first is the reference")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs of cuvee and datasketch; median [min-max] reported")
    args = ap.parse_args()
    quiet()
    corpus = build_corpus(min_docs=args.docs)
    corpus_file = OUT / "corpus" / "corpus.jsonl.gz"
    write_jsonl(corpus, corpus_file)
    n = len(corpus.docs)
    print(f"corpus: {n} documents, {sum(len(d['text']) for d in corpus.docs) / 1e6:.1f} M chars, "
          f"{len(corpus.pairs)} known duplicate pairs")
    from cuvee.dedup import native

    print(f"numba kernels ready in {native.warm_up():.2f}s (compile on first use on a machine, then loaded from "
          f"numba's cache; not in the timings below)")
    backends = args.backends.split(",")
    import statistics

    results, dedup_only, walls, dedups = {}, {}, {}, {}
    for r in range(args.runs):  # interleaved, so load on the shared machine hits every tool alike
        for backend in backends:
            wall, kept, c = run_cuvee(corpus_file, backend)
            name = f"cuvee ({backend})"
            walls.setdefault(name, []).append(wall)
            dedups.setdefault(name, []).append(dedup_step_seconds(OUT / f"cuvee_{backend}" / "logs"))
            results[name] = (wall, kept)
            steps = {k: v for k, v in c["seg00"].items() if "signatures" in k}
            print(f"run {r + 1} cuvee {backend}: {wall:.1f}s  signatures={steps}  clusters={c['minhash_clusters']}")
        wall, kept, info = run_datasketch(corpus_file)
        walls.setdefault("datasketch", []).append(wall)
        dedups.setdefault("datasketch", []).append(wall - info["read"] - info["write"])
        results["datasketch"] = (wall, kept)
        print(f"run {r + 1} datasketch: {wall:.1f}s {info}")
    for name in walls:
        results[name] = (statistics.median(walls[name]), results[name][1])
        dedup_only[name] = statistics.median(dedups[name])
    print("\nwall s per run (median [min-max]): " + "; ".join(
        f"{k} {statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]" for k, v in walls.items()))
    print("dedup-only s per run (median [min-max]): " + "; ".join(
        f"{k} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]" for k, v in dedups.items()))
    ratios = [d / c for d, c in zip(walls["datasketch"], walls[f"cuvee ({backends[0]})"])]
    print(f"datasketch / cuvee ({backends[0]}) whole job, per run: {', '.join(f'{x:.1f}x' for x in ratios)}")
    if not args.skip_datatrove:
        wall, kept, times = run_datatrove(corpus_file)
        results["datatrove"] = (wall, kept)
        dedup_only["datatrove"] = dedup_step_seconds(OUT / "datatrove" / "logs")
        print(f"datatrove: {wall:.1f}s {({k: round(v, 1) for k, v in times.items()})}")

    ref = f"cuvee ({backends[0]})"
    base = results[ref][0]
    print(f"\n| tool | wall s (1 core) | docs/s/core | {ref} is faster by | removed | precision | recall J>=0.8 | "
          "families lost |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (wall, kept) in results.items():
        q = quality(corpus, kept)
        print(f"| {name} | {wall:.1f} | {n / wall:.0f} | {wall / base:.1f}x | {q['removed']} | {q['precision']:.4f} | "
              f"{q['recall_j_ge_0.8']:.4f} | {q['families_lost']} |")
    print(f"\nDedup work only (time inside the dedup steps, corpus reading and document writing excluded; "
          f"datasketch: everything but its read and write):\n| tool | dedup s | docs/s/core | {ref} is faster by |")
    print("|---|---:|---:|---:|")
    for name, secs in dedup_only.items():
        print(f"| {name} | {secs:.2f} | {n / secs:.0f} | {secs / dedup_only[ref]:.1f}x |")
    print("\nRecall by exact-Jaccard band (pair detected = one of the two removed):")
    bands = sorted({b for _, (w, k) in results.items() for b in quality(corpus, k)["recall_by_band"]})
    print("| band | pairs | " + " | ".join(results) + " |")
    print("|---|---:|" + "---:|" * len(results))
    qs = {name: quality(corpus, kept)["recall_by_band"] for name, (w, kept) in results.items()}
    for b in bands:
        npairs = next(q[b][1] for q in qs.values() if b in q)
        print(f"| {b} | {npairs} | " + " | ".join(f"{q[b][0]:.3f}" for q in qs.values()) + " |")
    print_scurve(scurve_check(corpus, backend=backends[0]),
                 f"LSH candidate probability vs theory (cuvee, {backends[0]}, 14x8)")

if __name__ == "__main__":
    main()
