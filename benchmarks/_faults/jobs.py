"""A folder datatrove jobs write into (``cuvee run``'s run folder, ``cuvee dedup run``'s work folder): which job
is running, how many of its ranks are complete, the ``.tmp`` and output files left, for kill triggers and for
describing the state a kill left."""

from __future__ import annotations

import os
from pathlib import Path

from _faults.common import Trigger


class JobFolder:
    """``jobs``: (name, kind, tasks) of every job in run order; ``output_glob``: the final output files."""

    def __init__(self, folder: Path, jobs, output_glob: str = "*.jsonl.gz"):
        self.d = folder
        self.jobs = jobs
        self.output_glob = output_glob

    def started(self, job) -> bool:
        return (self.d / "logs" / job).exists()

    def done(self, job) -> int:
        try:
            return len(os.listdir(self.d / "logs" / job / "completions"))
        except OSError:
            return 0

    def tmps(self) -> list[str]:
        out = []
        for sub in ("work", "output"):
            base = self.d / sub
            if base.exists():
                out += [str(p.relative_to(self.d)) for p in base.rglob("*.tmp")]
        return sorted(out)

    def outputs(self) -> list[Path]:
        base = self.d / "output"
        return sorted(base.rglob(self.output_glob)) if base.exists() else []

    def state(self) -> dict:
        """What the run was doing: first job not complete (and whether it had started), ranks done."""
        running, detail = "startup", ""
        if (self.d / ".cuvee-plan.json").exists():
            running = "bound"
        for name, _kind, tasks in self.jobs:
            k = self.done(name)
            if k < tasks:
                if self.started(name):
                    running, detail = name, f"{k}/{tasks} ranks"
                elif name != self.jobs[0][0]:
                    running = f"between jobs, before {name}"
                break
        else:
            running = "all jobs done" + ("" if (self.d / "stats.json").exists() else ", no stats.json")
        out = self.outputs()
        return {"running": running, "ranks": detail, "tmp": self.tmps(),
                "output": f"{len(out)} files {sum(_size(p) for p in out)} B" if out else "-"}


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:  # renamed or removed since it was listed
        return 0


def plan_bound() -> Trigger:
    return Trigger("plan bound", lambda f, t, ctx: (f.d / ".cuvee-plan.json").exists())


def job_in(job: str, frac: float, dur: float) -> Trigger:
    def cond(f, t, ctx):
        if job not in ctx and f.started(job):
            ctx[job] = t
        return job in ctx and t - ctx[job] >= frac * dur

    return Trigger(f"{job} +{frac:.0%} of its time", cond)


def job_ranks(job: str, k: int) -> Trigger:
    return Trigger(f"{job} {k} rank(s) complete", lambda f, t, ctx: f.done(job) >= k)


def tmp_in(sub: str) -> Trigger:
    def cond(f, t, ctx):
        base = f.d / sub
        return base.exists() and any(base.glob("*.tmp"))

    return Trigger(f"first .tmp in {sub}", cond)


def output_appears(min_bytes: int = 1) -> Trigger:
    return Trigger(f"output file >= {min_bytes} B",
                   lambda f, t, ctx: any(_size(p) >= min_bytes for p in f.outputs()))


def all_done(jobs) -> Trigger:
    return Trigger("last job complete, before stats.json", lambda f, t, ctx: f.done(jobs[-1][0]) >= jobs[-1][2])


def watch_timeline(folder: JobFolder, t: float, start: dict, end: dict) -> None:
    """One poll of a reference run: first time each job was seen started and complete."""
    for name, _k, tasks in folder.jobs:
        if name not in start and folder.started(name):
            start[name] = t
        if name not in end and folder.done(name) >= tasks:
            end[name] = t
