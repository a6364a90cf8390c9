"""In-process cost of each dedup stage's parts, per document: a cross-check of ``bench_dolma.py``'s figures.

``bench_dolma.py`` charges a stage the CPU of a whole ``cuvee run`` minus a baseline run and minus both runs'
start-up (four processes), so on this VM a 10,000-document figure moves by +-50 us a document from run to run
and a 100,000-document one by +-10 us. Here the stage's steps run in one process, on the same corpus (the
same ``build_corpus``), each part timed alone and all parts interleaved per round:

- ``read``: reading the JSONL input into documents (cuvee's reader; charged to no stage);
- barrier: ``record`` = (reader -> recording step) - read; ``phase``: the whole-corpus job; ``filter``:
  reader -> drop filter, the second read *included*, as copy-free dedup reads its input twice;
- ``one_pass``: reader -> one-pass filter, minus read.

A stage's cost is the sum of its parts (barrier: record + phase + filter), per document, median of the rounds
[min-max], each round's parts taken from that round. Stages as in bench_dolma: ``exact_dedup`` (barrier and
``one_pass``), ``line_dedup`` with k = 2 (the ccNet rule as a barrier; Dolma's rule in one pass). Process
start-up and the writing of outputs are not in these figures.

    python benchmarks/bench_dedup_parts.py --docs 10000 --runs 7
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from datatrove.utils.logging import logger

from cuvee.dedup.exact_dedup import OnePassExactDedup, TextKeyer
from cuvee.dedup.keyed import FindKeyDuplicates, KeyRecorder
from cuvee.dedup.line_dedup import CountFrequentLines, LineDedupFilter, LineHashRecorder, OnePassLineDedup
from cuvee.dedup.steps import DropListed
from cuvee.pipeline.readers import PlannedJsonlReader

logger.remove()  # one "Reading input file" line per part and round otherwise

BUCKET, K = 1_000_000, 2


def drain(gen) -> int:
    n = 0
    for _ in gen or ():
        n += 1
    return n


def cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    from bench_dolma import REAL_PASSAGES, build_corpus, docs_runs_args

    args = docs_runs_args(__doc__, 10_000, 7)

    work = Path(tempfile.mkdtemp(prefix="cuvee_bench_dedup_parts_"))
    info = build_corpus(work / "corpus", args.docs)
    docs = str(work / "corpus" / "documents")
    ex, ln = work / "exact", work / "line"

    def read():
        return PlannedJsonlReader(docs).run(None, 0, 1)

    def exact_record():
        shutil.rmtree(ex, ignore_errors=True)
        drain(KeyRecorder(ex, 1, TextKeyer()).run(read(), 0, 1))

    def line_record():
        shutil.rmtree(ln, ignore_errors=True)
        drain(LineHashRecorder(ln, True).run(read(), 0, 1))

    parts = {
        "read": lambda: drain(read()),
        "exact record": exact_record,
        "exact phase": lambda: drain(FindKeyDuplicates(ex, 1, 1024).run(None, 0, 1)),
        "exact filter": lambda: drain(DropListed(ex, "drops/*/{rank}.u64", "exact_duplicate").run(read(), 0, 1)),
        "exact one_pass": lambda: drain(OnePassExactDedup(1024).run(read(), 0, 1)),
    }
    if args.docs <= REAL_PASSAGES:  # above, the half-joined passages' lines repeat: the barrier rule empties them
        parts |= {
            "line record": line_record,
            "line phase": lambda: drain(CountFrequentLines(ln, 1, BUCKET, K, 1024).run(None, 0, 1)),
            "line filter": lambda: drain(LineDedupFilter(ln, 1, BUCKET, 0).run(read(), 0, 1)),
        }
    parts["line one_pass"] = lambda: drain(OnePassLineDedup(BUCKET, K, False, 0, 1024).run(read(), 0, 1))
    for fn in parts.values():  # warm: numba caches, tables, page cache
        fn()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} corpus {info}; runs={args.runs}; "
          f"load {open('/proc/loadavg').read().split()[:3]}", flush=True)
    rounds = []
    for _ in range(args.runs):
        rounds.append({k: cpu(fn) for k, fn in parts.items()})
    n = info["documents"]

    def us(values):
        return f"{statistics.median(values) / n * 1e6:.1f} [{min(values) / n * 1e6:.1f}-{max(values) / n * 1e6:.1f}]"

    rows = {"read (not charged)": [x["read"] for x in rounds]}
    rows["exact barrier: record + phase + filter (re-read included)"] = [
        x["exact record"] - x["read"] + x["exact phase"] + x["exact filter"] for x in rounds]
    rows["exact one_pass"] = [x["exact one_pass"] - x["read"] for x in rounds]
    if "line record" in parts:
        rows["line barrier (ccNet rule, k=2): record + phase + filter"] = [
            x["line record"] - x["read"] + x["line phase"] + x["line filter"] for x in rounds]
    rows["line one_pass (Dolma's rule, k=2)"] = [x["line one_pass"] - x["read"] for x in rounds]
    print("\n| part | CPU us per document: median of rounds [min-max] |\n|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {us(v)} |")
    print("\nparts, median CPU us per document: " + ", ".join(
        f"{k} {statistics.median(x[k] for x in rounds) / n * 1e6:.1f}" for k in parts))
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
