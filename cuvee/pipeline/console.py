"""A quiet console for ``cuvee run``: one progress line per phase, then the summary table.

datatrove logs every task's start, pipeline, per-file progress and a full stats dump to the console, so a
run prints hundreds of lines around the progress bar and the summary that matters scrolls away. The task
log *files* under ``<run_dir>/logs/<job>/logs/`` keep everything (DEBUG and up, with tracebacks); the console
keeps only warnings and errors, one line each and capped per process (the rest are in the files), and never a
traceback: a task's failure is the command's one ``Error:`` line. ``cuvee run -v`` shows datatrove's console.

The progress display follows the jobs in order (segments and whole-corpus phases): finished tasks of the
current job with an ETA from the task rate, and, from the per-task stats datatrove writes when a task
ends, documents read, kept and dropped so far and documents per second.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

MAX_CONSOLE_WARNINGS = 20  # per process; the task log files have all of them

_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | <level>{level: <8}</level> | {name}:{function}:{line} - <level>{message}</level>"


def _ends_the_task(record) -> bool:
    """An error with its exception (datatrove logs a task's failure so, then raises it: a recipe error, a full
    disk): the command prints it as its one ``Error:`` line, so the console skips the record; the task log
    files keep it, with the traceback."""
    return record["exception"] is not None and record["level"].no >= 40


def _console_format(record) -> str:
    """The console's format, without ``{exception}``: no traceback reaches the console (``-v`` shows them)."""
    return _FORMAT + "\n"


def _best_effort(logfile):
    """A task log file sink that drops a line it cannot write (a full disk) instead of loguru's own
    "Logging error" report with a traceback on the console; the task's error itself still ends the task."""

    def write(message) -> None:
        try:
            logfile.write(message)
        except OSError:
            pass

    return write


class _Cap:
    """A loguru filter that lets the first ``limit`` records through, then says once where the rest are."""

    def __init__(self, limit: int, where: str):
        self.limit, self.where, self.seen = limit, where, 0

    def __call__(self, record) -> bool:
        self.seen += 1
        if self.seen <= self.limit:
            return True
        if self.seen == self.limit + 1:
            sys.stderr.write(f"(more warnings: see the task logs under {self.where})\n")
        return False


_ENV = "CUVEE_QUIET_CONSOLE"  # set while a quiet run lives: task processes (forkserver/spawn) quiet themselves
_installed: tuple | None = None


def install_quiet(where: str = "the run folder's logs/") -> None:
    """Replace datatrove's console sinks (default and per task) by a WARNING-level, capped one. Idempotent."""
    global _installed
    if _installed is not None:
        return
    import datatrove.executor.base as executor_base
    import datatrove.utils.logging as dlog
    from loguru import logger

    cap = _Cap(MAX_CONSOLE_WARNINGS, where)

    def console_sink():
        logger.add(sys.stderr, level="WARNING", filter=lambda r: not _ends_the_task(r) and cap(r),
                   colorize=dlog.DATATROVE_COLORIZE_LOGS, format=_console_format)

    def setup_default_logger():
        logger.remove()
        console_sink()

    def add_task_logger(logging_dir, rank: int, local_rank: int = 0, node_rank: int = -1):
        # datatrove's own task logger, with the console sink at WARNING instead of INFO (file sink unchanged)
        logger.remove()
        logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
        prefix = f"[NODE {node_rank}] " if node_rank != -1 else ""
        if local_rank == 0:
            console_sink()
        logger.add(_best_effort(logfile), colorize=dlog.DATATROVE_COLORIZE_LOG_FILES, level="DEBUG", format=prefix + _FORMAT)
        logger.info(f"Launching pipeline for {rank=}")
        return logfile

    _installed = (dlog.add_task_logger, executor_base.add_task_logger, dlog.setup_default_logger)
    dlog.add_task_logger = executor_base.add_task_logger = add_task_logger
    dlog.setup_default_logger = setup_default_logger
    setup_default_logger()


def uninstall_quiet() -> None:
    global _installed
    if _installed is None:
        return
    import datatrove.executor.base as executor_base
    import datatrove.utils.logging as dlog

    dlog.add_task_logger, executor_base.add_task_logger, dlog.setup_default_logger = _installed
    _installed = None
    dlog.setup_default_logger()


@contextmanager
def quiet_datatrove(verbose: bool, where: str = "the run folder's logs/"):
    """While the block runs, datatrove's console output is warnings and errors only (``verbose``: unchanged),
    in this process and in the task processes the local executor starts."""
    if verbose:
        yield
        return
    previous = os.environ.get(_ENV)
    os.environ[_ENV] = where
    install_quiet(where)
    try:
        yield
    finally:
        uninstall_quiet()
        if previous is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = previous


if os.environ.get(_ENV):  # a task process of a quiet run: cuvee's steps import this module when unpickled
    install_quiet(os.environ[_ENV])


def timed(label: str, do: Callable[[], object], stream=None) -> float:
    """``label ... 4.2 s`` on one line around ``do()`` (the label first, so a wait is explained while it lasts):
    the console's one way of saying what takes time before a run's phases start (compiling kernels,
    starting Ray). Returns the seconds."""
    stream = stream or sys.stderr
    stream.write(f"{label} ...")
    stream.flush()
    t0 = time.perf_counter()
    try:
        do()
    finally:
        took = time.perf_counter() - t0
        stream.write(f" {took:.1f} s\n")
        stream.flush()
    return took


def _total(v) -> int:
    if isinstance(v, dict):  # datatrove's metric stats
        v = v.get("total")
    return int(v or 0)


