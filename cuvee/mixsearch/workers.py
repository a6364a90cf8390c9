"""Proxy, proof and transfer runs as independent, resumable jobs: in this process, in K local worker processes
(one device each), or as SLURM array tasks (cuvee/mixsearch/slurm.py).

Locks (why nothing deadlocks and nothing trains twice):

* The coordinator (``cuvee mix search``) holds the search folder's lock (``.cuvee.lock``) for the whole
  search: it tokenizes, plans, writes the job lists and computes fits, pick and report. A second coordinator
  on the same folder is refused with one line ("in use by another cuvee process").
* Workers never take the folder lock, so they never wait on the coordinator. Each job has its own lock,
  ``locks/<phase>-<stem>.lock`` (a non-blocking ``flock``, released by the kernel when its process dies), and
  a job is trained only by the process holding it, which first reads the job's record again: two workers
  never train one job, in one process tree or on two hosts sharing the folder. A local worker skips a job
  another process holds; the coordinator's own (sequential) loop waits for it.
* A record (``<phase>/<stem>.json``) is written atomically when its job ends, then ``events.jsonl`` gets a
  ``trained`` line (one ``O_APPEND`` write). A worker killed mid-job leaves no record and its lock is freed,
  so a rerun trains exactly the jobs without a record.
* Before training, a worker re-validates the folder's binding with ``bind_check`` (a changed SEARCH.yaml,
  train config, tokenizer or input file is refused) and checks that the job list it reads
  (``jobs/<phase>.json``, written by the coordinator) was written for that very plan.

Placement (``--workers``, ``--devices``, ``--slurm``) is not part of the binding: a search started with two
workers resumes with one, with the same records. A local worker sees only its device
(``CUDA_VISIBLE_DEVICES``) and, unless the config sets ``threads``, its share of this machine's CPUs; records
are identical to the sequential search's when the torch thread count is the same (``threads`` in the config).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuvee.folders import FolderError, FolderLock, atomic_write_text

LOCKS = "locks"
JOBS = "jobs"
LOGS = "logs"
PHASES = ("proxies", "proof", "transfer")


class SearchError(RuntimeError):
    """A search that cannot go on (bounds, empty targets, a plan that differs from the recorded one)."""


class Submitted(Exception):
    """Jobs submitted to SLURM without waiting; the message says how to go on."""


@dataclass(frozen=True)
class Job:
    """One training run of the search: its record is ``<out>/<phase>/<stem>.json``."""

    phase: str
    stem: str
    weights: tuple[float, ...]
    seed: int
    tokens: int  # the budget asked for
    trained: int  # the tokens the record must say were trained (whole steps)
    label: str

    def record_path(self, out: Path) -> Path:
        return Path(out) / self.phase / f"{self.stem}.json"

    @property
    def lock_name(self) -> str:
        return f"{self.phase}-{self.stem}.lock"

    def to_json(self) -> dict:
        return asdict(self) | {"weights": list(self.weights)}

    @classmethod
    def from_json(cls, d: dict) -> Job:
        return cls(**{**d, "weights": tuple(float(x) for x in d["weights"])})


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


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def event(out: Path, record: dict) -> None:
    """One line in ``events.jsonl``, written with a single append (workers log concurrently)."""
    line = (json.dumps({**record, "time": time.time(), "by": f"{os.getpid()}@{os.uname().nodename}"}) + "\n").encode()
    fd = os.open(Path(out) / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def recorded(out: Path, job: Job) -> dict | None:
    """The job's record when it holds this very job (weights, seed, tokens trained); None without a record."""
    path = job.record_path(out)
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        if np.allclose(rec["weights"], job.weights, atol=1e-12) and rec["seed"] == job.seed \
                and rec["tokens"] == job.trained:
            return rec
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise SearchError(f"{path} records another job than the plan's ({job.label}); the search folder does not "
                      f"match its plan: use --fresh or another output folder")


