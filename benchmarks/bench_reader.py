"""Record reading cost: cuvee's accounting-exact CommonCrawlReader vs FastWARC and datatrove's WarcReader.

cuvee reads WARC/WET/ARC with its own record-boundary parser so that every record is counted exactly
once and a record whose Content-Length disagrees with the file is never kept cut (FastWARC resynchronises
silently). This measures what that costs per record on real Common Crawl files, each reader run as its
users run it, on the same input, in one invocation.

    python benchmarks/bench_reader.py [--shared ../shared/data] [--copies 40] [--runs 5]

Input: the real CC-MAIN-2020-34 WARC sample (resiliparse/warcfile.warc.gz, 50 records), concatenated
``--copies`` times into one gzip'd WARC (gzip members concatenate into a valid multi-member file).
Each figure: median (min-max) wall seconds over ``--runs`` runs, page cache warm (one untimed run first).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cuvee(path: Path) -> int:
    from cuvee.pipeline.readers import CommonCrawlReader

    r = CommonCrawlReader(str(path.parent), glob_pattern=path.name)
    sum(1 for _ in r.run(rank=0, world_size=1))
    return int(r.stats.stats["total"].total)  # every record, documents and counted drops alike


def _fastwarc(path: Path) -> int:
    from fastwarc.warc import ArchiveIterator

    n = 0
    with open(path, "rb") as f:
        for rec in ArchiveIterator(f, parse_http=True):
            rec.reader.read()
            n += 1
    return n


def _datatrove(path: Path) -> int:
    from datatrove.pipeline.readers import WarcReader

    r = WarcReader(str(path.parent), glob_pattern=path.name)
    return sum(1 for _ in r.run(rank=0, world_size=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    src = Path(a.shared) / "warc" / "resiliparse" / "warcfile.warc.gz"
    blob = src.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sample.warc.gz"
        path.write_bytes(blob * a.copies)
        rows = []
        for name, fn in (("cuvee CommonCrawlReader", _cuvee), ("FastWARC ArchiveIterator (bare)", _fastwarc),
                         ("datatrove WarcReader", _datatrove)):
            try:
                fn(path)  # warm
            except ImportError as e:
                print(f"skipped {name}: {e}")
                continue
            times, out = [], 0
            for _ in range(a.runs):
                t0 = time.perf_counter()
                out = fn(path)
                times.append(time.perf_counter() - t0)
            rows.append((name, out, statistics.median(times), min(times), max(times)))
        base = rows[0][2]
        print(f"input: {src.name} x {a.copies} = {len(blob) * a.copies / 1e6:.1f} MB, {a.runs} runs each")
        print(f"{'reader':34s} {'records/docs':>12s} {'median s':>9s} {'min':>7s} {'max':>7s} {'us/record':>10s} {'vs cuvee':>9s}")
        for name, out, med, lo, hi in rows:
            print(f"{name:34s} {out:12d} {med:9.3f} {lo:7.3f} {hi:7.3f} {med / (50 * a.copies) * 1e6:10.1f} "
                  f"{base / med:8.2f}x")
        print("records/docs: cuvee and FastWARC count every record (50 per copy); datatrove yields documents only")


if __name__ == "__main__":
    main()
