"""Line dedup throughput: cuvee's ccNet/Llama 3 line dedup vs datatrove's sentence dedup, same corpus, one run.

Corpus: real page passages (WCXB + ScrapingHub ground truth, see _neardup_eval.py), each with 0-6 real
boilerplate lines (WCXB "without" snippets) inserted at random line positions. Both tools run on one
core, the whole job (read corpus -> hash lines -> find duplicates -> filter -> write uncompressed JSONL). Semantics differ and are stated in the
output: cuvee removes lines seen in >= 6 documents of the bucket (all copies), datatrove (line mode:
split_sentences=False, n_sentences=1) removes every copy after the first of any repeated line.

    python benchmarks/bench_linededup.py
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._neardup_eval import boilerplate_pool, passages, real_page_texts

OUT = Path(__file__).resolve().parent / "out" / "linededup"


def build(seed: int = 0) -> tuple[Path, int, int, int]:
    rng = random.Random(seed)
    pool = rng.sample(boilerplate_pool(), 300)
    docs = [p for t in real_page_texts() for p in passages(t, rng)]
    path = OUT / "corpus" / "corpus.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    inserted = 0
    with gzip.open(path, "wt") as f:
        for i, text in enumerate(docs):
            lines = text.split("\n")
            for _ in range(rng.randint(0, 6)):
                lines.insert(rng.randrange(len(lines) + 1), rng.choice(pool))
                inserted += 1
            f.write(json.dumps({"text": "\n".join(lines), "id": f"d{i}"}) + "\n")
    return path, len(docs), inserted, sum(len(d) for d in docs)


def chars(folder: Path) -> tuple[int, int]:
    from cuvee.pipeline.io import iter_documents

    docs = list(iter_documents(str(folder)))
    return len(docs), sum(len(d.text) for d in docs)


def run_cuvee(corpus: Path):
    from datatrove.pipeline.readers import JsonlReader

    from cuvee.dedup.local_run import build as build_stage
    from cuvee.dedup.local_run import executors, merged_counters

    work = OUT / "cuvee"
    shutil.rmtree(work, ignore_errors=True)
    barrier = build_stage("line_dedup", {"min_occurrences": 6}, work, 1)
    chain = executors(barrier, [JsonlReader(str(corpus.parent), glob_pattern=corpus.name)], work, 1)
    t = time.perf_counter()
    chain[-1].run()
    wall = time.perf_counter() - t
    c = merged_counters(work)
    f = next(v for k, v in c["seg01"].items() if "line dedup" in k)
    return wall, chars(work / "output"), f


def run_datatrove(corpus: Path):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.sentence_dedup import (
        SentDedupConfig,
        SentenceDedupFilter,
        SentenceDedupSignature,
        SentenceFindDedups,
    )
    from datatrove.pipeline.readers import JsonlReader

    from cuvee.pipeline.writers import intermediate_writer  # uncompressed JSONL, as cuvee's output here

    work = OUT / "datatrove"
    shutil.rmtree(work, ignore_errors=True)
    cfg = SentDedupConfig(n_sentences=1, split_sentences=False, min_doc_words=0, min_num_sentences=0,
                          min_words_to_remove_span=0)

    def reader():
        return JsonlReader(str(corpus.parent), glob_pattern=corpus.name)

    stages = [
        ("signatures", [reader(), SentenceDedupSignature(str(work / "sigs"), config=cfg)]),
        ("find", [SentenceFindDedups(str(work / "sigs"), str(work / "dups"), config=cfg)]),
        ("filter", [reader(), SentenceDedupFilter(str(work / "dups"), config=cfg), intermediate_writer(work / "output")]),
    ]
    times = {}
    for name, pipe in stages:
        t = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipe, tasks=1, workers=1, logging_dir=str(work / "logs" / name)).run()
        times[name] = round(time.perf_counter() - t, 1)
    return sum(times.values()), chars(work / "output"), times


def main():
    corpus, n, inserted, orig_chars = build()
    total_chars = sum(len(json.loads(line)["text"]) for line in gzip.open(corpus, "rt"))
    print(f"corpus: {n} documents, {total_chars / 1e6:.1f} M chars, {inserted} boilerplate lines inserted "
          f"({total_chars - orig_chars} chars incl. newlines)")
    w_c, (docs_c, chars_c), f = run_cuvee(corpus)
    print("cuvee counters:", f)
    w_d, (docs_d, chars_d), times = run_datatrove(corpus)
    print("datatrove stage times:", times)
    print("\n| tool | wall s (1 core) | docs/s/core | speed-up vs datatrove | docs kept | chars removed |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, w, d, c in (("cuvee line_dedup (k=6)", w_c, docs_c, chars_c),
                          ("datatrove sentence dedup (line mode)", w_d, docs_d, chars_d)):
        print(f"| {name} | {w:.1f} | {n / w:.0f} | {w_d / w:.1f}x | {d} | {total_chars - c} |")


if __name__ == "__main__":
    main()
