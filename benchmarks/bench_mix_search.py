"""`cuvee mix search` on the bundled sources: the cost per proxy, how well the chosen fit ranks the proxies,
whether the pick beats the natural mix, and the cost of the search against a grid at the same resolution.

Runs ``mixes/search_demo.yaml`` (three sources of the bundled curated WCXB pages, two held-out targets, a
~0.1M-parameter proxy on CPU) with ``--mixtures N`` proxies (the issue asks N >= 16) into a fresh folder.
Reported: wall and CPU seconds per proxy (mean, min, max; training tokens/s), per target the chosen fit and its
leave-one-out Spearman and RMSE, the verdict of the pick against the natural (and uniform) mix, and the cost
of the whole search (proxies + proof runs) against training one proxy per point of a weight grid of step
``--grid-step`` within the same bounds (grid points x mean proxy cost: computed, not run).

    python benchmarks/bench_mix_search.py --mixtures 16 [--grid-step 0.05] [--out DIR] [--json] [--estimate]

``--estimate`` runs the dry run's time estimate first (cuvee/mixsearch/estimate.py: proxy steps and fit refits
timed here) and prints it beside each phase's measured time (the search's own "done in" lines).

On a shared 2-core machine run only a smoke test: ``--mixtures 4 --proxy-tokens 8192 --no-proof``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def grid_points(lo: list[float], hi: list[float], step: float) -> int:
    """Points of the grid {w_i = k_i * step, sum w = 1} inside the bounds."""
    m = round(1 / step)
    los = [math.ceil(x * m - 1e-9) for x in lo]
    his = [math.floor(x * m + 1e-9) for x in hi]
    count = 0
    for ks in itertools.product(*(range(a, b + 1) for a, b in zip(los[:-1], his[:-1]))):
        last = m - sum(ks)
        count += los[-1] <= last <= his[-1]
    return count


def phase_seconds(lines: list[str]) -> dict[str, float]:
    """Each phase's time from the search's "[search] <phase>...: done in <time>" lines (summed per phase)."""
    out: dict[str, float] = {}
    for line in lines:
        m = re.match(r"\[search\] (\w+).*: done in (?:(\d+) min (\d\d) s|(\d+\.\d) s)$", line)
        if m:
            secs = float(m.group(4)) if m.group(4) else 60 * int(m.group(2)) + int(m.group(3))
            out[m.group(1)] = out.get(m.group(1), 0.0) + secs
    return out


def config(args) -> dict:
    cfg = yaml.safe_load((ROOT / "mixes" / "search_demo.yaml").read_text())
    cfg["name"] = f"bench_search_n{args.mixtures}"
    cfg["mixtures"] = args.mixtures
    if args.proxy_tokens:
        cfg["proxy"]["tokens"] = args.proxy_tokens
    if args.no_proof:
        cfg["proof"] = {**cfg.get("proof", {}), "enabled": False}
    for s in [*cfg["sources"], *cfg["targets"]]:
        s["paths"] = str(ROOT / s["paths"]) if not Path(s["paths"]).is_absolute() else s["paths"]
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixtures", type=int, default=16)
    ap.add_argument("--proxy-tokens", type=int, default=None, help="override the demo's tokens per proxy")
    ap.add_argument("--no-proof", action="store_true", help="skip the proof runs (smoke tests)")
    ap.add_argument("--grid-step", type=float, nargs="+", default=[0.1, 0.05])
    ap.add_argument("--out", default=None, help="search folder (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--estimate", action="store_true", help="run the dry run's time estimate first and compare")
    args = ap.parse_args()

    from cuvee.mixsearch.search import dry_run, run_search

    lines: list[str] = []

    def say(m: str) -> None:
        lines.append(m)
        print(m, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "search"
        cfg_path = Path(tmp) / "search.yaml"
        cfg_path.write_text(yaml.safe_dump(config(args), sort_keys=False))
        estimate = None
        if args.estimate:
            t0 = time.perf_counter()
            estimate = dry_run(cfg_path)["seconds"] | {"dry_run_wall_s": time.perf_counter() - t0}
        t0 = time.perf_counter()
        report = run_search(cfg_path, out, fresh=bool(args.out), say=say)
        total_wall = time.perf_counter() - t0
    proxies = report["proxies"]
    walls, cpus = [p["wall_s"] for p in proxies], [p["cpu_s"] for p in proxies]
    proof_runs = [r for runs in report["proof"].values() for r in runs.values()]
    mean_wall, mean_cpu = sum(walls) / len(walls), sum(cpus) / len(cpus)
    plan = report["plan"]
    grids = {str(step): {"points": grid_points(plan["lo"], plan["hi"], step)} for step in args.grid_step}
    for g in grids.values():
        g["wall_s"], g["cpu_s"] = g["points"] * mean_wall, g["points"] * mean_cpu
    search_wall = sum(walls) + sum(r["wall_s"] for r in proof_runs)
    result = {
        "mixtures": len(proxies), "sources": plan["sources"], "params": proxies[0]["params"],
        "tokens_per_proxy": proxies[0]["tokens"], "steps_per_proxy": proxies[0]["steps"],
        "proxy_wall_s": {"mean": mean_wall, "min": min(walls), "max": max(walls)},
        "proxy_cpu_s": {"mean": mean_cpu, "min": min(cpus), "max": max(cpus)},
        "proxy_tokens_per_s": proxies[0]["tokens"] / mean_wall,
        "fits": {t: {"chosen": f["chosen"], "loo_spearman": f["fits"][f["chosen"]]["loo_spearman"],
                     "loo_rmse": f["fits"][f["chosen"]]["loo_rmse"],
                     "permutation_p": (f.get("permutation") or {}).get("p_value")} for t, f in report["fits"].items()},
        "pick": report["pick"]["weights"], "natural": dict(zip(plan["sources"], plan["natural"])),
        "verdicts": {t: {a: {"verdict": v["verdict"], "effect": v["effect"], "ci95": v["ci95"], "metric": v["metric"]}
                         for a, v in per.items()} for t, per in report["verdicts"].items()},
        "search_train_wall_s": search_wall, "proof_runs": len(proof_runs),
        "whole_command_wall_s": total_wall, "grid": grids, "pick_supported": report["pick"]["supported"],
        "not_supported_because": report["pick"]["not_supported_because"], "phases_s": phase_seconds(lines),
        "estimate_s": estimate,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{len(proxies)} proxies of {result['tokens_per_proxy']:,} tokens ({result['params']:,} parameters): "
          f"wall {mean_wall:.1f} s (min {min(walls):.1f}, max {max(walls):.1f}), CPU {mean_cpu:.1f} s per proxy, "
          f"{result['proxy_tokens_per_s']:,.0f} tokens/s")
    for t, f in result["fits"].items():
        print(f"target {t}: fit {f['chosen']}, LOO Spearman {f['loo_spearman']:.3f}, LOO RMSE {f['loo_rmse']:.4f}, "
              f"permutation p {f['permutation_p']}")
    print("pick " + ", ".join(f"{n} {w:.3f}" for n, w in result["pick"].items()) + "; natural "
          + ", ".join(f"{n} {w:.3f}" for n, w in result["natural"].items()))
    for t, per in result["verdicts"].items():
        for a, v in per.items():
            print(f"  {t}: pick vs {a}: {v['verdict']} (effect {v['effect']:+.4f} {v['metric']})")
    print(f"search: {search_wall:.0f} s of training ({len(proxies)} proxies + {len(proof_runs)} proof runs), "
          f"{total_wall:.0f} s for the whole command")
    print("pick " + ("supported: pick.yaml" if result["pick_supported"] else
                     f"NOT supported ({len(result['not_supported_because'])} reasons): pick.NOT-SUPPORTED.yaml"))
    print("phases, measured: " + ", ".join(f"{k} {v:.1f} s" for k, v in result["phases_s"].items()))
    if estimate:
        print(f"dry-run estimate ({estimate['dry_run_wall_s']:.0f} s to make): start-up {estimate['startup']:.1f} s, "
              f"proxies {estimate['proxies']:.1f} s, proof {estimate['proof']:.1f} s, transfer {estimate['transfer']:.1f} "
              f"s, fits {estimate['fits']:.1f} s (law {estimate['fits_law']:.1f} s), total {estimate['total']:.1f} s")
    for step, g in grids.items():
        print(f"grid of step {step} within the bounds: {g['points']} points x {mean_wall:.1f} s = {g['wall_s']:.0f} s "
              f"({g['wall_s'] / max(search_wall, 1e-9):.1f}x the search), CPU {g['cpu_s']:.0f} s")


if __name__ == "__main__":
    main()
