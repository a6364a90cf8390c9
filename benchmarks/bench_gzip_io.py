"""gzip JSONL through ISA-L (what cuvee reads and writes with, ``cuvee/pipeline/fastgzip.py``) next to the
standard library's zlib (what datatrove and fsspec use), and exact dedup's key next to its Python definition.

Corpus: ``bench_dolma.build_corpus`` (real passages, ~1.6 KB documents), ``--docs`` documents as gzip JSONL.

* read: decompress the whole file in 1 MiB blocks, ``gzip.GzipFile`` vs ``isal.igzip.IGzipFile``;
* write: compress the decompressed JSONL, zlib at its default level 9 (``gzip.GzipFile``, as cuvee wrote before
  2026-11-26 and fsspec writes) and 6, vs ISA-L at level 3 (cuvee's ``WRITE_LEVEL``); output sizes printed;
* exact key: ``text_digests`` (compiled fold + xxh3-128, batches of 256) vs ``xxh3_128(normalize_text(t))``,
  checked equal first.

CPU seconds in this process, median of ``--runs`` [min-max], after one warm-up pass; ratios of medians.

    python benchmarks/bench_gzip_io.py --docs 30000 --runs 5
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import xxhash
from isal import igzip

from cuvee.dedup.exact_dedup import text_digests
from cuvee.dedup.text import normalize_text
from cuvee.pipeline.fastgzip import WRITE_LEVEL


def cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def read_all(opener, path: Path) -> int:
    n = 0
    with opener(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def main() -> None:
    from bench_dolma import build_corpus, docs_runs_args

    args = docs_runs_args(__doc__, 30_000, 5)

    work = Path(tempfile.mkdtemp(prefix="cuvee_bench_gzip_"))
    try:
        build_corpus(work, args.docs)
        path = next((work / "documents").glob("*.jsonl.gz"))
        raw = gzip.decompress(path.read_bytes())
        texts = [json.loads(line)["text"] for line in raw.splitlines()]
        batches = [texts[i:i + 256] for i in range(0, len(texts), 256)]
        assert [h for b in batches for h in text_digests(b)] == [
            xxhash.xxh3_128_intdigest(normalize_text(t)) if normalize_text(t) else None for t in texts]

        def compress(cls, level):
            def go():
                buf = io.BytesIO()
                with cls(fileobj=buf, mode="wb", compresslevel=level, mtime=0) as f:
                    f.write(raw)
                sizes[(cls.__name__, level)] = buf.tell()
            return go

        sizes: dict = {}
        cases = {
            "read: zlib (gzip.GzipFile)": lambda: read_all(gzip.open, path),
            "read: ISA-L (igzip)": lambda: read_all(igzip.open, path),
            "write: zlib level 9": compress(gzip.GzipFile, 9),
            "write: zlib level 6": compress(gzip.GzipFile, 6),
            f"write: ISA-L level {WRITE_LEVEL}": compress(igzip.IGzipFile, WRITE_LEVEL),
            "exact key: Python normalize_text + xxh3": lambda: [
                xxhash.xxh3_128_intdigest(normalize_text(t)) for t in texts],
            "exact key: text_digests (compiled)": lambda: [text_digests(b) for b in batches],
        }
        for fn in cases.values():
            fn()
        times = {k: [] for k in cases}
        for _ in range(args.runs):
            for k, fn in cases.items():
                times[k].append(cpu(fn))
        print(f"# {time.strftime('%Y-%m-%d %H:%M')} {len(texts):,} documents, {len(raw) / 1e6:.1f} MB of JSONL "
              f"({path.stat().st_size / 1e6:.1f} MB gzip); runs={args.runs}; load {open('/proc/loadavg').read().split()[:3]}\n")
        print("| case | CPU s: median [min-max] | us per document | output MB |\n|---|---|---|---|")
        for k, v in times.items():
            size = next((f"{sz / 1e6:.1f}" for (name, lvl), sz in sizes.items()
                         if k.endswith(f"level {lvl}") and ("ISA-L" in k) == (name == "IGzipFile")), "")
            print(f"| {k} | {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] | "
                  f"{statistics.median(v) / len(texts) * 1e6:.1f} | {size} |")
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"\nread: ISA-L {med['read: zlib (gzip.GzipFile)'] / med['read: ISA-L (igzip)']:.2f}x zlib; "
              f"write: ISA-L level {WRITE_LEVEL} {med['write: zlib level 9'] / med[f'write: ISA-L level {WRITE_LEVEL}']:.1f}x "
              f"zlib level 9, {med['write: zlib level 6'] / med[f'write: ISA-L level {WRITE_LEVEL}']:.1f}x level 6; exact key "
              f"{med['exact key: Python normalize_text + xxh3'] / med['exact key: text_digests (compiled)']:.1f}x the Python definition")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
