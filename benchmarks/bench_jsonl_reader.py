"""JSONL input, read -> write in a whole `cuvee run`: cuvee's `PlannedJsonlReader.read_file` (bytes, one
timer per 1 MiB block, every bad line counted) vs datatrove's `JsonlReader.read_file` (text lines, one timer
per line) swapped into the same reader, so only the line reading differs.

    python benchmarks/bench_jsonl_reader.py [--docs 30000] [--runs 5]

Corpus: `bench_dolma.build_corpus` (real passages from ../shared, ~1.6 KB documents, gzip JSONL). Each run is a
fresh interpreter (`run_recipe`, local executor, one task): CPU seconds of that child (`_child.run_child`); runs interleaved. The
fixed start-up (imports, executor) is a 300-document run of the same command, subtracted and reported apart.
Two recipes: no stage (read -> write) and `exact_dedup` as a barrier (which reads its input twice).

A third variant, for read -> write, is datatrove as its users run it: `JsonlReader -> JsonlWriter` in a
`LocalPipelineExecutor` (one task), gzip output as cuvee's. Since 2026-11-26 cuvee reads and writes gzip
through ISA-L (`cuvee/pipeline/fastgzip.py`; the swapped `read_file` variant keeps datatrove's zlib reading).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _child import run_child

CHILD = """
import json, sys
if sys.argv[1] == "datatrove pipeline":
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    r = json.loads(sys.argv[2])
    LocalPipelineExecutor(pipeline=[JsonlReader(r["input"]["paths"][0]), JsonlWriter(r["run_dir"] + "/output")],
                          tasks=1, workers=1, logging_dir=r["run_dir"] + "/logs").run()
    sys.exit(0)
if sys.argv[1] == "datatrove":
    from datatrove.pipeline.readers import JsonlReader
    from cuvee.pipeline import readers
    readers.PlannedJsonlReader.read_file = JsonlReader.read_file
from cuvee.pipeline.runner import run_recipe
run_recipe(json.loads(sys.argv[2]))
"""


def child_cpu(variant: str, recipe: dict) -> float:
    return run_child([sys.executable, "-c", CHILD, variant, json.dumps(recipe)], cwd=HERE.parent).cpu_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=30_000)
    ap.add_argument("--tiny", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from bench_dolma import build_corpus

    tmp = Path(tempfile.mkdtemp(prefix="cuvee_bench_jsonl_"))
    try:
        corpora = {"big": tmp / "big", "tiny": tmp / "tiny"}
        build_corpus(corpora["big"], args.docs)
        build_corpus(corpora["tiny"], args.tiny)
        ops = {"read -> write": [], "exact_dedup barrier": [{"stage": "exact_dedup"}]}
        cpu: dict = {}
        for _ in range(args.runs):
            for op, stages in ops.items():
                for size, corpus in corpora.items():
                    for variant in ("datatrove", "cuvee") + (("datatrove pipeline",) if not stages else ()):
                        run_dir = tmp / "run"
                        shutil.rmtree(run_dir, ignore_errors=True)
                        recipe = {"name": "bench_jsonl", "run_dir": str(run_dir), "stages": stages,
                                  "input": {"paths": [str(corpus / "documents")], "format": "jsonl"},
                                  "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1, "workers": 1}}
                        cpu.setdefault((op, size, variant), []).append(child_cpu(variant, recipe))
        print(f"{args.docs:,} documents, {args.runs} runs interleaved; CPU us per document, start-up "
              f"({args.tiny}-document run) subtracted: median [min-max]; start-up CPU s median\n")
        print("| recipe | datatrove's read_file | cuvee's read_file | paired ratio | start-up s (datatrove / cuvee) |")
        print("|---|---|---|---|---|")
        n = args.docs - args.tiny
        for op in ops:
            per = {v: [(b - t) / n * 1e6 for b, t in zip(cpu[(op, "big", v)], cpu[(op, "tiny", v)])]
                   for v in ("datatrove", "cuvee")}
            ratio = statistics.median(a / b for a, b in zip(per["datatrove"], per["cuvee"]))

            def fmt(xs):
                return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"

            print(f"| {op} | {fmt(per['datatrove'])} | {fmt(per['cuvee'])} | {ratio:.2f}x | "
                  f"{statistics.median(cpu[(op, 'tiny', 'datatrove')]):.2f} / {statistics.median(cpu[(op, 'tiny', 'cuvee')]):.2f} |")
        per = [(b - t) / n * 1e6 for b, t in zip(cpu[("read -> write", "big", "datatrove pipeline")],
                                                 cpu[("read -> write", "tiny", "datatrove pipeline")])]
        cuv = [(b - t) / n * 1e6 for b, t in zip(cpu[("read -> write", "big", "cuvee")],
                                                 cpu[("read -> write", "tiny", "cuvee")])]
        print(f"\ndatatrove JsonlReader -> JsonlWriter, read -> write: {statistics.median(per):.1f} "
              f"[{min(per):.1f}-{max(per):.1f}] us/doc, start-up "
              f"{statistics.median(cpu[('read -> write', 'tiny', 'datatrove pipeline')]):.2f} s; cuvee "
              f"{statistics.median(cuv):.1f} [{min(cuv):.1f}-{max(cuv):.1f}]; paired ratio "
              f"{statistics.median(a / b for a, b in zip(per, cuv)):.2f}x")
        print(f"\nload after: {open('/proc/loadavg').read().split()[:3]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