def job_progress(job) -> dict:
    """Finished tasks of a job and, from their stats files, documents read / kept / dropped."""
    logs = Path(job.logging_dir)
    done = job.completed_ranks()
    read = kept = 0
    for f in (logs / "stats").glob("*.json") if (logs / "stats").exists() else ():
        try:
            steps = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # being written
        if steps:
            read += _total(steps[0]["stats"].get("total"))
            kept += _total(steps[-1]["stats"].get("total"))
    return {"done": done, "read": read, "kept": kept}


def phase_title(job) -> str:
    """A job's name as the console shows it: a segment says which stages it runs, ``seg00 (url_filter..
    exact_dedup)``; a whole-corpus phase's name (``02.minhash_dedup.buckets``) already does."""
    if job.kind != "segment":
        return job.name
    names: list[str] = []
    for role, label in job.labels:
        name = label.split(".", 1)[-1]
        if role == "stage" and name not in names:  # the compiler's STAGE role
            names.append(name)
    what = "reads and writes" if not names else ", ".join(names) if len(names) <= 2 else f"{names[0]}..{names[-1]}"
    return f"{job.name} ({what})"


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{int(s) // 60} min {int(s) % 60:02d} s"


class PhaseProgress:
    """One progress line per job, in order; polls completion markers and per-task stats twice a second.

    Each job shows its own time (from when the jobs before it finished to when its last task did) and, while
    it runs, its own remaining time from its task rate; a job whose tasks had all finished before this run
    (a resumed run) says "already complete" instead of a rate. ``clock`` is the time source (seconds).
    """

    def __init__(self, jobs, enabled: bool, stream=None, clock=time.perf_counter):
        self.jobs, self.enabled, self.clock = jobs, enabled, clock
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = None
        self._bars: dict[str, object] = {}  # job name -> tqdm bar, or True once its line is final
        self._t0: dict[str, float] = {}
        self._t1: dict[str, float] = {}  # when each job's last task was seen finished
        self._finished: dict[str, dict] = {}  # progress of jobs whose tasks all finished: never changes again
        self._already: set[str] = set()  # jobs complete before this run started

    def _progress(self, job) -> dict:
        if job.name in self._finished:
            return self._finished[job.name]
        p = job_progress(job)
        self._t0.setdefault(job.name, self.clock())
        if p["done"] >= job.tasks:
            self._finished[job.name] = p
            self._t1[job.name] = self.clock()
        return p

    @staticmethod
    def _docs(job, p: dict, took: float | None) -> str:
        if job.kind != "segment" or not p["read"]:
            return ""
        rate = "" if took is None else f", {p['read'] / max(1e-9, took):,.0f} docs/s"
        return f"{p['read']:,} docs read, {p['kept']:,} kept, {p['read'] - p['kept']:,} dropped{rate}"

    def _line(self, job, p: dict) -> str:
        """The job's status: tasks, documents, and its own elapsed (and, while running, remaining) time."""
        if job.name in self._already:
            docs = self._docs(job, p, None)
            return f"{phase_title(job)}: already complete ({p['done']}/{job.tasks} tasks{', ' + docs if docs else ''})"
        took = self._t1.get(job.name, self.clock()) - self._t0.get(job.name, self.clock())
        docs = self._docs(job, p, took)
        timing = _seconds(took)
        if job.name not in self._t1 and 0 < p["done"] < job.tasks:
            timing += f", ~{_seconds(took / p['done'] * (job.tasks - p['done']))} left"
        return f"{phase_title(job)}: {p['done']}/{job.tasks} tasks{', ' + docs if docs else ''}, {timing}"

    def _update_plain(self, final: bool) -> None:
        """Not a terminal (CI logs, pipes): one line per phase when it ends, no redraws."""
        for job in self.jobs:
            p = self._progress(job)
            if (p["done"] >= job.tasks or final) and job.name not in self._bars:
                self._bars[job.name] = True
                self.stream.write(self._line(job, p) + "\n")
                self.stream.flush()
            if p["done"] < job.tasks:
                break  # the jobs after it have not started

    def _update(self, final: bool = False) -> None:
        if not getattr(self.stream, "isatty", lambda: False)():
            return self._update_plain(final)
        from tqdm import tqdm

        for job in self.jobs:  # a job is reached only once every job before it has finished
            bar = self._bars.get(job.name)
            if bar is True:  # finished and printed: its line no longer changes
                continue
            p = self._progress(job)
            if bar is None:  # tqdm only redraws the line; what it shows is ours (its clock runs to the end)
                bar = self._bars[job.name] = tqdm(total=job.tasks, file=self.stream, leave=True,
                                                  dynamic_ncols=True, bar_format="{desc}")
            bar.n = p["done"]
            filled = 10 * p["done"] // max(1, job.tasks)
            title, status = self._line(job, p).split(": ", 1)
            bar.set_description_str(f"{title}: |{'#' * filled}{' ' * (10 - filled)}| {status}", refresh=False)
            bar.refresh()
            if p["done"] >= job.tasks or final:
                bar.close()
                self._bars[job.name] = True
            if p["done"] < job.tasks:
                break

    def __enter__(self):
        if self.enabled:
            self._already = {job.name for job in self.jobs if job.completed_ranks() >= job.tasks}

            def poll():
                while not self._stop.wait(0.5):
                    self._update()

            self._thread = threading.Thread(target=poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._update(final=True)
            for bar in self._bars.values():
                if bar is not True:
                    bar.close()
