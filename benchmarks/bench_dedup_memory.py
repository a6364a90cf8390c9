"""Peak memory of the dedup phases on a corpus far larger than the configured budget.

The phases (line counts, key duplicates, MinHash buckets) are the whole-corpus steps; their working
memory is measured with tracemalloc (numpy buffers included) while each phase runs in-process, and
compared with ``memory_budget_mb``. The process RSS is reported too (it includes the interpreter,
datatrove and numpy themselves, ~150 MB, which no budget can remove).

    python benchmarks/bench_dedup_memory.py [--docs 40000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import shutil
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._neardup_eval import lingua_sentences, real_page_texts

OUT = Path(__file__).resolve().parent / "out" / "memory"


def build(n_docs: int, seed: int = 0, files: int = 2) -> Path:
    """``files`` corpus files (one per task, so every task reads documents); returns the first."""
    rng = random.Random(seed)
    lines = [ln for t in real_page_texts() for ln in t.split("\n") if len(ln.split()) >= 4] + lingua_sentences()
    folder = OUT / "corpus"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    outs = [gzip.open(folder / f"corpus_{k}.jsonl.gz", "wt", compresslevel=1) for k in range(files)]
    for i in range(n_docs):
        text = "\n".join(rng.choice(lines) for _ in range(rng.randint(10, 40)))
        outs[i % files].write(json.dumps({"text": text, "id": f"d{i}",
                                          "metadata": {"url": f"http://s{i % 5000}.com/{i % 7000}"}}) + "\n")
    for f in outs:
        f.close()
    return folder / "corpus_0.jsonl.gz"


def run(stage: str, params: dict, corpus: Path, tasks: int = 2):
    from datatrove.pipeline.readers import JsonlReader

    from cuvee.dedup.local_run import build as build_stage
    from cuvee.dedup.local_run import executors, merged_counters

    work = OUT / stage
    shutil.rmtree(work, ignore_errors=True)
    barrier = build_stage(stage, params, work, tasks)
    chain = executors(barrier, [JsonlReader(str(corpus.parent), glob_pattern="corpus_*.jsonl.gz")], work, tasks)
    rows = []
    chain[0].run()
    for ex, ph in zip(chain[1:-1], barrier.phases):
        tracemalloc.start()
        t = time.perf_counter()
        ex.run()
        wall = time.perf_counter() - t
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        counters = {k: v for step in merged_counters(work).get(ph.name, {}).values() for k, v in step.items()}
        rows.append((stage, ph.name, ph.tasks, params["memory_budget_mb"], peak / 2**20, wall, counters))
    chain[-1].run()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=40000)
    args = ap.parse_args()
    from datatrove.utils.logging import logger

    logger.remove()
    corpus = build(args.docs)
    text_mb = sum(len(json.loads(line)["text"]) for p in corpus.parent.glob("corpus_*.jsonl.gz")
                  for line in gzip.open(p, "rt")) / 2**20
    print(f"corpus: {args.docs} documents, {text_mb:.0f} MiB of text, 2 tasks")
    rows = []
    rows += run("line_dedup", {"memory_budget_mb": 4, "bucket_size": 10**9}, corpus)
    rows += run("exact_dedup", {"memory_budget_mb": 1}, corpus)
    rows += run("url_dedup", {"memory_budget_mb": 1}, corpus)
    rows += run("minhash_dedup", {"memory_budget_mb": 1}, corpus)
    print("\n| stage | phase | tasks | budget MiB | peak traced MiB (phase, all its tasks in turn) | within budget | "
          "spill partitions | records spilled MiB | wall s |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|")
    for stage, ph, tasks, budget, peak, wall, c in rows:
        print(f"| {stage} | {ph} | {tasks} | {budget} | {peak:.2f} | {'yes' if peak <= budget else 'NO'} | "
              f"{int(c.get('spill_partitions', 0))} | {c.get('spilled_bytes', 0) / 2**20:.1f} | {wall:.1f} |")
    print(f"\nprocess peak RSS (interpreter + libraries + everything above): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
