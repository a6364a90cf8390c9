"""A search's jobs as ONE SLURM job array per phase: array index = job index in ``jobs/<phase>.json``.

The coordinator (holding the search folder's lock) writes ``slurm/<phase>.sbatch`` into the search folder and
submits it with ``sbatch --array=<indices of the jobs without a record>``; each task runs the internal worker
(``python -m cuvee.mixsearch.workers --index $SLURM_ARRAY_TASK_ID``), which takes only the job's own lock, so
tasks never wait on the coordinator (see cuvee/mixsearch/jobs.py). Submitted job ids are appended to
``slurm/jobs.json``: a rerun while one of them is still queued or running waits for it (or, with ``--no-wait``,
is refused) and never submits a second array for the same jobs. The coordinator waits by polling ``squeue``
(no accounting database needed); a task that left no record is named with its log file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cuvee.kernel import slurm
from cuvee.mixsearch.jobs import Job, SearchError, Submitted, code_path, write_json

SLURM = "slurm"
_PARTITION = re.compile(r"^[A-Za-z0-9_.,-]{1,128}$")
_TIME = re.compile(r"^(\d{1,4}-)?\d{1,6}(:\d{1,2}){0,2}$")


@dataclass(frozen=True)
class SlurmOptions:
    """sbatch options of every task (spelled as the pipeline's SLURM executor spells them)."""

    partition: str | None = None
    time: str = "04:00:00"
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    mem_per_cpu_gb: int = 2
    poll_s: float = 2.0

    def __post_init__(self):
        if self.partition is not None and not _PARTITION.match(self.partition):
            raise SearchError(f"--partition {self.partition!r}: a SLURM partition name (letters, digits, _ . , -)")
        if not _TIME.match(self.time):
            raise SearchError(f"--time {self.time!r}: a SLURM time limit such as 30, 01:30:00 or 1-00:00:00")
        for flag, v, lo in (("--cpus-per-task", self.cpus_per_task, 1), ("--gpus-per-task", self.gpus_per_task, 0),
                            ("--mem-per-cpu-gb", self.mem_per_cpu_gb, 1)):
            if not lo <= v <= 4096:
                raise SearchError(f"{flag} {v}: give {lo} to 4096")

    def header(self) -> list[str]:
        lines = [f"#SBATCH --time={self.time}", f"#SBATCH --cpus-per-task={self.cpus_per_task}",
                 f"#SBATCH --mem-per-cpu={self.mem_per_cpu_gb}G"]
        if self.partition:
            lines.append(f"#SBATCH --partition={self.partition}")
        if self.gpus_per_task:
            lines.append(f"#SBATCH --gpus-per-task={self.gpus_per_task}")
        return lines


def _ranges(indices: list[int]) -> str:
    """0,1,2,5,7,8 -> '0-2,5,7-8' (sbatch --array syntax)."""
    out, start = [], None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else str(x))
            start = None
    return ",".join(out)


