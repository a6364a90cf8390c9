"""Time, peak memory and bytes written of the dedup stages at scale (100k to 10M documents, one machine).

Documents: synthetic by recombination of real text (10-40 lines drawn from WCXB main-content lines of >= 4
words and lingua's sentences; ~3.3 KB each), plus 5 % exact copies, so every stage has work. Each
configuration is one ``cuvee run`` (JSONL in -> stage(s) -> JSONL out, executor local, ``--tasks`` tasks run
one after the other by one worker, so the whole run is one process) in a fresh process: wall seconds, CPU
seconds and peak RSS of that process (``os.wait4`` of that child alone, see ``_child.py``), and bytes left under the run's
``work/`` folder (the dedup intermediates) and ``output/``. ``--repeats N`` runs each configuration N times
in a row and prints median [min-max] of wall, CPU, documents/s per core and peak RSS; the bytes written and the
documents kept must be the same in every run (the script stops if they are not).

    python benchmarks/bench_dedup_scale.py --docs 100000,1000000 [--tasks 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from _child import run_child

CONFIGS = {
    "exact_dedup": [{"stage": "exact_dedup", "memory_budget_mb": 512}],
    "line_dedup": [{"stage": "line_dedup", "bucket_size": 30_000_000, "memory_budget_mb": 512}],
    "minhash_dedup": [{"stage": "minhash_dedup", "memory_budget_mb": 512, "write_index": False}],
    "chain (exact -> line -> minhash)": [{"stage": "exact_dedup", "memory_budget_mb": 512},
                                         {"stage": "line_dedup", "bucket_size": 30_000_000, "memory_budget_mb": 512},
                                         {"stage": "minhash_dedup", "memory_budget_mb": 512, "write_index": False}],
}


def build(folder: Path, n: int, files: int, seed: int = 0) -> int:
    from benchmarks._neardup_eval import lingua_sentences, real_page_texts

    rng = random.Random(seed)
    lines = [ln for t in real_page_texts() for ln in t.split("\n") if len(ln.split()) >= 4] + lingua_sentences()
    final, folder = folder, folder.with_name(folder.name + ".partial")  # renamed into place when complete
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    outs = [gzip.open(folder / f"part_{k}.jsonl.gz", "wt", compresslevel=1) for k in range(files)]
    recent: list[str] = []
    size = 0
    for i in range(n):
        if recent and rng.random() < 0.05:
            text = rng.choice(recent)
        else:
            text = "\n".join(rng.choices(lines, k=rng.randint(10, 40)))
            recent.append(text)
            if len(recent) > 1000:
                recent.pop(0)
        size += len(text)
        outs[i % files].write(json.dumps({"text": text, "id": f"d{i}"}) + "\n")
    for o in outs:
        o.close()
    folder.rename(final)
    return size


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def run(corpus: Path, stages: list, run_dir: Path, tasks: int) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    recipe = {"name": "scale", "run_dir": str(run_dir), "input": {"paths": [str(corpus)], "format": "jsonl"},
              "stages": stages, "output": {"format": "jsonl"},
              "executor": {"kind": "local", "tasks": tasks, "workers": 1}}
    rf = run_dir.parent / f"{run_dir.name}.json"
    rf.write_text(json.dumps(recipe))
    t = time.perf_counter()
    r = run_child([sys.executable, "-c", "import json; from cuvee.pipeline.runner import run_recipe; "
                   f"s = run_recipe(json.load(open({str(rf)!r}))); print(json.dumps(s['accounting']['kept']))"], cwd=REPO)
    wall = time.perf_counter() - t
    return {"wall_s": wall, "cpu_s": r.cpu_s, "max_rss_mb": r.max_rss_mb, "work_bytes": du(run_dir / "work"), "output_bytes": du(run_dir / "output"),
            "kept": int(r.stdout.strip().splitlines()[-1]), "read": json.loads((run_dir / "stats.json").read_text())[
                "accounting"]["records_read"]}


def spread(values: list[float]) -> str:
    """One value as is; several as median [min-max], the form RESULTS.md states figures in."""
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="100000,1000000")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--work", default=str(HERE / "out" / "scale"))
    ap.add_argument("--repeats", type=int, default=1, help="runs per configuration (median [min-max] printed)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    work = Path(args.work)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} tasks={args.tasks} load {open('/proc/loadavg').read().split()[:3]}; "
          f"disk free {shutil.disk_usage(work.parent if work.parent.exists() else '/').free / 1e9:.0f} GB")
    print("| docs | stages | wall s | CPU s | docs/s per core (CPU) | peak RSS MB | intermediates written | output | kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.docs.split(",")):
        corpus = work / f"corpus_{n}"
        if not corpus.exists():
            t = time.perf_counter()
            chars = build(corpus, n, args.tasks)
            print(f"(built {n} documents, {chars / 1e9:.2f} G chars, in {time.perf_counter() - t:.0f} s)", flush=True)
        for name in args.configs.split(","):
            runs = [run(corpus, CONFIGS[name], work / f"run_{n}", args.tasks) for _ in range(args.repeats)]
            res = runs[0]
            same = {(r["work_bytes"], r["output_bytes"], r["kept"], r["read"]) for r in runs}
            if len(same) != 1:
                sys.exit(f"{name} at {n:,}: runs disagree on (work bytes, output bytes, kept, read): {sorted(same)}")
            print(f"| {n:,} | {name} | {spread([r['wall_s'] for r in runs])} | {spread([r['cpu_s'] for r in runs])} | "
                  f"{spread([n / r['cpu_s'] for r in runs])} | {spread([r['max_rss_mb'] for r in runs])} | "
                  f"{res['work_bytes'] / 1e6:,.0f} MB | {res['output_bytes'] / 1e6:,.0f} MB | "
                  f"{res['kept']:,} of {res['read']:,} read |", flush=True)
        shutil.rmtree(work / f"run_{n}", ignore_errors=True)
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
