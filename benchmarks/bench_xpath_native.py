"""trafilatura's boilerplate XPaths: compiled (``extract.native_xpaths``) against libxml2 (guarded), in one process.

Part 1, per expression: every expression that compiles is evaluated both ways on the same trees (each real
page of the two shared extraction benchmarks, raw and after trafilatura's tag conversion). Each result list
is checked to be the same nodes in the same order; the script stops at the first difference. The time of
each is summed.

Part 2, extraction: the same pages go through cuvee's ``extract`` stage with ``native_xpaths`` off and on,
alternating for ``--rounds`` rounds after one warm-up each. The output text is checked to be identical on
every page. CPU seconds are reported as median [min-max].

    python benchmarks/bench_xpath_native.py [--data ../shared/data] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from copy import copy
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def expressions(pages):
    from trafilatura.htmlprocessing import convert_tags, tree_cleaning
    from trafilatura.settings import Extractor
    from trafilatura.utils import load_html

    from cuvee.pipeline.stages.trafilatura_patches import expression_lists
    from cuvee.pipeline.stages.xpath_guard import guarded
    from cuvee.pipeline.stages.xpath_native import compile_native

    t0 = time.perf_counter()
    compiled = [(f"{name}[{i}]", guarded(x), compile_native(x)) for name, lst in expression_lists().items()
                for i, x in enumerate(lst)]
    compile_s = time.perf_counter() - t0
    total = len(compiled)
    compiled = [c for c in compiled if c[2] is not None]
    print(f"{len(compiled)} of {total} expressions compile ({compile_s * 1000:.0f} ms with the guard's rewrites)")
    options = Extractor(output_format="txt", precision=True, tables=True)
    t_x = {name: 0.0 for name, _, _ in compiled}
    t_n = dict(t_x)
    nodes = trees = 0
    for _, html in pages:
        raw = load_html(html)
        if raw is None:
            continue
        for tree in (raw, convert_tags(tree_cleaning(copy(raw), options), options)):
            trees += 1
            for name, xpath, native in compiled:
                t = time.perf_counter()
                want = xpath(tree)
                t_x[name] += time.perf_counter() - t
                t = time.perf_counter()
                got = native(tree)
                t_n[name] += time.perf_counter() - t
                if got != want:
                    sys.exit(f"{name}: {len(got)} nodes compiled, {len(want)} by libxml2 - not the same")
                nodes += len(want)
    sx, sn = sum(t_x.values()), sum(t_n.values())
    print(f"{trees} trees, {nodes:,} nodes selected, the same by both")
    print(f"libxml2 (guarded) {sx:.2f} s, compiled {sn:.2f} s: {sx / sn:.2f}x\n")
    print("| expression | libxml2 s | compiled s | ratio |\n|---|---|---|---|")
    for name in sorted(t_x, key=lambda k: -t_x[k])[:10]:
        print(f"| {name} | {t_x[name]:.3f} | {t_n[name]:.3f} | {t_x[name] / t_n[name]:.1f}x |")


def extraction(pages, rounds: int):
    from datatrove.data import Document

    from bench_extraction_versions import KW
    from cuvee.pipeline.stages.extract import TrafilaturaExtract

    def run(native: bool):
        step = TrafilaturaExtract(timeout_s=30, tables="text", native_xpaths=native, **KW)
        t = time.process_time()
        out = {d.id: d.text for d in step.run(Document(text=h, id=k) for k, h in pages)}
        return out, time.process_time() - t

    run(False), run(True)  # warm-up: imports, caches
    times: dict[bool, list[float]] = {False: [], True: []}
    reference = None
    for _ in range(rounds):
        for native in (False, True):
            out, t = run(native)
            times[native].append(t)
            reference = reference or out
            if out != reference:
                sys.exit("extraction output differs between native_xpaths on and off")
    print(f"\nextract stage on {len(pages)} pages, {rounds} alternating rounds, CPU s median [min-max]:")
    for native, label in ((False, "native_xpaths: false (guarded XPaths in libxml2)"), (True, "native_xpaths: true (default)")):
        v = times[native]
        print(f"  {label}: {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
    print(f"  ratio of medians {statistics.median(times[False]) / statistics.median(times[True]):.2f}x; "
          f"identical text on {len(reference)} pages")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from bench_extraction_versions import load

    pages = load(args.data, "scrapinghub")[0] + load(args.data, "wcxb")[0]
    print(f"{len(pages)} pages (ScrapingHub + WCXB test)")
    expressions(pages)
    extraction(pages, args.rounds)


if __name__ == "__main__":
    main()
