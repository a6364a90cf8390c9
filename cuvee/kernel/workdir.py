"""Folders cuvee owns: a marker, a lock and a binding, so a run never lies and never deletes what is not its own.

Every folder cuvee writes a whole product into carries three small files:

``.cuvee-owner.json``  the marker: which kind of cuvee folder this is. ``--fresh`` deletes inside a folder only
                       when it carries the marker of the right kind; anything else is refused.
``.cuvee.lock``        an exclusive ``flock`` held by the process working in the folder, so a second process gets
                       a clear message instead of racing on the same temporary files.
``.cuvee-plan.json``   the binding: a fingerprint of everything that decides the folder's content, written before
                       any work starts, and the stamps of the input files. A rerun resumes only if its own
                       fingerprint is identical and no input changed; otherwise it stops before any work and says
                       which file or which keys differ.

:func:`open_workdir` is the one preamble, in one fixed order: claim -> lock -> (fresh: empty) -> changed-input
check -> bind -> ``before_sweep`` hook -> sweep stale temporaries. A command declares its :class:`Workdir`
(kind, words, fresh flag) and its binding; the hooks are the only places a command may add to the sequence.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuvee.kernel.atomic import is_temp, write_text
from cuvee.kernel.errors import UserError
from cuvee.kernel.stamps import first_change

MARKER = ".cuvee-owner.json"
LOCK = ".cuvee.lock"
PLAN = ".cuvee-plan.json"
KINDS = ("run", "mix", "train", "dedup", "card", "eval", "tokenizer", "classifier", "annotate", "search", "rephrase")


class FolderError(UserError, RuntimeError):
    """A folder cuvee must not use as asked; the message says why and what to do instead."""


class FolderBusy(FolderError):
    """The lock is held by another process (as opposed to a lock file that cannot be made at all)."""


def _version() -> str:
    from cuvee import __version__

    return __version__


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Workdir:
    """What a command declares about the folder it owns: its kind, how messages name it, its start-over flag."""

    kind: str
    what: str = "folder"
    fresh_flag: str = "--fresh"
    owns: Callable[[Path], bool] | None = None  # entries ``--fresh`` may delete (None: all but marker and lock)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown folder kind {self.kind!r}")


# --------------------------------------------------------------------------------------------- marker

def owner(folder: str | Path) -> dict | None:
    """The folder's marker, or None when cuvee did not create it (or the marker is unreadable)."""
    try:
        data = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("kind") in KINDS else None


def _is_empty_dir(folder: Path) -> bool:
    return folder.is_dir() and not any(folder.iterdir())


def claim(folder: str | Path, kind: str, *, what: str = "folder") -> Path:
    """Create ``folder`` (or adopt an empty one) as a cuvee folder of ``kind``; refuse foreign folders.

    A folder that already holds files but no cuvee marker belongs to someone else: writing into it would mix
    cuvee's files with theirs and later make ``--fresh`` unable to tell them apart."""
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"{what} {folder} exists and is not a folder")
    mark = owner(folder) if folder.exists() else None
    if mark is not None:
        if mark["kind"] != kind:
            raise FolderError(f"{what} {folder} is a cuvee {mark['kind']} folder, not a {kind} folder; "
                              f"choose another folder")
        return folder
    if folder.exists() and not _is_empty_dir(folder):
        raise FolderError(f"{what} {folder} already holds files that cuvee did not create (no {MARKER}); "
                          f"cuvee writes only into empty or cuvee-owned folders: choose another folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / MARKER, json.dumps({"kind": kind, "created": _now(), "cuvee_version": _version()},
                                              indent=2))
    except OSError as e:
        raise FolderError(f"cannot create {what} {folder}: {e.strerror or e}") from None
    return folder


def _dangerous(folder: Path) -> str | None:
    """Why deleting ``folder`` would be catastrophic even with a marker, or None."""
    real = folder.resolve()
    cwd = Path.cwd().resolve()
    if real == Path(real.anchor):
        return "it is a filesystem root"
    if real == Path.home().resolve():
        return "it is the home folder"
    if real == cwd or real in cwd.parents:
        return "it is the current folder or one of its parents"
    return None


