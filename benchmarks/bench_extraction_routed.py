"""Extraction with both extractors (``extract.extractor: routed``) against trafilatura 2.3.1 and resiliparse alone.

The same path as ``bench_extraction.py``: every page wrapped into a WARC response record, then cuvee's reader ->
response_check -> extract, each system in a fresh interpreter, CPU time of the whole step including the resiliparse
worker process. Sets (none used to choose anything, except the first 500 WCXB dev pages, on which ``route_ratio``
0.65 was picked from 0.2 / 0.35 / 0.5 / 0.65 / 0.8):

* ScrapingHub article benchmark, 181 pages: 4-gram shingle F1 (bench_extraction's scorer);
* WCXB test, 505 scored pages, per page type: bag-of-words F1, macro over pages;
* WCXB dev pages 0501-1497 (``--wcxb-dev DIR``: the upstream repository's ``dev`` folder, CC-BY-4.0, commit
  c039d5ee; not bundled, 66 MB): the same scorer, per page type.

Intervals: 2,000 bootstrap resamples of pages, paired (routed minus trafilatura on the same resample).

    python benchmarks/bench_extraction_routed.py --data ../shared/data --wcxb-dev /path/to/wcxb/dev --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_extraction import WORD, by_id, isolated, run_cuvee, shingles, wrap

SYSTEMS = {"trafilatura 2.3.1 (cuvee default)": {}, "resiliparse": {"extractor": "resiliparse"},
           "routed (trafilatura fast + resiliparse)": {"extractor": "routed"}}


def scrapinghub_pages(data: Path):
    sh = data / "extraction_scrapinghub"
    gt = json.loads((sh / "ground-truth.json").read_text())
    pages = [(k, v.get("url") or f"http://bench.local/{k}", gzip.decompress((sh / "html" / f"{k}.html.gz").read_bytes()))
             for k, v in gt.items()]
    return pages, {k: v["articleBody"] for k, v in gt.items()}, {k: "article" for k in gt}


def wcxb_pages(folder: Path, types: dict, keep=lambda item: True):
    pages, truth, kind = [], {}, {}
    for f in sorted((folder / "ground-truth").glob("*.json")):
        g = json.loads(f.read_text())
        html = folder / "html" / f"{f.stem}.html.gz"
        if not keep(f.stem) or not html.exists() or not g["ground_truth"].get("main_content"):
            continue
        truth[f.stem] = g["ground_truth"]["main_content"]
        kind[f.stem] = types.get(f.stem, {}).get("page_type", "?")
        pages.append((f.stem, g.get("url") or f"http://bench.local/{f.stem}", gzip.decompress(html.read_bytes())))
    return pages, truth, kind


def per_page_scrapinghub(truth: str, pred: str) -> tuple[float, float]:
    t, p = shingles(truth), shingles(pred)
    tp, fp, fn = sum((t & p).values()), sum((p - t).values()), sum((t - p).values())
    if fp == fn == 0:
        return 1.0, 1.0
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


def per_page_bow(truth: str, pred: str) -> float:
    from collections import Counter

    t, p = Counter(WORD.findall(truth.lower())), Counter(WORD.findall((pred or "").lower()))
    tp = sum((t & p).values())
    prec = tp / sum(p.values()) if p else (1.0 if not t else 0.0)
    rec = tp / sum(t.values()) if t else 1.0
    return 2 * prec * rec / (prec + rec) if prec + rec else 0.0


def f1_of(kind: str, rows: np.ndarray) -> float:
    """ScrapingHub: F1 of the averaged P and R (rows: [n, 2]); WCXB: mean per-page F1 (rows: [n])."""
    if kind == "scrapinghub":
        p, r = rows.mean(axis=0)
        return 2 * p * r / (p + r) if p + r else 0.0
    return float(rows.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--wcxb-dev", type=Path, help="the WCXB repository's dev folder (html/, ground-truth/)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    types = json.loads((args.data / "extraction_wcxb" / "metadata.json").read_text())["files"]
    sets = {"ScrapingHub": ("scrapinghub", *scrapinghub_pages(args.data)),
            "WCXB test": ("bow", *wcxb_pages(args.data / "extraction_wcxb" / "test", types))}
    if args.wcxb_dev:
        sets["WCXB dev 0501-1497"] = ("bow", *wcxb_pages(args.wcxb_dev, types, keep=lambda i: int(i) > 500))
    tmp = Path(tempfile.mkdtemp(prefix="cuvee_bench_routed_"))
    rng = np.random.default_rng(0)
    for name, (kind, pages, truth, ptype) in sets.items():
        warc = tmp / f"{name.replace(' ', '_')}.warc.gz"
        url_to_id = wrap(pages, warc)
        ids = sorted(truth)
        scores, cpu = {}, {}
        for system, kw in SYSTEMS.items():
            times = []
            for _ in range(args.runs):
                out, dt, _drops = isolated(run_cuvee, warc, **kw)
                times.append(1000 * dt / len(pages))
            pred = by_id(out, url_to_id)
            score = per_page_scrapinghub if kind == "scrapinghub" else per_page_bow
            scores[system] = np.array([score(truth[i], pred.get(i, "")) for i in ids])
            cpu[system] = (np.median(times), min(times), max(times))
        base = scores["trafilatura 2.3.1 (cuvee default)"]
        print(f"\n### {name}: {len(ids)} pages, CPU ms per page median [min-max] of {args.runs} (read + check + extract)")
        print("| system | F1 | paired diff vs trafilatura [95 % CI] | CPU ms/page |")
        print("|---|---|---|---|")
        boots = [rng.integers(0, len(ids), len(ids)) for _ in range(2000)]
        for system, rows in scores.items():
            diffs = [f1_of(kind, rows[b]) - f1_of(kind, base[b]) for b in boots]
            lo, hi = np.percentile(diffs, [2.5, 97.5])
            c = cpu[system]
            print(f"| {system} | {f1_of(kind, rows):.4f} | {f1_of(kind, rows) - f1_of(kind, base):+.4f} "
                  f"[{lo:+.4f} to {hi:+.4f}] | {c[0]:.1f} [{c[1]:.1f}-{c[2]:.1f}] |")
        if kind == "bow":
            kinds = sorted({ptype[i] for i in ids})
            print("\nper page type, F1 (pages): " + "; ".join(
                f"{k} ({sum(ptype[i] == k for i in ids)}): " + " / ".join(
                    f"{f1_of(kind, rows[[j for j, i in enumerate(ids) if ptype[i] == k]]):.3f}" for rows in scores.values())
                for k in kinds) + "  [" + " / ".join(SYSTEMS) + "]")


if __name__ == "__main__":
    main()
