"""MinHash dedup throughput and quality: cuvee vs datatrove's MinHash stages vs datasketch, same corpus, one invocation.

Corpus: benchmarks/_neardup_eval.py (>= 20k real-text documents with near-duplicates at known Jaccard).
Every tool does the whole job on one core: read the corpus file -> signatures -> LSH buckets ->
clustering -> filtering -> write the kept documents (uncompressed JSONL for every tool), with the
FineWeb setting (5-word shingles, 14 bands x 8 rows). Quality is scored against the known pairs.

How it is timed: every tool, datatrove included, runs once per round, rounds interleaved (``--runs``), so load
on a shared machine hits every tool alike; each run is timed in CPU seconds (getrusage, self + children: all
threads of this process and anything it forks) and in wall seconds; medians [min-max] are reported, and the
ratios are taken per round (peer / cuvee) and summarised the same way. Throughput is documents per CPU second
(single task, single worker = per core). Peers: datatrove's MinHash stages (64-bit hashes); datasketch as its
users write it, with its default SHA-1 hash and, as a second row, with ``hashfunc=xxhash.xxh32_intdigest`` (the
one-keyword option that makes it faster). cuvee's numba kernels are compiled (or loaded from numba's on-disk
cache) before the first round; that one-off time is printed separately.

    python benchmarks/bench_minhash.py [--docs 20000] [--runs 3] [--backends numba,rensa] [--skip-datatrove]
    python benchmarks/bench_minhash.py --limit 2000 --runs 3 --no-scurve       # a smoke run (minutes, not figures)
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._neardup_eval import build_corpus, print_scurve, quality, scurve_check, write_jsonl

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


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn, *args) -> tuple[float, float, tuple]:
    """(CPU s, wall s, fn's result) of one call."""
    c, t = _cpu(), time.perf_counter()
    out = fn(*args)
    return _cpu() - c, time.perf_counter() - t, out


def run_cuvee(corpus_file: Path, backend: str) -> tuple[float, set[str], dict]:
    from datatrove.pipeline.readers import JsonlReader

    from cuvee.dedup import local_run

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
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.utils.hashing import HashConfig

    from cuvee.pipeline.writers import intermediate_writer  # uncompressed JSONL, as cuvee's output here

    work = OUT / "datatrove"
    shutil.rmtree(work, ignore_errors=True)
    cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8, n_grams=5)
    def reader():
        return JsonlReader(str(corpus_file.parent), glob_pattern=corpus_file.name)

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


def run_datasketch(corpus_file: Path, hashfunc=None, name: str = "datasketch") -> tuple[float, set[str], dict]:
    """The usual datasketch recipe: MinHash per document, MinHashLSH insert + query, union-find, keep the
    longest; like the other tools it reads the corpus file and writes the kept documents. ``hashfunc``: datasketch's
    own option for the per-shingle hash (default SHA-1, 32 bits)."""
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
        m = MinHash(num_perm=112, seed=1, hashfunc=hashfunc)
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
    out = OUT / name.replace(" ", "_").replace("(", "").replace(")", "") / "output.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            if d["id"] in kept:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    t_write = time.perf_counter() - t_w
    return time.perf_counter() - t, kept, {"read": round(t_read, 2), "signatures+insert": round(t_sig, 2),
                                           "write": round(t_write, 2)}


def limited(corpus, limit: int | None):
    """The first ``limit`` documents and the known pairs inside them (smoke runs; figures use the whole corpus)."""
    from benchmarks._neardup_eval import Corpus

    if not limit or limit >= len(corpus.docs):
        return corpus
    docs = corpus.docs[:limit]
    ids = {d["id"] for d in docs}
    return Corpus(docs, [p for p in corpus.pairs if p["original"] in ids and p["variant"] in ids])