def remove_owned(folder: str | Path, kind: str, *, what: str = "folder") -> bool:
    """Delete ``folder`` only if it carries cuvee's ``kind`` marker; return False if it did not exist."""
    folder = Path(folder)
    if not folder.exists():
        return False
    if folder.is_symlink() or not folder.is_dir():
        raise FolderError(f"refusing to delete {what} {folder}: not a plain folder")
    mark = owner(folder)
    if mark is None:
        if _is_empty_dir(folder):
            folder.rmdir()
            return True
        raise FolderError(f"refusing to delete {what} {folder}: it has no {MARKER}, so cuvee did not create it; "
                          f"delete it yourself if you are sure, or choose another folder")
    if mark["kind"] != kind:
        raise FolderError(f"refusing to delete {what} {folder}: it is a cuvee {mark['kind']} folder, not a {kind} folder")
    if why := _dangerous(folder):
        raise FolderError(f"refusing to delete {what} {folder}: {why}")
    shutil.rmtree(folder)
    return True


def empty_owned(folder: str | Path, kind: str, *, what: str = "folder",
                owns: Callable[[Path], bool] | None = None) -> int:
    """Delete everything inside a cuvee folder of ``kind`` except its marker and its lock (``--fresh``); with
    ``owns``, only the entries it accepts and the plan (a command that shares its folder keeps the rest).

    Call it while holding the folder's lock: the folder itself stays, so the lock another process would need
    stays the same file and a concurrent run cannot slip in between delete and re-create."""
    folder = Path(folder)
    mark = owner(folder)
    if mark is None or mark["kind"] != kind:
        raise FolderError(f"refusing to empty {what} {folder}: it is not a cuvee {kind} folder")
    if why := _dangerous(folder):
        raise FolderError(f"refusing to empty {what} {folder}: {why}")
    n = 0
    for entry in folder.iterdir():
        if entry.name in (MARKER, LOCK) or (owns is not None and entry.name != PLAN and not owns(entry)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        n += 1
    return n


# ----------------------------------------------------------------------------------------------- lock

class FolderLock:
    """An exclusive, non-blocking ``flock`` on ``<folder>/.cuvee.lock``, released on exit or process death.

    ``lock_name`` names another lock file in ``folder``: a user-named output file, or one job of many, is
    locked through a sibling."""

    def __init__(self, folder: str | Path, what: str = "folder", lock_name: str = LOCK):
        self.folder = Path(folder)
        self.what = what
        self.lock_name = lock_name
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        path = self.folder / self.lock_name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise FolderError(f"cannot lock {self.what} {self.folder}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            try:
                holder = os.pread(fd, 512, 0).decode(errors="replace").strip()
            except OSError:
                pass
            os.close(fd)
            raise FolderBusy(f"{self.what} {self.folder} is in use by another cuvee process"
                              + (f" ({holder})" if holder else "")
                              + "; wait for it to finish, or use another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename} since {_now()}".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def locked(folder: str | Path, what: str = "folder") -> Iterator[FolderLock]:
    lock = FolderLock(folder, what).acquire()
    try:
        yield lock
    finally:
        lock.release()


# -------------------------------------------------------------------------------------------- binding

def fingerprint(binding: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(binding, sort_keys=True, default=str).encode()).hexdigest()


def _differences(old: Any, new: Any, prefix: str = "", out: list[str] | None = None, limit: int = 12) -> list[str]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            if k not in old:
                out.append(f"{key}: not in the recorded plan")
            elif k not in new:
                out.append(f"{key}: recorded, but missing now")
            else:
                _differences(old[k], new[k], key, out, limit)
            if len(out) >= limit:
                break
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and len(old) > 0 \
            and all(isinstance(x, (dict, list)) for x in old):
        for i, (a, b) in enumerate(zip(old, new)):
            _differences(a, b, f"{prefix}[{i}]", out, limit)
    elif old != new:
        out.append(f"{prefix}: recorded {_short(old)}, now {_short(new)}")
    return list(dict.fromkeys(out))


def _once(diffs: list[str]) -> list[str]:
    """A setting a plan records at its top and inside a section (the run plan's ``tasks`` and
    ``recipe.executor.tasks``) changes in both places at once: it is listed once, by its top-level name."""
    top = [line for line in diffs if "." not in line.partition(": ")[0]]
    return [line for line in diffs if not any(line.endswith("." + t) for t in top)]


def _short(v: Any, n: int = 120) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= n else s[: n - 3] + "..."


def recorded_plan(folder: str | Path, what: str = "folder", fresh_hint: str = "--fresh") -> dict | None:
    """The plan recorded in ``folder`` (``{"fingerprint", "binding", "inputs", ...}``), None when there is none."""
    path = Path(folder) / PLAN
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text())
        if not isinstance(recorded["binding"], dict) or not isinstance(recorded["fingerprint"], str):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise FolderError(f"{what} {folder}: its recorded plan {path.name} is unreadable; "
                          f"start again with {fresh_hint}") from None
    return recorded


def plan_difference(recorded: dict, binding: dict[str, Any], folder: str | Path, what: str,
                    fresh_hint: str) -> FolderError | None:
    """None when ``recorded`` holds ``binding``; else the error that lists the differing keys."""
    fp = fingerprint(binding)
    if recorded["fingerprint"] == fp and fingerprint(recorded["binding"]) == fp:
        return None
    diffs = _once(_differences(recorded["binding"], json.loads(json.dumps(binding, default=str)))) \
        or ["(fingerprints differ)"]
    return FolderError(
        f"{what} {folder} was started with a different plan, so its files cannot be resumed by this one:\n  "
        + "\n  ".join(diffs)
        + f"\nRerun with the original settings to resume, use {fresh_hint} to start over in this folder, "
          f"or choose another folder.")


def _differs(recorded: dict, binding: dict[str, Any], inputs: dict[str, dict] | None) -> bool:
    if recorded["fingerprint"] != fingerprint(binding):
        return True
    return bool(inputs and isinstance(recorded.get("inputs"), dict) and first_change(recorded["inputs"], inputs))


def check_inputs(recorded: dict | None, inputs: dict[str, dict] | None, folder: str | Path, what: str,
                 fresh_hint: str) -> None:
    """One line naming the first input file that changed since the plan was recorded (before the plan's own
    comparison lists every key): resuming would mix results of the old bytes with the new."""
    if recorded is None or not inputs or not isinstance(recorded.get("inputs"), dict):
        return
    if found := first_change(recorded["inputs"], inputs):
        path, what_changed = found
        raise FolderError(f"{what} {folder}: input {path} changed since this folder's plan was recorded "
                          f"({what_changed}); its results would mix old and new content: restore the file, "
                          f"or start over with {fresh_hint}")


def bind(folder: str | Path, binding: dict[str, Any], *, what: str = "folder", fresh_hint: str = "--fresh",
         inputs: dict[str, dict] | None = None) -> dict:
    """Record ``binding`` (and the stamps of ``inputs``) in ``folder`` the first time; afterwards refuse a changed
    input or a binding that differs. Returns the recorded plan."""
    recorded = recorded_plan(folder, what, fresh_hint)
    if recorded is not None:
        check_inputs(recorded, inputs, folder, what, fresh_hint)
        if err := plan_difference(recorded, binding, folder, what, fresh_hint):
            raise err
        return recorded
    recorded = {"fingerprint": fingerprint(binding), "created": _now(), "cuvee_version": _version(),
                "binding": binding}
    if inputs:
        recorded["inputs"] = inputs
    write_text(Path(folder) / PLAN, json.dumps(recorded, indent=2, default=str))
    return recorded


def bind_check(folder: str | Path, binding: dict[str, Any], *, what: str = "folder", fresh_hint: str = "--fresh",
               inputs: dict[str, dict] | None = None) -> dict:
    """Like :func:`bind` but read-only: the folder must already hold this very plan."""
    recorded = recorded_plan(folder, what, fresh_hint)
    if recorded is None:
        raise FolderError(f"{what} {folder} has no recorded plan ({PLAN}); it was not started by this cuvee")
    check_inputs(recorded, inputs, folder, what, fresh_hint)
    if err := plan_difference(recorded, binding, folder, what, fresh_hint):
        raise err
    return recorded


def sweep(folder: str | Path) -> int:
    """Remove the temporaries killed writers left behind (:func:`cuvee.kernel.atomic.is_temp`); only under the lock."""
    n = 0
    for p in Path(folder).rglob("*"):
        if is_temp(p) and p.is_file() and not p.is_symlink():
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    return n


# ------------------------------------------------------------------------------------------ the preamble

@dataclass
class Opened:
    """A folder held by :func:`open_workdir`: its path, the recorded plan, and what the sweep removed."""

    folder: Path
    plan: dict
    swept: int


def open_workdir(folder: str | Path, decl: Workdir, binding: dict[str, Any], held: ExitStack, **kw) -> Opened:
    """The one preamble of every command that writes its own folder; the lock is released when ``held`` closes.

    Order: claim -> lock -> (``before_fresh``, then empty when ``fresh``) -> changed-input check -> bind ->
    ``before_sweep`` -> sweep. Hooks (keyword arguments, each called with the folder):

    * ``before_fresh(folder)``: refuse to go on while something else still writes there (queued SLURM jobs).
    * ``on_other_plan(folder, recorded)``: the recorded plan differs; return True after removing what the old plan
      left (an unfinished attempt nobody can resume), and the folder is bound anew; False (or no hook) refuses.
    * ``before_sweep(folder)``: wait for writers that are not this process (SLURM array tasks) before their
      temporaries are swept.
    """
    return open_workdirs([(folder, decl)], binding, held, **kw)[0]


def open_workdirs(folders: list[tuple[str | Path, Workdir]], binding: dict[str, Any], held: ExitStack, *,
                  fresh: bool = False, inputs: dict[str, dict] | None = None,
                  before_fresh: Callable[[Path], None] | None = None,
                  on_other_plan: Callable[[Path, dict], bool] | None = None,
                  before_sweep: Callable[[Path], None] | None = None) -> list[Opened]:
    """:func:`open_workdir` for the folders one product is written into (a run folder and its output and logging
    folders elsewhere): every one is claimed and locked before any is emptied or bound, so a refusal on the last
    leaves the first untouched."""
    paths = []
    for folder, decl in folders:
        path = claim(folder, decl.kind, what=decl.what)
        held.enter_context(locked(path, decl.what))
        paths.append(path)
    opened = []
    for path, (_, decl) in zip(paths, folders):
        if before_fresh is not None:
            before_fresh(path)
        if fresh:
            empty_owned(path, decl.kind, what=decl.what, owns=decl.owns)
        recorded = recorded_plan(path, decl.what, decl.fresh_flag)
        if recorded is not None and on_other_plan is not None and _differs(recorded, binding, inputs) \
                and on_other_plan(path, recorded):
            (path / PLAN).unlink(missing_ok=True)
        plan = bind(path, binding, what=decl.what, fresh_hint=decl.fresh_flag, inputs=inputs)
        if before_sweep is not None:
            before_sweep(path)
        opened.append(Opened(path, plan, sweep(path)))
    return opened


@contextmanager
def owned(folder: str | Path, decl: Workdir, binding: dict[str, Any], **kw) -> Iterator[Opened]:
    """:func:`open_workdir` as a ``with`` block: the folder is held until the block ends."""
    with ExitStack() as held:
        yield open_workdir(folder, decl, binding, held, **kw)