def train_job(out: Path, job: Job, trainer, say=print, wait: bool = True) -> dict | None:
    """The job's record, training it first when no process has; None when another process holds the job and
    ``wait`` is False (a worker then goes on to the next job)."""
    rec = recorded(out, job)
    if rec is not None:
        return rec
    (Path(out) / LOCKS).mkdir(exist_ok=True)
    lock = FolderLock(Path(out) / LOCKS, what=f"job {job.stem}", lock_name=job.lock_name)
    told = False
    while True:
        try:
            lock.acquire()
            break
        except FolderError:
            if not wait:
                return None
            if not told:
                say(f"[search] {job.label}: another process is training it; waiting for its record")
                told = True
            time.sleep(1.0)
    try:
        rec = recorded(out, job)
        if rec is not None:
            return rec
        say(f"[search] {job.label}: weights {', '.join(f'{x:.3f}' for x in job.weights)}")
        rec = trainer(job)
        write_json(job.record_path(out), rec)
        event(out, {"event": "trained", "job": job.stem, "wall_s": rec["wall_s"], "cpu_s": rec["cpu_s"]})
        return rec
    finally:
        lock.release()


@dataclass(frozen=True)
class Trainer:
    """Trains one job from the search's token caches (the same call in the coordinator and in every worker)."""

    train: object
    caches: list
    names: list
    tokenizer: dict
    targets: dict
    threads: int

    def __call__(self, job: Job) -> dict:
        from cuvee.mixsearch.proxies import train_proxy

        return train_proxy(self.train, self.caches, self.names, list(job.weights), job.tokens, job.seed,
                           self.tokenizer, self.targets, self.threads)


def write_job_list(out: Path, phase: str, jobs: list[Job], fingerprint: str) -> Path:
    path = Path(out) / JOBS / f"{phase}.json"
    write_json(path, {"fingerprint": fingerprint, "jobs": [j.to_json() for j in jobs]})
    return path


def read_job_list(out: Path, phase: str, fingerprint: str) -> list[Job]:
    path = Path(out) / JOBS / f"{phase}.json"
    try:
        data = json.loads(path.read_text())
        jobs = [Job.from_json(j) for j in data["jobs"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SearchError(f"{path}: no readable job list ({e.__class__.__name__}); start the search with "
                          f"`cuvee mix search`, which writes it") from None
    if data.get("fingerprint") != fingerprint:
        raise SearchError(f"{path} was written for another plan than the folder's; rerun `cuvee mix search`")
    return jobs


def _collect(out: Path, jobs: list[Job]) -> tuple[list[dict | None], list[Job]]:
    recs = [recorded(out, j) for j in jobs]
    return recs, [j for j, r in zip(jobs, recs) if r is None]


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "empty log"


def code_path() -> str:
    """The folder holding this cuvee package: workers import the very code of their coordinator."""
    return str(Path(__file__).resolve().parents[2])


def _local_pool(out: Path, phase: str, placement: Placement, argv: list[str], threads: int, say) -> list[str]:
    """K worker processes over the phase's job list; returns one line per worker that failed."""
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
        for _, _, p in procs:
            p.wait()
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
    if placement.slurm is None and not placement.local_pool:
        return [train_job(out, j, trainer, say) for j in jobs]
    if argv is None:
        raise SearchError("worker processes and SLURM tasks reload the search from its SEARCH.yaml: give a file")
    write_job_list(out, phase, jobs, fingerprint)
    if placement.slurm is not None:
        from cuvee.mixsearch import slurm

        slurm.run_array(out, phase, [jobs.index(j) for j in missing], placement.slurm, argv, threads, search,
                        placement.wait, say)
        recs, missing = _collect(out, jobs)
        if missing:
            raise SearchError(slurm.failure_line(out, phase, jobs, missing))
        return recs
    failures = _local_pool(out, phase, placement, argv, threads, say)
    recs, missing = _collect(out, jobs)
    if missing:
        why = failures[0] if failures else "another process held them"
        raise SearchError(f"{len(missing)} of {len(jobs)} {phase} job(s) have no record ({missing[0].label} first): "
                          f"{why}; rerun the same command to train only the missing jobs")
    return recs


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
    from cuvee.mixsearch.search import worker_trainer

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
    from cuvee.mixsearch.config import SearchConfigError

    try:
        work(a.config, Path(a.out), a.phase, a.index, a.threads, say=lambda m: print(m, flush=True))
    except (SearchError, SearchConfigError, FolderError) as e:
        print(f"Error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