def _fmt(xs: list[float], f: str = ".1f", unit: str = "") -> str:
    return f"{statistics.median(xs):{f}}{unit} [{min(xs):{f}}-{max(xs):{f}}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--limit", type=int, default=None, help="keep only the first N documents (smoke runs)")
    ap.add_argument("--backends", default="numba,rensa", help="cuvee backends to run, the first is the reference")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--no-scurve", action="store_true", help="skip the LSH S-curve check at the end")
    ap.add_argument("--runs", type=int, default=3, help="interleaved rounds of every tool; median [min-max] reported")
    args = ap.parse_args()
    quiet()
    corpus = limited(build_corpus(min_docs=args.docs), args.limit)
    corpus_file = OUT / "corpus" / "corpus.jsonl.gz"
    write_jsonl(corpus, corpus_file)
    n = len(corpus.docs)
    print(f"corpus: {n} documents, {sum(len(d['text']) for d in corpus.docs) / 1e6:.1f} M chars, "
          f"{len(corpus.pairs)} known duplicate pairs; load {Path('/proc/loadavg').read_text().split()[:3]}")
    import datasketch
    import xxhash

    from cuvee.dedup import native

    print(f"numba kernels ready in {native.warm_up():.2f}s (compile on first use on a machine, then loaded from "
          f"numba's cache; not in the timings below); datasketch {datasketch.__version__}")
    backends = args.backends.split(",")
    ref = f"cuvee ({backends[0]})"
    tools = {f"cuvee ({b})": (lambda f, b=b: run_cuvee(f, b)) for b in backends}
    tools["datasketch"] = run_datasketch
    tools["datasketch (xxh32)"] = lambda f: run_datasketch(f, xxhash.xxh32_intdigest, "datasketch (xxh32)")
    if not args.skip_datatrove:
        tools["datatrove"] = run_datatrove
    # untimed warm-up of every tool on the first 200 documents: imports, numba's and datatrove's first-use costs
    # otherwise land in round 1 only
    warm_file = OUT / "warmup" / "corpus.jsonl.gz"
    write_jsonl(limited(corpus, 200), warm_file)
    t = time.perf_counter()
    for fn in tools.values():
        fn(warm_file)
    print(f"warm-up (untimed, 200 documents, every tool): {time.perf_counter() - t:.1f} s wall", flush=True)
    cpu: dict[str, list[float]] = {k: [] for k in tools}
    wall: dict[str, list[float]] = {k: [] for k in tools}
    dedups: dict[str, list[float]] = {k: [] for k in tools}
    kept_by: dict[str, set[str]] = {}
    for r in range(args.runs):  # interleaved, so load on the shared machine hits every tool alike
        for name, fn in tools.items():
            c, w, (_, kept, info) = timed(fn, corpus_file)
            cpu[name].append(c)
            wall[name].append(w)
            kept_by[name] = kept
            if name.startswith("cuvee"):
                backend = name[7:-1]
                dedups[name].append(dedup_step_seconds(OUT / f"cuvee_{backend}" / "logs"))
                steps = {k: v for k, v in info["seg00"].items() if "signatures" in k}
                detail = f"signatures={steps}  clusters={info['minhash_clusters']}"
            elif name == "datatrove":
                dedups[name].append(dedup_step_seconds(OUT / "datatrove" / "logs"))
                detail = str({k: round(v, 1) for k, v in info.items()})
            else:
                dedups[name].append(w - info["read"] - info["write"])
                detail = str(info)
            print(f"run {r + 1} {name}: {c:.1f} s CPU, {w:.1f} s wall  {detail}", flush=True)

    def ratios(d: dict[str, list[float]], name: str) -> list[float]:
        return [p / c for p, c in zip(d[name], d[ref])]

    print(f"\n{args.runs} interleaved rounds; median [min-max]; ratio = tool / {ref}, per round; "
          f"load {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"| tool | CPU s (1 core) | wall s | docs per CPU s | CPU vs {ref} | wall vs {ref} | removed | precision | "
          "recall J>=0.8 | families lost |")
    print("|---|---|---|---:|---|---|---:|---:|---:|---:|")
    for name in tools:
        q = quality(corpus, kept_by[name])
        print(f"| {name} | {_fmt(cpu[name])} | {_fmt(wall[name])} | {n / statistics.median(cpu[name]):.0f} | "
              f"{_fmt(ratios(cpu, name), '.2f', 'x')} | {_fmt(ratios(wall, name), '.2f', 'x')} | {q['removed']} | "
              f"{q['precision']:.4f} | {q['recall_j_ge_0.8']:.4f} | {q['families_lost']} |")
    print(f"\nDedup work only (wall s inside the dedup steps as datatrove's executor records them, corpus reading and "
          f"document writing excluded; datasketch: its wall time minus its read and write):\n"
          f"| tool | dedup wall s | {ref} is faster by (per round) |")
    print("|---|---|---|")
    for name in tools:
        print(f"| {name} | {_fmt(dedups[name], '.2f')} | {_fmt(ratios(dedups, name), '.1f', 'x')} |")
    print("\nRecall by exact-Jaccard band (pair detected = one of the two removed):")
    qs = {name: quality(corpus, kept)["recall_by_band"] for name, kept in kept_by.items()}
    bands = sorted({b for q in qs.values() for b in q})
    print("| band | pairs | " + " | ".join(qs) + " |")
    print("|---|---:|" + "---:|" * len(qs))
    for b in bands:
        npairs = next(q[b][1] for q in qs.values() if b in q)
        print(f"| {b} | {npairs} | " + " | ".join(f"{q[b][0]:.3f}" if b in q else "-" for q in qs.values()) + " |")
    if not args.no_scurve:
        print_scurve(scurve_check(corpus, backend=backends[0]),
                     f"LSH candidate probability vs theory (cuvee, {backends[0]}, 14x8)")


if __name__ == "__main__":
    main()
