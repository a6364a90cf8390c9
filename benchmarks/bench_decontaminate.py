"""cuvee's n-gram decontamination next to datatrove's NGramsDecontFilter on the same documents and eval items.

Documents: the WCXB pages of data/curated outside the cloze task's held-out pages, plus planted copies of cloze
items (verbatim, inside a long page, split over paragraphs, upper-cased without punctuation). Items: the shipped
cloze task, query = context, gold = the true choice. datatrove's index is built with its own hashing
(``NGramsDecontIndexer.compute_hashes``, query + overlap + gold n-grams, n = 13 as cuvee; lighteval is only needed
to *load* tasks, so the indexer's hashing is called directly), then its filter runs offline on the index files.

Reports: decisions compared (agreement, every disagreement with the item and n-gram involved; datatrove maps
every digit to 0 before hashing, so pages sharing "4 reviews with an average rating of 5.0 out of 5 stars"-like
templates with different numbers match there and not in cuvee), CPU seconds per
1k documents (median [min-max] of --repeats runs, >= 3 for a full run; cuvee with its index build and
scan-only), the pipeline stages on the same documents as datatrove Documents (the ``decontaminate`` stage's
filter with its index built by the stage's own index phase, next to the ``exact_dedup`` stage one pass: the
cost of decontamination relative to exact dedup), and cuvee's index build time and memory for 10k and 100k
synthetic items. The machine's load average is printed first and last (2 shared cores: CPU time, not wall
time, is the figure). ``--quick``: one run, 10k items (a smoke run).

    python benchmarks/bench_decontaminate.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
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


def fmt(t: list[float]) -> str:
    return f"{statistics.median(t):.3f} [{min(t):.3f}-{max(t):.3f}] ({len(t)} run(s))"


def stage_costs(docs, repeats: int, folder: Path) -> dict[str, list[float]]:
    """CPU s per 1k documents of the ``decontaminate`` stage's filter (index built by its index phase from the
    shipped cloze file, as a recipe would) and of the ``exact_dedup`` stage (one pass), on the same Documents."""
    from datatrove.data import Document

    from cuvee.dedup.decontaminate import BuildEvalIndex, Decontaminate, DecontaminateParams, resolve_sources
    from cuvee.dedup.exact_dedup import OnePassExactDedup

    params = DecontaminateParams(eval_sets=[{"name": "cloze", "path": str(CLOZE),
                                             "fields": ["context", "choices[label]"]}])
    out: dict[str, list[float]] = {"index phase (s, once per run)": [], "decontaminate filter": [], "exact_dedup": []}
    for _ in range(repeats + 1):  # run 0: untimed warm-up (compiled kernels load on first use)
        out["index phase (s, once per run)"].append(
            cpu(lambda: list(BuildEvalIndex(folder, resolve_sources(params), N).run())))
        for name, make in (("decontaminate filter", lambda: Decontaminate(folder, "drop", 1, "contamination")),
                           ("exact_dedup", lambda: OnePassExactDedup(1024))):
            step, batch = make(), [Document(text=t, id=i) for i, t in docs]

            def consume(step=step, batch=batch) -> int:
                return sum(1 for _ in step.run(iter(batch)))

            out[name].append(cpu(consume) * 1000 / len(docs))
    return {name: t[1:] for name, t in out.items()}


def synthetic_items(n: int, rng) -> list[str]:
    vocab = np.array([f"w{i}" for i in range(50_000)])  # an array: rng.choice on a list converts it every call
    return [" ".join(vocab[rng.integers(0, len(vocab), size=int(rng.integers(20, 80)))].tolist()) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run, 10k synthetic items only (smoke)")
    a = ap.parse_args()
    repeats = 1 if a.quick else a.repeats
    if not a.quick and repeats < 3:
        ap.error("--repeats must be >= 3 for a full run (the median of 3 runs, with min and max)")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    items, docs = load()
    print(f"{len(docs)} documents ({sum(len(t) for _, t in docs) / 1e6:.1f} M chars), {len(items)} items, n={N}")

    ours = run_cuvee(items, docs)
    with tempfile.TemporaryDirectory() as tmp:
        filt, Document = datatrove_filter(items, Path(tmp))
        theirs = run_datatrove(filt, Document, docs)
        t_ours = [cpu(lambda: run_cuvee(items, docs)) * 1000 / len(docs) for _ in range(repeats)]
        index = NgramIndex.build([word_ids(it["context"] + " " + it["choices"][it["label"]]) for it in items], N)
        t_scan = [cpu(lambda: [index.find(word_ids(text)) for _, text in docs]) * 1000 / len(docs)
                  for _ in range(repeats)]
        t_theirs = [cpu(lambda: run_datatrove(filt, Document, docs)) * 1000 / len(docs) for _ in range(repeats)]
        stages = stage_costs(docs, repeats, Path(tmp) / "stage")
    agree = sum(bool(ours[d]) == theirs[d][0] for d, _ in docs)
    print(f"decisions: {agree}/{len(docs)} agree; cuvee flags {sum(bool(v) for v in ours.values())}, "
          f"datatrove {sum(v[0] for v in theirs.values())}")
    for d, _ in docs:
        if bool(ours[d]) != theirs[d][0]:
            print(f"  disagree {d}: cuvee items {ours[d][:5]}, datatrove n-gram {theirs[d][1]!r}")
    for name, t, what in (("cuvee", t_ours, "index build included"), ("cuvee scan", t_scan, "index built before timing"),
                          ("datatrove", t_theirs, "index loaded before timing")):
        print(f"CPU s per 1k docs, {name}: median [min-max] {fmt(t)}; {what}")
    print(f"  datatrove / cuvee scan: {statistics.median(t_theirs) / statistics.median(t_scan):.2f}x (medians)")
    for name, t in stages.items():
        unit = "CPU" if "once per run" in name else "CPU s per 1k docs,"
        print(f"{unit} stage {name}: median [min-max] {fmt(t)}")
    ratio = statistics.median(stages["decontaminate filter"]) / statistics.median(stages["exact_dedup"])
    print(f"  decontaminate filter / exact_dedup (one pass): {ratio:.2f}x (medians; the index phase runs once per run)")

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
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
