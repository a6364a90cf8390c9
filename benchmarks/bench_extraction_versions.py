"""Extraction F1 and per-document CPU cost: trafilatura 1.11 (what datatrove[processing] users get) vs
trafilatura 2.x vs cuvee's ``extract`` stage (2.x, fallback comparison skipped for long main texts).

Same decoded HTML strings for every system, FineWeb settings (favor_precision, no comments, tables, no
dedup cache). cuvee's default writes table cells as lines (``extract.tables: text``, as 1.x did); its
``tables: markdown`` row keeps 2.x's pipe rows; the last column counts pages whose text has such rows. The
``native_xpaths: false`` row evaluates the guarded XPaths in libxml2 instead of cuvee's compiled ones, and the
``guard_xpaths and native_xpaths: false`` row trafilatura's own regex XPaths (same nodes, so the same text and
F1; the rows show what each saves). Each (system, run) is a fresh interpreter; runs are interleaved round-robin so machine load
hits every system alike. Reported: F1/P/R (identical across runs: extraction is deterministic) and CPU ms
per document as median [min-max] over the runs; start-up (imports + 5 warm-up pages) is reported apart.

    python -m venv /tmp/traf111 && /tmp/traf111/bin/pip install trafilatura==1.11.0 lxml_html_clean
    python benchmarks/bench_extraction_versions.py --traf111-python /tmp/traf111/bin/python --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PIPE_ROW = re.compile(r"^\|.*\|\s*$", re.M)  # a table row as trafilatura 2.x's text output writes it
KW = dict(favor_precision=True, include_comments=False, deduplicate=False, include_tables=True)


def worker(pages_file: str, system: str, out_file: str) -> None:
    """Child: extract every page once after a warm-up; write texts, CPU seconds and start-up seconds."""
    import resource

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    t0 = cpu()
    pages = json.loads(Path(pages_file).read_text())
    if system.startswith("cuvee"):
        tables = "markdown" if system == "cuvee_md" else "text"
        guard = system != "cuvee_noguard"
        native = system not in ("cuvee_noguard", "cuvee_nonative")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from datatrove.data import Document

        from cuvee.pipeline.stages.extract import TrafilaturaExtract

        def run_all(items):
            step = TrafilaturaExtract(timeout_s=10, tables=tables, guard_xpaths=guard, native_xpaths=native, **KW)
            docs = (Document(text=html, id=k) for k, html in items)
            got = {d.id: d.text for d in step.run(docs)}
            return {k: got.get(k, "") for k, _ in items}
    else:
        import trafilatura

        fast = system == "fast"

        def run_all(items):
            if fast:
                return {k: trafilatura.extract(html, fast=True, **KW) or "" for k, html in items}
            return {k: trafilatura.extract(html, **KW) or "" for k, html in items}
    run_all(pages[:5])
    startup = cpu() - t0
    t = cpu()
    out = run_all(pages)
    Path(out_file).write_text(json.dumps({"texts": out, "cpu_s": cpu() - t, "startup_s": startup}))


def load(data: Path, which: str):
    from bench_extraction import bow_score, scrapinghub_score

    if which == "scrapinghub":
        sh = data / "extraction_scrapinghub"
        gt = json.loads((sh / "ground-truth.json").read_text())
        pages = [[k, gzip.decompress((sh / "html" / f"{k}.html.gz").read_bytes()).decode("utf-8", "replace")] for k in gt]
        return pages, lambda out: scrapinghub_score(gt, out)
    wc = data / "extraction_wcxb" / "test"
    gts, pages = {}, []
    for f in sorted((wc / "ground-truth").glob("*.json")):
        g = json.loads(f.read_text())
        html = wc / "html" / f"{f.stem}.html.gz"
        if not html.exists() or not g["ground_truth"].get("main_content"):
            continue  # pages without an annotated main content are not scored
        gts[f.stem] = g["ground_truth"]["main_content"]
        pages.append([f.stem, gzip.decompress(html.read_bytes()).decode("utf-8", "replace")])
    return pages, lambda out: bow_score(gts, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--traf111-python", default="/tmp/traf111/bin/python", help="a python with trafilatura 1.11")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--benchmarks", default="scrapinghub,wcxb")
    ap.add_argument("--_worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        worker(*args._worker)
        return
    systems = [("trafilatura 1.11 (datatrove[processing] pin)", args.traf111_python, "plain"),
               ("trafilatura 2.x", sys.executable, "plain"),
               ("trafilatura 2.x fast=True (no fallback)", sys.executable, "fast"),
               ("cuvee extract (2.x, skip_fallback_above 2000, tables as lines: the default)", sys.executable, "cuvee"),
               ("cuvee extract, tables: markdown (2.x's pipe rows)", sys.executable, "cuvee_md"),
               ("cuvee extract, native_xpaths: false (the guarded XPaths in libxml2)", sys.executable, "cuvee_nonative"),
               ("cuvee extract, guard_xpaths and native_xpaths: false (trafilatura's own XPaths)", sys.executable,
                "cuvee_noguard")]
    if not Path(args.traf111_python).exists():
        sys.exit(f"no {args.traf111_python}: python -m venv /tmp/traf111 && "
                 f"/tmp/traf111/bin/pip install trafilatura==1.11.0 lxml_html_clean")
    versions = {}
    for name, py, _ in systems:
        versions[name] = subprocess.run([py, "-c", "import trafilatura; print(trafilatura.__version__)"],
                                        capture_output=True, text=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="cuvee_extract_versions_"))
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} runs={args.runs} load={open('/proc/loadavg').read().split()[:3]}")
    for bench in args.benchmarks.split(","):
        pages, score = load(Path(args.data), bench)
        pf = tmp / f"{bench}.json"
        pf.write_text(json.dumps(pages))
        res = {name: {"cpu": [], "startup": [], "texts": None} for name, _, _ in systems}
        for r in range(args.runs):
            for name, py, system in systems:
                of = tmp / "out.json"
                subprocess.run([py, __file__, "--_worker", str(pf), system, str(of)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                o = json.loads(of.read_text())
                res[name]["cpu"].append(o["cpu_s"] / len(pages) * 1000)
                res[name]["startup"].append(o["startup_s"])
                if res[name]["texts"] is not None and res[name]["texts"] != o["texts"]:
                    print(f"  warning: {name} gave different texts in run {r}")
                res[name]["texts"] = o["texts"]
        base = statistics.median(res[systems[0][0]]["cpu"])
        print(f"\n{bench} ({len(pages)} pages)")
        print("| system | trafilatura | F1 | P | R | CPU ms/doc median [min-max] | vs 1.11 | start-up s median | pages with pipe rows |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, _, _ in systems:
            s = score(res[name]["texts"])
            c = res[name]["cpu"]
            print(f"| {name} | {versions[name]} | {s['f1']:.4f} | {s['precision']:.3f} | {s['recall']:.3f} | "
                  f"{statistics.median(c):.2f} [{min(c):.2f}-{max(c):.2f}] | {base / statistics.median(c):.2f}x | "
                  f"{statistics.median(res[name]['startup']):.2f} | {sum(bool(PIPE_ROW.search(t or '')) for t in res[name]['texts'].values())} |")
    print(f"\nload after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