def _submitted(out: Path) -> list[dict]:
    try:
        return list(json.loads((Path(out) / SLURM / "jobs.json").read_text())["arrays"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _ids(out: Path) -> list[str]:
    return [str(a["job_id"]) for a in _submitted(out)]


def refuse_if_running(out: Path, why: str) -> None:
    """Refuse while an array submitted from this folder is queued or running (when SLURM can be asked)."""
    alive = slurm.alive(_ids(out))
    if alive:
        raise SearchError(f"search folder {out}: SLURM job(s) {', '.join(alive)} submitted by an earlier run are "
                          f"still queued or running ({why}); wait for them or cancel them with scancel")


def wait_for_earlier(out: Path, wait: bool, say, poll_s: float = 2.0) -> None:
    """Before a rerun goes on: wait for the arrays an earlier run submitted (refused with ``--no-wait``)."""
    alive = slurm.alive(_ids(out))
    if alive is None:
        say(f"[search] warning: {out} records SLURM job(s) {', '.join(_ids(out))} but squeue is not here; jobs "
            f"they may still train are protected by their locks")
        return
    if not alive:
        return
    if not wait:
        raise SearchError(f"search folder {out}: SLURM job(s) {', '.join(alive)} submitted by an earlier run are "
                          f"still queued or running; nothing submitted again: rerun without --no-wait to wait "
                          f"for them, or cancel them with scancel")
    say(f"[search] SLURM job(s) {', '.join(alive)} submitted by an earlier run are still queued or running: "
        f"waiting for them (nothing is submitted twice)")
    slurm.wait_until_done(alive, poll_s)


def _script(out: Path, phase: str, opts: SlurmOptions, argv: list[str], threads: int) -> Path:
    q = shlex.quote
    cmd = " ".join(q(a) for a in argv)
    text = "\n".join([
        "#!/bin/bash",
        f"# cuvee mix search: the {phase} jobs of {q(str(out))}; array index = job index in jobs/{phase}.json",
        *opts.header(),
        "set -e",
        f"export PATH={q(os.path.dirname(argv[0]))}:\"$PATH\"",
        f"export PYTHONPATH={q(code_path())}\"${{PYTHONPATH:+:$PYTHONPATH}}\"",
        f"exec {cmd} --phase {phase} --index \"$SLURM_ARRAY_TASK_ID\" --threads {int(threads)}",
        ""])
    path = Path(out) / SLURM / f"{phase}.sbatch"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _log_pattern(out: Path, phase: str) -> str:
    return str(Path(out).resolve() / SLURM / "logs" / f"{phase}-%A_%a.out")


def run_array(out: Path, phase: str, indices: list[int], opts: SlurmOptions, argv: list[str], threads: int,
              search: str, wait: bool, say) -> None:
    """Submit the jobs at ``indices`` as one array, record its id, then wait for it (or raise Submitted)."""
    if not shutil.which("sbatch"):
        raise SearchError("--slurm: sbatch is not on PATH (run the search on a SLURM login node)")
    script = _script(out, phase, opts, argv, threads)
    (Path(out) / SLURM / "logs").mkdir(exist_ok=True)
    cmd = ["sbatch", "--parsable", f"--job-name=cuvee-search-{search}-{phase}", f"--array={_ranges(indices)}",
           f"--output={_log_pattern(out, phase)}", f"--chdir={os.getcwd()}", str(script)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise SearchError(f"sbatch failed: {e}") from None
    job_id = r.stdout.strip().split(";")[0]
    if r.returncode != 0 or not job_id.isdigit():
        raise SearchError(f"sbatch refused the {phase} array: {' '.join((r.stderr or r.stdout).split())[:300]}")
    arrays = _submitted(out) + [{"job_id": job_id, "phase": phase, "indices": indices, "script": str(script),
                                 "submitted": time.time()}]
    write_json(Path(out) / SLURM / "jobs.json", {"arrays": arrays})
    logs = Path(out) / SLURM / "logs"
    if not wait:
        raise Submitted(f"[search] submitted SLURM array {job_id} ({phase}: {len(indices)} job(s)), logs in {logs}; "
                        f"rerun the same command to go on once it is done (a rerun waits for it, never submits it "
                        f"twice)")
    say(f"[search] {phase}: SLURM array {job_id} with {len(indices)} task(s) submitted; waiting (logs in {logs})")
    slurm.wait_until_done([job_id], opts.poll_s)


def failure_line(out: Path, phase: str, jobs: list[Job], missing: list[Job]) -> str:
    """One line naming the first array task whose job left no record, and its log."""
    arrays = [a for a in _submitted(out) if a["phase"] == phase]
    first = missing[0]
    i = jobs.index(first)
    array = next((a for a in reversed(arrays) if i in a["indices"]), None)
    if array is None:
        return f"{len(missing)} {phase} job(s) have no record and no SLURM task was submitted for them; rerun"
    log = Path(_log_pattern(out, phase).replace("%A", str(array["job_id"])).replace("%a", str(i)))
    last = "no log written"
    if log.exists():
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        last = lines[-1][:300] if lines else "empty log"
    return (f"{len(missing)} of {len(jobs)} {phase} job(s) left no record: SLURM task {array['job_id']}_{i} "
            f"({first.label}) failed, see {log} ({last}); rerun the same command to resubmit only the missing jobs")
