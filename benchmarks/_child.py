"""Run a benchmark command in a child process and measure that child alone.

``getrusage(RUSAGE_CHILDREN)`` differences give CPU time, but its ``ru_maxrss`` is the largest child of the
whole invocation so far, so a later, smaller run would report an earlier run's peak. ``os.wait4`` returns
the rusage of the one child (with its own waited-for descendants): CPU seconds and peak RSS per run.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass


@dataclass
class ChildRun:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float  # user + system of the child and its reaped descendants
    max_rss_mb: float  # peak resident set of the child or its largest reaped descendant


def run_child(cmd: list[str], cwd=None, env=None, check: bool = True) -> ChildRun:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        run = ChildRun(proc.returncode, out.read(), err.read(), ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024)
    if check and run.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed (exit {run.returncode}):\n{run.stderr[-2000:]}")
    return run
