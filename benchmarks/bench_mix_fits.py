"""The mix search's nonlinear fits with analytic Jacobians against the same fits with scipy's finite differences
(what fit.py did before): CPU seconds of the leave-one-out pass of each family, and how far the predictions move.

Input: the proxies' weights and measured target losses of finished searches (``report.json``): by default the
bundled cluster search (``runs/mix_search/search_clusters``, after ``cuvee mix search
mixes/search_clusters.yaml``) and the demo search (``runs/mix_search/search_demo``) where they exist.

    python benchmarks/bench_mix_fits.py [REPORT.json ...] --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from unittest import mock

import numpy as np
from scipy import optimize

from cuvee.mixsearch import fit

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "runs/mix_search/search_clusters/report.json", REPO / "runs/mix_search/search_demo/report.json"]
FAMILIES = ("loglinear", "separable", "powerlaw")


def targets(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    r = json.loads(path.read_text())
    w = np.array([p["weights"] for p in r["proxies"]], dtype=np.float64)
    names = list(r["proxies"][0]["targets"])
    return [(f"{r['name']}/{n}", w, np.array([p["targets"][n]["value"] for p in r["proxies"]])) for n in names]


def finite_differences(*args, **kw):
    """scipy's least_squares as fit.py called it before: no Jacobian, 2-point differences."""
    kw.pop("jac", None)
    return _least_squares(*args, **kw)


_least_squares = optimize.least_squares


def timed_loo(kind: str, w, y, analytic: bool) -> tuple[float, dict]:
    c = time.process_time()
    if analytic:
        out = fit.loo(kind, w, y)
    else:
        with mock.patch.object(fit.optimize, "least_squares", finite_differences):
            out = fit.loo(kind, w, y)
    return time.process_time() - c, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    reports = [p for p in (a.reports or DEFAULT) if p.exists()]
    if not reports:
        raise SystemExit("no report.json: run `cuvee mix search mixes/search_clusters.yaml` first")
    print(f"# {time.strftime('%Y-%m-%d')}, CPU seconds of one leave-one-out pass, median [min-max] of {a.runs}")
    print("| target (proxies x sources) | family | finite differences s | analytic s | ratio | LOO Spearman fd / analytic "
          "| max prediction change |")
    print("|---|---|---|---|---|---|---|")
    total = {True: 0.0, False: 0.0}
    for path in reports:
        for name, w, y in targets(path):
            for kind in FAMILIES:
                runs = {True: [], False: []}
                outs = {}
                for _ in range(a.runs):
                    for analytic in (False, True):
                        s, outs[analytic] = timed_loo(kind, w, y, analytic)
                        runs[analytic].append(s)
                med = {k: statistics.median(v) for k, v in runs.items()}
                total[True] += med[True]
                total[False] += med[False]
                change = float(np.max(np.abs(np.subtract(outs[True]["loo_predictions"], outs[False]["loo_predictions"]))))
                print(f"| {name} ({w.shape[0]} x {w.shape[1]}) | {kind} | {med[False]:.2f} [{min(runs[False]):.2f}-"
                      f"{max(runs[False]):.2f}] | {med[True]:.2f} [{min(runs[True]):.2f}-{max(runs[True]):.2f}] | "
                      f"{med[False] / med[True]:.1f}x | {outs[False]['loo_spearman']:.3f} / {outs[True]['loo_spearman']:.3f} "
                      f"| {change:.2g} |")
    print(f"\nall families and targets: finite differences {total[False]:.1f} s, analytic {total[True]:.1f} s "
          f"({total[False] / total[True]:.1f}x)")


if __name__ == "__main__":
    main()
