"""The worker process a search starts for each local worker (``--workers``) and each SLURM array task
(``python -m cuvee.mixsearch.workers``): it re-validates the search folder against SEARCH.yaml, then trains one
job (a SLURM task) or every job no other process holds (a local worker). The locks that let workers share the
folder with their coordinator are described in cuvee/mixsearch/jobs.py; where workers run, in phases.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cuvee.kernel.errors import UserError, one_line
from cuvee.mixsearch.jobs import SearchError, read_job_list, train_job
from cuvee.mixsearch.search import worker_trainer

PHASES = ("proxies", "proof", "transfer")


def _die_with_parent(parent: int) -> None:
    """A local worker ends when its coordinator ends (a killed search leaves no orphan training)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(1)


def work(config: str, out: Path, phase: str, index: int | None, threads: int | None, say=print) -> None:
    """The worker: re-validate the folder, then train job ``index`` (a SLURM task) or every free job (local)."""
    fingerprint, trainer = worker_trainer(config, out, threads)
    jobs = read_job_list(out, phase, fingerprint)
    say(f"[search] worker {os.getpid()}@{os.uname().nodename}: CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}, {trainer.threads or 'default'} torch thread(s)")
    if index is not None:
        if not 0 <= index < len(jobs):
            raise SearchError(f"job {phase}:{index}: the job list has {len(jobs)} jobs")
        if train_job(out, jobs[index], trainer, say, wait=False) is None:
            say(f"[search] {jobs[index].label}: held by another process, left to it")
        return
    for job in jobs:  # a job with a record is read, one held by another process skipped
        train_job(out, job, trainer, say, wait=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cuvee.mixsearch.workers",
                                description="internal: one mix-search worker (started by `cuvee mix search`)")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--phase", required=True, choices=PHASES)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--index", type=int)
    g.add_argument("--all", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--parent", type=int, default=None)
    a = p.parse_args(argv)
    if a.parent is not None:
        _die_with_parent(a.parent)
    try:
        work(a.config, Path(a.out), a.phase, a.index, a.threads, say=lambda m: print(m, flush=True))
    except UserError as e:  # a refusal (changed search file, diverged proxy, ...) is one line in the task's log
        print(f"Error: {one_line(str(e))}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
