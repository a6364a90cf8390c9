"""Heuristic filters: datatrove's Gopher / C4 / FineWeb filters (spaCy words) vs cuvee's stages (fast
splitter) on the same real pages, in one run; plus a URL-filter precision/recall smoke test.

    python benchmarks/bench_heuristics.py [--docs 150] [--markdown out.md]

Pages: human ground-truth main text of WCXB dev pages (data/curated, in the repo) and of the ScrapingHub
article benchmark (/work/shared/data/extraction_scrapinghub, if present).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)

from cuvee.filters.url import UT1_DIR, URLFilterParams, build_url_filter_step, read_list
from cuvee.pipeline.registry import BuildContext, get_stage

SCRAPINGHUB = Path("/work/shared/data/extraction_scrapinghub/ground-truth.json")


def load_pages(n: int) -> list[tuple[str, str]]:
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    pages = [("wcxb", r["main_content"]) for r in rows if r.get("main_content")]
    step = max(1, len(pages) // n)
    pages = pages[::step][:n]
    if SCRAPINGHUB.exists():
        gt = json.loads(SCRAPINGHUB.read_text())
        pages += [("scrapinghub", v["articleBody"]) for v in gt.values() if v.get("articleBody")][: n // 2]
    return pages


def decisions(f, texts):
    out = []
    t0 = time.perf_counter()
    for t in texts:
        r = f.filter(Document(text=t, id="x"))
        out.append(r[0] if isinstance(r, tuple) else bool(r))
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    pages = load_pages(args.docs)
    texts = [t for _, t in pages]
    md: list[str] = []

    def emit(line: str = "") -> None:
        print(line, flush=True)
        md.append(line)

    ctx = BuildContext(run_dir=Path("."), work_dir=Path("."), tasks=1, stage_index=0, stage_name="bench")
    peers = {  # datatrove as FineWeb runs it (spaCy word tokenizer)
        "gopher_repetition": GopherRepetitionFilter(),
        "gopher_quality": GopherQualityFilter(),
        "c4_quality": C4QualityFilter(filter_no_terminal_punct=False),
        "fineweb_quality": FineWebQualityFilter(),
    }
    n_words = sum(len(t.split()) for t in texts)
    emit(f"### Heuristic filters: datatrove + spaCy vs cuvee + fast splitter ({len(texts)} real pages, "
         f"{n_words:,} whitespace words; {sum(s == 'scrapinghub' for s, _ in pages)} of them ScrapingHub)")
    emit()
    emit("| filter | datatrove (spaCy) docs/s | cuvee (fast) docs/s | speed-up | same keep/drop decision | kept (datatrove / cuvee) |")
    emit("|---|---|---|---|---|---|")
    tot_peer = tot_ours = 0.0
    all_agree = []
    # warm both tokenizers once so model loading is not timed
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    load_word_tokenizer("en").word_tokenize("warm up.")
    for name, peer in peers.items():
        spec = get_stage(name)
        ours = spec.build(spec.params(), ctx)[0]
        d_peer, t_peer = decisions(peer, texts)
        d_ours, t_ours = decisions(ours, texts)
        agree = sum(a == b for a, b in zip(d_peer, d_ours))
        all_agree.append(agree)
        tot_peer += t_peer
        tot_ours += t_ours
        emit(f"| {name} | {len(texts) / t_peer:.1f} | {len(texts) / t_ours:.1f} | {t_peer / t_ours:.1f}x | "
             f"{agree}/{len(texts)} ({100 * agree / len(texts):.1f}%) | {sum(d_peer)} / {sum(d_ours)} |")
    emit(f"| **all four in sequence** | {len(texts) / tot_peer:.1f} | {len(texts) / tot_ours:.1f} | {tot_peer / tot_ours:.1f}x | "
         f"min {100 * min(all_agree) / len(texts):.1f}% | |")
    emit()

    # URL filter smoke test: UT1 adult URLs + gambling domains (positives) vs real article URLs (negatives)
    step = build_url_filter_step(URLFilterParams(categories=["adult", "mixed_adult", "gambling"], use_datatrove_blocklist=True))
    t0 = time.perf_counter()
    step.download_data()
    load_s = time.perf_counter() - t0
    adult = ["http://" + u for u in read_list(UT1_DIR / "adult" / "urls")]
    gambling = ["https://" + d + "/" for d in read_list(UT1_DIR / "gambling" / "domains")[::16]]
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        neg = [u for u in (json.loads(line).get("url") for line in f) if u]
    if SCRAPINGHUB.exists():
        neg += [v["url"] for v in json.loads(SCRAPINGHUB.read_text()).values() if v.get("url")]
    peer_step = None
    try:
        from datatrove.pipeline.filters import URLFilter

        peer_step = URLFilter()  # datatrove as FineWeb runs it (its bundled lists)
        peer_step.tldextractor = step.tldextractor  # offline public-suffix data for both
        peer_step.download_data()
    except Exception as e:  # noqa: BLE001 - the peer missing or failing to load its lists: report it, don't die
        print("datatrove URLFilter unavailable:", e)

    def rates(f, urls):
        t0 = time.perf_counter()
        dropped = sum(not (r[0] if isinstance(r, tuple) else r) for r in (f.filter(Document(text="", id="u", metadata={"url": u})) for u in urls))
        return dropped, time.perf_counter() - t0

    emit(f"### URL filter smoke test (positives: {len(adult)} UT1 adult URLs + {len(gambling)} UT1 gambling domains; "
         f"negatives: {len(neg)} WCXB + ScrapingHub article URLs)")
    emit()
    emit("| filter | adult URLs recall | gambling recall | false-positive rate on articles | precision | URLs/s |")
    emit("|---|---|---|---|---|---|")
    for label, f in [("datatrove URLFilter (FineWeb defaults)", peer_step), ("cuvee url_filter (adult+mixed_adult+gambling)", step)]:
        if f is None:
            continue
        a, ta = rates(f, adult)
        g, tg = rates(f, gambling)
        fp, tn = rates(f, neg)
        tp = a + g
        emit(f"| {label} | {100 * a / len(adult):.1f}% | {100 * g / len(gambling):.1f}% | {100 * fp / len(neg):.2f}% ({fp}/{len(neg)}) | "
             f"{100 * tp / max(1, tp + fp):.2f}% | {(len(adult) + len(gambling) + len(neg)) / (ta + tg + tn):,.0f} |")
    emit()
    emit(f"(cuvee list load incl. datatrove's 4.5M-domain snapshot: {load_s:.1f} s. Gambling domains are in cuvee's "
         "copy, so their recall is by construction for cuvee; the column shows what FineWeb's lists alone catch.)")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
