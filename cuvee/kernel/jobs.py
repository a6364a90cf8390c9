"""Independent jobs in one folder (a mix search's proxy, proof and transfer runs): each job has its own lock
and its own record, so any number of processes, on one host or many sharing the folder, train each job once.

A job is done when its record exists and holds this very job (``matches``). Otherwise the process that takes
the job's non-blocking lock (``<lock_dir>/<name>.lock``, freed by the OS when its process dies) reads the record
again, does the work and writes the record atomically. A process killed mid-job leaves no record and frees the
lock, so a rerun does exactly the jobs without a record.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from cuvee.kernel.atomic import write_json
from cuvee.kernel.workdir import FolderBusy, FolderLock


def read_record(path: Path, matches: Callable[[dict], bool], mismatch: Callable[[], Exception]) -> dict | None:
    """The record at ``path`` when it holds this job; None without one; ``mismatch()`` raised for another job's."""
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        if isinstance(rec, dict) and matches(rec):
            return rec
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise mismatch()


def run_once(record: Path, lock_dir: Path, lock_name: str, work: Callable[[], dict], *,
             matches: Callable[[dict], bool], mismatch: Callable[[], Exception], wait: bool = True,
             on_wait: Callable[[], None] | None = None, poll_s: float = 1.0) -> dict | None:
    """The job's record, doing ``work`` first when no process has; None when another process holds the job and
    ``wait`` is False (a worker then goes on to the next job)."""
    rec = read_record(record, matches, mismatch)
    if rec is not None:
        return rec
    Path(lock_dir).mkdir(parents=True, exist_ok=True)
    lock = FolderLock(lock_dir, what=f"job {lock_name}", lock_name=f"{lock_name}.lock")
    told = False
    while True:
        try:
            lock.acquire()
            break
        except FolderBusy:  # a lock that cannot be made at all is an error, never waited for
            if not wait:
                return None
            if not told and on_wait is not None:
                on_wait()
                told = True
            time.sleep(poll_s)
    try:
        rec = read_record(record, matches, mismatch)
        if rec is not None:
            return rec
        rec = work()
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json(record, rec)
        return rec
    finally:
        lock.release()


def append_event(path: Path, event: dict) -> None:
    """One line in an events log, written with a single ``O_APPEND`` write (processes log concurrently)."""
    line = (json.dumps({**event, "time": time.time(), "by": f"{os.getpid()}@{os.uname().nodename}"}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
