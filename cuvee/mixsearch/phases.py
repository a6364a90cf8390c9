"""Where a phase's jobs train: in this process (default), in K local worker processes (``--workers``, one device
each with ``--devices``), or as one SLURM job array (``--slurm``, slurm.py). Placement is not part of the search
folder's binding: a search started with two workers resumes with one, with the same records. A local worker sees
only its device (``CUDA_VISIBLE_DEVICES``) and, unless the config sets ``threads``, its share of this machine's
CPUs; records are identical to the sequential search's when the torch thread count is the same (``threads`` in
the config).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cuvee.mixsearch import slurm
from cuvee.mixsearch.jobs import Job, SearchError, code_path, recorded, train_job, write_job_list
from cuvee.mixsearch.progress import timed

LOGS = "logs"


@dataclass(frozen=True)
class Placement:
    """Where jobs run: here (workers 1, no devices), K local workers, or a SLURM array (``slurm``)."""

    workers: int = 1
    devices: tuple[int, ...] = ()
    slurm: object | None = None  # cuvee.mixsearch.slurm.SlurmOptions
    wait: bool = True

    def __post_init__(self):
        if not 1 <= self.workers <= 1024:
            raise SearchError(f"--workers {self.workers}: give 1 to 1024 worker processes")
        if any(d < 0 for d in self.devices) or len(set(self.devices)) != len(self.devices):
            raise SearchError(f"--devices {','.join(map(str, self.devices))}: give distinct device numbers >= 0")

    @property
    def local_pool(self) -> bool:
        return self.slurm is None and (self.workers > 1 or bool(self.devices))

    @property
    def processes(self) -> int:
        """Local worker processes: ``workers``, or one per device when only ``devices`` is given."""
        return self.workers if self.workers > 1 or not self.devices else len(self.devices)


def _collect(out: Path, jobs: list[Job]) -> tuple[list[dict | None], list[Job]]:
    recs = [recorded(out, j) for j in jobs]
    return recs, [j for j, r in zip(jobs, recs) if r is None]


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "empty log"


def _local_pool(out: Path, phase: str, placement: Placement, argv: list[str], threads: int, say,
                ticker=None, count=None) -> list[str]:
    """K worker processes over the phase's job list; returns one line per worker that failed. While they run,
    ``ticker`` is given ``count()``, the jobs recorded so far, about once a second."""
    logs = Path(out) / LOGS
    logs.mkdir(exist_ok=True)
    procs = []
    devices = placement.devices
    k_total = placement.processes
    say(f"[search] {phase}: {k_total} worker process(es)"
        + (f" on devices {','.join(map(str, devices))}" if devices else f", {threads} thread(s) each")
        + f" (logs in {logs})")
    try:
        for k in range(k_total):
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (code_path(), env.get("PYTHONPATH")) if p)
            if devices:
                env["CUDA_VISIBLE_DEVICES"] = str(devices[k % len(devices)])
            log = logs / f"{phase}-w{k}.log"
            with open(log, "w") as f:
                procs.append((k, log, subprocess.Popen(
                    [*argv, "--phase", phase, "--all", "--threads", str(threads), "--parent", str(os.getpid())],
                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)))
        while any(p.poll() is None for _, _, p in procs):
            try:
                next(p for _, _, p in procs if p.poll() is None).wait(timeout=1.0)
            except (subprocess.TimeoutExpired, StopIteration):
                pass
            if ticker is not None:
                ticker.update(count())
    finally:
        for _, _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [f"worker {k} exited with code {p.returncode} (log {log}: {_last_line(log)})"
            for k, log, p in procs if p.returncode != 0]


def run_phase(out: Path, phase: str, jobs: list[Job], trainer, placement: Placement, fingerprint: str,
              argv: list[str] | None, threads: int, search: str, say=print) -> list[dict]:
    """Every job's record, training the jobs without one where ``placement`` says."""
    recs, missing = _collect(out, jobs)
    if not missing:
        return recs
    what = f"{phase}: {len(missing)} of {len(jobs)} job(s) to train"
    if placement.slurm is None and not placement.local_pool:
        with timed(say, what, total=len(missing), label=phase) as ticker:
            out_recs = []
            for j, rec in zip(jobs, recs):
                out_recs.append(rec if rec is not None else train_job(out, j, trainer, say))
                if rec is None:
                    ticker.step()
            return out_recs
    if argv is None:
        raise SearchError("worker processes and SLURM tasks reload the search from its SEARCH.yaml: give a file")
    write_job_list(out, phase, jobs, fingerprint)
    if placement.slurm is not None:
        slurm.run_array(out, phase, [jobs.index(j) for j in missing], placement.slurm, argv, threads, search,
                        placement.wait, say)
        recs, missing = _collect(out, jobs)
        if missing:
            raise SearchError(slurm.failure_line(out, phase, jobs, missing))
        return recs
    with timed(say, what, total=len(missing), label=phase) as ticker:
        failures = _local_pool(out, phase, placement, argv, threads, say, ticker,
                               lambda: sum(j.record_path(out).exists() for j in missing))
    recs, missing = _collect(out, jobs)
    if missing:
        why = failures[0] if failures else "another process held them"
        raise SearchError(f"{len(missing)} of {len(jobs)} {phase} job(s) have no record ({missing[0].label} first): "
                          f"{why}; rerun the same command to train only the missing jobs")
    return recs
