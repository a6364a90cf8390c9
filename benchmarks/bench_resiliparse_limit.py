"""What the real time limit of ``extract.extractor: resiliparse`` costs, and what it saves (issue #37).

    python benchmarks/bench_resiliparse_limit.py                  # 5 runs each, the bundled sample pages
    python benchmarks/bench_resiliparse_limit.py --runs 3 --before-hostile   # + the old path on one hostile page

before: the step as it was: resiliparse called in this process under the interval timer, which its C code
never sees. after: the step now: each page sent to a worker process whose timer the kernel enforces
(cuvee/pipeline/stages/resiliparse_worker.py). Both run the same pages: every HTML response of the bundled
samples (data/sample/*.warc.gz and *.arc.gz) through the reader and ``response_check``. Per run: wall time and
CPU time of this process and its children (the worker's CPU is counted once it is reaped, at the end of the
run); printed: median [min-max] over the runs, and the difference per page. The two paths are run
alternately so drift on a shared machine falls on both. Hostile pages (``timeout_s: 1``, CPU timer): 20,000
nested ``<div>`` (220 KB), and 100,000 (1.1 MB, under ``max_input_chars``); the old path on the first one
only with ``--before-hostile`` (it takes 15-45 s, the second several minutes).
"""

from __future__ import annotations

import argparse
import glob
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from datatrove.data import Document
from datatrove.utils.logging import logger

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.extract import ResiliparseExtract, TrafilaturaExtract
from cuvee.pipeline.stages.resiliparse_worker import ResiliparseWorker
from cuvee.pipeline.stages.response import ResponseCheck


class InProcess(ResiliparseExtract):
    """The step before the worker: resiliparse in this process, under the Python timer of trafilatura's path."""

    def _extract(self, html: str, url: str | None) -> str | None:
        from resiliparse.extract.html2text import extract_plain_text

        return extract_plain_text(html, main_content=True)

    def run(self, data, rank: int = 0, world_size: int = 1):
        yield from TrafilaturaExtract._run_timed(self, data)


def sample_pages() -> list[str]:
    logger.remove()  # the reader's per-file log lines
    pages = []
    for path in sorted(glob.glob(str(REPO / "data/sample/*.warc.gz")) + glob.glob(str(REPO / "data/sample/*.arc.gz"))):
        pages += [d.text for d in ResponseCheck().run(make_reader(path).run())]
    return pages


def cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(step_cls, pages: list[str], timeout_s: float = 1.0) -> tuple[float, float, dict, list[str]]:
    step = step_cls(timeout_s=timeout_s)
    docs = [Document(text=html, id=str(i), metadata={}) for i, html in enumerate(pages)]
    t0, c0 = time.perf_counter(), cpu_s()
    out = [d.text for d in step.run(docs)]
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    stats = {k: v.total for k, v in step.stats.stats.items() if k.startswith("dropped_") or k == "forwarded"}
    return wall, cpu, stats, out


def worker_start() -> tuple[float, float]:
    """Wall and CPU seconds from a new worker to its first (tiny) page extracted."""
    worker = ResiliparseWorker(1.0)
    t0, c0 = time.perf_counter(), cpu_s()
    worker.extract("<html><body><p>x</p></body></html>")
    wall = time.perf_counter() - t0
    worker.close()
    return wall, cpu_s() - c0


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def nested(n: int) -> str:
    return "<html><body>" + "<div>" * n + "x" + "</div>" * n + "</body></html>"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--before-hostile", action="store_true", help="also time the old path on 20,000 nested <div>")
    args = ap.parse_args()
    pages = sample_pages()
    print(f"{len(pages)} pages, {sum(map(len, pages)) / 1e6:.2f} M characters of HTML (data/sample)")
    runs: dict[str, dict[str, list[float]]] = {"before": {"wall": [], "cpu": []}, "after": {"wall": [], "cpu": []}}
    outputs = {}
    for i in range(args.runs):
        for name, cls in (("before", InProcess), ("after", ResiliparseExtract))[:: 1 if i % 2 == 0 else -1]:
            wall, cpu, stats, out = timed(cls, pages)
            runs[name]["wall"].append(wall)
            runs[name]["cpu"].append(cpu)
            outputs[name] = (stats, out)
    same = outputs["before"] == outputs["after"]
    print(f"same texts and counts before and after: {same} ({outputs['after'][0]})")
    for name in runs:
        print(f"{name:6s}  wall {summary(runs[name]['wall'])} s   CPU (with children) {summary(runs[name]['cpu'])} s"
              f"   over {args.runs} runs")
    for what in ("wall", "cpu"):
        diff = [(a - b) / len(pages) * 1e3 for a, b in zip(runs["after"][what], runs["before"][what])]
        print(f"after - before, {what} per page: {summary(diff)} ms (one worker start spread over {len(pages)} pages)")
    starts = [worker_start() for _ in range(args.runs)]
    print(f"one worker start (Python + the resiliparse import, once per task and after each timeout), wall: "
          f"{summary([w for w, _ in starts])} s, CPU: {summary([c for _, c in starts])} s")
    for i, what in enumerate(("wall", "cpu")):
        per_page = [((a - b) - st[i]) / len(pages) * 1e3 for a, b, st in zip(runs["after"][what], runs["before"][what], starts)]
        print(f"after - before - one start, {what} per page: {summary(per_page)} ms")
    for n in (20_000, 100_000):
        html = nested(n)
        wall, cpu, stats, _ = timed(ResiliparseExtract, [html, html])
        print(f"after, 2 pages of {n:,} nested <div> ({len(html) / 1e3:.0f} KB each), timeout_s 1 (CPU): "
              f"wall {wall:.2f} s, CPU {cpu:.2f} s, {stats}")
    if args.before_hostile:
        html = nested(20_000)
        wall, cpu, stats, _ = timed(InProcess, [html])
        print(f"before, 1 page of 20,000 nested <div>, timeout_s 1 (CPU): wall {wall:.2f} s, CPU {cpu:.2f} s, {stats}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
