"""cuvee's n-gram decontamination next to datatrove's NGramsDecontFilter on the same documents and eval items.

Documents: the WCXB pages of data/curated outside the cloze task's held-out pages, plus planted copies of cloze
items (verbatim, inside a long page, split over paragraphs, upper-cased without punctuation). Items: the shipped
cloze task, query = context, gold = the true choice. datatrove's index is built with its own hashing
(``NGramsDecontIndexer.compute_hashes``, query + overlap + gold n-grams, n = 13 as cuvee; lighteval is only needed
to *load* tasks, so the indexer's hashing is called directly), then its filter runs offline on the index files.

Reports: decisions compared (agreement, every disagreement with the item and n-gram involved; datatrove maps
every digit to 0 before hashing, so pages sharing "4 reviews with an average rating of 5.0 out of 5 stars"-like
templates with different numbers match there and not in cuvee), CPU seconds per
1k documents (median of --repeats runs, min-max), and cuvee's index build time and memory for 10k and 100k
synthetic items. ``--quick``: one run, 10k items (a smoke run).

    python benchmarks/bench_decontaminate.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cuvee.dedup.ngram_match import NgramIndex, word_ids

CLOZE = REPO / "cuvee" / "assets" / "eval_tasks" / "cuvee_wcxb_cloze.jsonl"
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
N = 13


def load():
    from cuvee.train.demo_data import split_heldout

    items = [json.loads(line) for line in CLOZE.read_text().splitlines()]
    with gzip.open(WCXB, "rt") as f:
        rows = [json.loads(line) for line in f]
    pages = [r["main_content"] for r in split_heldout(rows)[0] if r["main_content"]]
    docs = [(f"page{i}", t) for i, t in enumerate(pages)]
    for k in range(0, 400, 40):
        q, g = items[k]["context"], items[k]["choices"][items[k]["label"]]
        w = (q + " " + g).split(" ")
        docs += [(f"verbatim{k}", q + " " + g), (f"long{k}", pages[k] + "\n" + q + " " + g + "\n" + pages[k + 1]),
                 (f"split{k}", " ".join(w[:len(w) // 2]) + "\n\n" + " ".join(w[len(w) // 2:])),
                 (f"edited{k}", (q + " " + g).upper().replace(",", "").replace(".", " "))]
    return items, docs


def cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def run_cuvee(items, docs):
    index = NgramIndex.build([word_ids(it["context"] + " " + it["choices"][it["label"]]) for it in items], N)
    return {doc_id: sorted(m.item for m in index.find(word_ids(text))) for doc_id, text in docs}


def datatrove_filter(items, folder: Path):
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    config = NGramsDecontConfig(n_grams=N, find_query_ngrams=True, find_overlap_ngrams=True)
    indexer = object.__new__(NGramsDecontIndexer)  # its __init__ only checks that lighteval is installed
    indexer.config, indexer.tokenizer = config, load_word_tokenizer("en")
    indexer.hash_func = create_hash_func(config.hash_config)
    hashes = set()
    for it in items:
        hashes.update(indexer.compute_hashes(it["choices"][it["label"]], it["context"]))
    folder.mkdir(parents=True, exist_ok=True)
    np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(folder / "cloze.index.hashes")
    filt = NGramsDecontFilter(str(folder), config=config)
    filt.load_index_hashes()
    return filt, Document


def run_datatrove(filt, Document, docs):
    out = {}
    for doc_id, text in docs:
        d = Document(text=text, id=doc_id)
        out[doc_id] = filt.filter(d) is not True, d.metadata.get("contaminated_ngram")
    return out


def synthetic_items(n: int, rng) -> list[str]:
    vocab = [f"w{i}" for i in range(50_000)]
    return [" ".join(rng.choice(vocab, size=int(rng.integers(20, 80))).tolist()) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run, 10k synthetic items only (smoke)")
    a = ap.parse_args()
    repeats = 1 if a.quick else a.repeats
    items, docs = load()
    print(f"{len(docs)} documents ({sum(len(t) for _, t in docs) / 1e6:.1f} M chars), {len(items)} items, n={N}")

    ours = run_cuvee(items, docs)
    with tempfile.TemporaryDirectory() as tmp:
        filt, Document = datatrove_filter(items, Path(tmp))
        theirs = run_datatrove(filt, Document, docs)
        t_ours = [cpu(lambda: run_cuvee(items, docs)) * 1000 / len(docs) for _ in range(repeats)]
        t_theirs = [cpu(lambda: run_datatrove(filt, Document, docs)) * 1000 / len(docs) for _ in range(repeats)]
    agree = sum(bool(ours[d]) == theirs[d][0] for d, _ in docs)
    print(f"decisions: {agree}/{len(docs)} agree; cuvee flags {sum(bool(v) for v in ours.values())}, "
          f"datatrove {sum(v[0] for v in theirs.values())}")
    for d, _ in docs:
        if bool(ours[d]) != theirs[d][0]:
            print(f"  disagree {d}: cuvee items {ours[d][:5]}, datatrove n-gram {theirs[d][1]!r}")
    for name, t in (("cuvee", t_ours), ("datatrove", t_theirs)):
        what = "index build included" if name == "cuvee" else "index loaded before timing"
        print(f"CPU s per 1k docs, {name}: median {statistics.median(t):.3f} (min {min(t):.3f}, max {max(t):.3f}, "
              f"{len(t)} run(s); {what})")

    rng = np.random.default_rng(0)
    for n in (10_000,) if a.quick else (10_000, 100_000):
        texts = synthetic_items(n, rng)
        tracemalloc.start()
        t0 = time.process_time()
        index = NgramIndex.build([word_ids(t) for t in texts], N)
        build = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = sum(x.nbytes for x in (index.hashes, index.offsets, index.owners, index.item_grams))
        print(f"{n:,} synthetic items (20-80 words): build {build:.2f} s CPU, peak {peak / 2**20:.0f} MiB traced, "
              f"index {size / 2**20:.1f} MiB on disk ({len(index.hashes):,} n-grams)")


if __name__ == "__main__":
    main()
