"""`cuvee mix` end to end, before/after: one mix config built by two cuvee trees (e.g. ``git archive HEAD`` unpacked
somewhere, and this checkout), plus the size of the per-document index against the shards it describes.

Every run is a fresh process (``--child``) that imports cuvee from its tree (the mixer and the document readers it
loads on first use, untimed: the same modules in both trees), then times ``run_mix`` alone into a fresh folder
(tokenizer load, tokenizing, blend, shards, index and manifest): wall, and CPU as user + system of the whole
process over the call (getrusage RUSAGE_SELF, all threads). Rounds interleave the trees, alternating which goes
first; figures are median [min-max] over rounds, the ratio is the median of per-round paired ratios (after /
before) [min-max]. CPU is the figure to read on a shared machine. Both trees must write the same shards (compared
by ``mix_sha256``).

    python benchmarks/bench_mix.py --config CONFIG.yaml --before OLD_TREE [--after .] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(tree: str, config: str, out: str) -> None:
    sys.path.insert(0, tree)
    import importlib

    for module in ("cuvee.mixer.mix", "cuvee.pipeline.io", "cuvee.pipeline.writers"):  # paid before the clock starts
        importlib.import_module(module)
    from cuvee.mixer import run_mix

    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    m = run_mix(config, out_dir=out)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    shard_bytes = [sum((Path(out) / f"{s['prefix']}{ext}").stat().st_size for ext in (".bin", ".idx"))
                   for s in m["shards"]]
    docs_bytes = [(Path(out) / s["docs"]).stat().st_size if "docs" in s else None for s in m["shards"]]
    block = m.get("document_index") or {}
    print(json.dumps({"wall": t1 - t0, "cpu": cpu, "mix_sha256": m["mix_sha256"], "tokens": m["total_tokens"],
                      "documents": m["documents"], "shard_bytes": shard_bytes, "docs_bytes": docs_bytes,
                      "index_bytes": block.get("bytes"), "entries": block.get("entries")}))


def _run(tree: str, config: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_mix_") as tmp:
        out = str(Path(tmp) / "mix")
        proc = subprocess.run([sys.executable, __file__, "--child", tree, config, out], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": tree}, cwd=tree)
        if proc.returncode:
            raise SystemExit(f"{tree}: {proc.stderr.strip()[-2000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="mix config (absolute source paths: runs start in each tree)")
    ap.add_argument("--before", required=True, help="cuvee tree before the change")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parent.parent), help="cuvee tree after")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    config = str(Path(args.config).resolve())
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for r in range(args.rounds):
        for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
            runs[side].append(_run(trees[side], config))
    if len({x["mix_sha256"] for side in runs.values() for x in side}) != 1:
        raise SystemExit("the two trees wrote different shards")
    a = runs["after"][-1]
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{Path(config).name}: {a['tokens']:,} tokens, {a['documents']:,} documents, {len(a['shard_bytes'])} shard(s); "
          f"{args.rounds} interleaved rounds; load {' '.join(load)}")
    for key in ("wall", "cpu"):
        ratios = [x[key] / y[key] for x, y in zip(runs["after"], runs["before"])]
        print(f"  {key:4s} s: before {_fmt([x[key] for x in runs['before']])}, after {_fmt([x[key] for x in runs['after']])}, "
              f"after/before {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
    if a["index_bytes"] is not None:
        shards = sum(a["shard_bytes"])
        per = [d / s for d, s in zip(a["docs_bytes"], a["shard_bytes"])]
        print(f"  index: {a['index_bytes']:,} bytes for {shards:,} bytes of shards (.bin+.idx) = "
              f"{100 * a['index_bytes'] / shards:.2f} %; {a['entries']:,} table entries for {a['documents']:,} "
              f"documents; per shard .docs / shard: {', '.join(f'{100 * p:.2f} %' for p in per)}")


if __name__ == "__main__":
    main()
