"""Line dedup's per-line work: the compiled kernel next to the Python path it replaced, on real page text.

Both produce one 64-bit value per line of ccNet's normalised form (lower case, accents stripped, digits -> 0,
punctuation removed, single spaces); 0 for lines that normalise to nothing:

* Python (cuvee up to 6d55ab5): ``normalize_lines(text)`` (regexes once per document) and ``xxh3_64`` per line;
* compiled (:mod:`cuvee.dedup.native_lines`): one numba loop per batch of 64 documents, as the recording step
  calls it.

Texts: the real main-content texts of the WCXB dev pages (bundled) plus, when ``../shared`` is present, the WCXB
test and ScrapingHub ground truth. Per-document CPU is the median of ``--runs`` passes in this process [min-max],
after one warm-up pass. Start-up is reported apart: a fresh interpreter importing the module, building its
tables and running the kernel once, with numba's on-disk cache warm (the normal case) and cold (an empty
``NUMBA_CACHE_DIR``: the first run on a machine compiles).

    python benchmarks/bench_line_hashing.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from _child import run_child

START_UP = ("from cuvee.dedup import native_lines as n; n.line_hashes_of(['Café 12\\nx'])")


def python_path(texts: list[str]) -> int:
    import numpy as np
    import xxhash

    from cuvee.dedup.text import normalize_lines

    h, n = xxhash.xxh3_64_intdigest, 0
    for t in texts:
        n += len(np.fromiter(((h(x) | 1) if x else 0 for x in normalize_lines(t)), dtype=np.uint64))
    return n


def compiled_path(texts: list[str]) -> int:
    from cuvee.dedup.native_lines import line_hashes_of

    n = 0
    for i in range(0, len(texts), 64):
        hashes, _ = line_hashes_of(texts[i:i + 64])
        n += len(hashes)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from benchmarks._neardup_eval import real_page_texts

    texts = real_page_texts()
    chars = sum(len(t) for t in texts)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {len(texts)} real texts, {chars / len(texts):,.0f} chars on average; "
          f"runs={args.runs}; load {open('/proc/loadavg').read().split()[:3]}")
    lines = {}
    per_doc: dict[str, list[float]] = {}
    for name, fn in (("python", python_path), ("compiled", compiled_path)):
        lines[name] = fn(texts)  # warm-up: tables built, kernel loaded
        for _ in range(args.runs):
            t = time.process_time()
            fn(texts)
            per_doc.setdefault(name, []).append((time.process_time() - t) / len(texts) * 1e6)
    assert lines["python"] == lines["compiled"], lines
    print("\n| path | CPU us per document: median [min-max] | speed-up |")
    print("|---|---|---|")
    base = statistics.median(per_doc["python"])
    for name, v in per_doc.items():
        m = statistics.median(v)
        print(f"| {name} | {m:.1f} [{min(v):.1f}-{max(v):.1f}] | {base / m:.1f}x |")
    print(f"\n{lines['compiled']:,} lines hashed per pass")
    for label, cold in (("warm numba cache", False), ("cold numba cache", True)):
        cpu = []
        for _ in range(3):
            env = dict(os.environ)
            with tempfile.TemporaryDirectory() as d:
                if cold:
                    env["NUMBA_CACHE_DIR"] = d
                cpu.append(run_child([sys.executable, "-c", START_UP], cwd=REPO, env=env).cpu_s)
        print(f"start-up, fresh interpreter ({label}): {statistics.median(cpu):.2f} s CPU [{min(cpu):.2f}-{max(cpu):.2f}]")
    base = [run_child([sys.executable, "-c", "import numpy"], cwd=REPO).cpu_s for _ in range(3)]
    print(f"(of which a bare interpreter importing numpy: {statistics.median(base):.2f} s)")


if __name__ == "__main__":
    main()
