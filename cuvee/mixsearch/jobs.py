"""A search's proxy, proof and transfer runs as independent, resumable jobs: what a job is, its record, its lock,
and the job lists that workers and SLURM tasks read. The coordinator (search.py), the local worker processes
(workers.py) and SLURM array tasks (slurm.py) all train through :func:`train_job`.

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

Placement (``--workers``, ``--devices``, ``--slurm``: phases.py) is not part of the binding: a search started with two
workers resumes with one, with the same records.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel import atomic
from cuvee.kernel.errors import UserError
from cuvee.kernel.jobs import append_event, read_record, run_once

LOCKS = "locks"
JOBS = "jobs"


class SearchError(UserError, RuntimeError):
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


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, data)


def event(out: Path, record: dict) -> None:
    """One line in ``events.jsonl``, written with a single append (workers log concurrently)."""
    append_event(Path(out) / "events.jsonl", record)


def _mismatch(out: Path, job: Job) -> SearchError:
    return SearchError(f"{job.record_path(out)} records another job than the plan's ({job.label}); the search folder "
                       f"does not match its plan: use --fresh or another output folder")


def _matches(job: Job):
    return lambda rec: (np.allclose(rec["weights"], job.weights, atol=1e-12) and rec["seed"] == job.seed
                        and rec["tokens"] == job.trained)


def recorded(out: Path, job: Job) -> dict | None:
    """The job's record when it holds this very job (weights, seed, tokens trained); None without a record."""
    return read_record(job.record_path(out), _matches(job), lambda: _mismatch(out, job))


def train_job(out: Path, job: Job, trainer, say=print, wait: bool = True) -> dict | None:
    """The job's record, training it first when no process has (the kernel's one job record + lock); None when
    another process holds the job and ``wait`` is False (a worker then goes on to the next job)."""
    trained = []

    def work() -> dict:
        say(f"[search] {job.label}: weights {', '.join(f'{x:.3f}' for x in job.weights)}")
        trained.append(trainer(job))
        return trained[0]

    rec = run_once(job.record_path(out), Path(out) / LOCKS, f"{job.phase}-{job.stem}", work, matches=_matches(job),
                   mismatch=lambda: _mismatch(out, job), wait=wait,
                   on_wait=lambda: say(f"[search] {job.label}: another process is training it; waiting for its "
                                       f"record"))
    if trained:  # logged once the record is in place: "nothing trained twice" is checked on these lines
        event(out, {"event": "trained", "job": job.stem, "wall_s": rec["wall_s"], "cpu_s": rec["cpu_s"]})
    return rec


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


def code_path() -> str:
    """The folder holding this cuvee package: workers import the very code of their coordinator."""
    return str(Path(__file__).resolve().parents[2])
