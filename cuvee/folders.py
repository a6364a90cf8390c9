"""Folders cuvee owns: a marker, a lock and a binding, so a run never lies and never deletes what is not its own.

Every folder cuvee writes a whole product into (a pipeline run folder, a mix output folder, a training
output folder) carries three small files:

``.cuvee-owner.json``  the marker: which kind of cuvee folder this is. ``--fresh`` and the mixer delete a
                       folder only when it carries the marker of the right kind; anything else is refused.
``.cuvee.lock``        an exclusive ``flock`` held by the process working in the folder, so a second
                       process gets a clear message instead of racing on the same temporary files.
``.cuvee-plan.json``   the binding: a fingerprint of everything that decides the folder's content
                       (resolved config, task count, planned inputs), written before any work starts.
                       A rerun resumes only if its own fingerprint is identical; otherwise it stops
                       before any work and says which keys differ.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cuvee import __version__

MARKER = ".cuvee-owner.json"
LOCK = ".cuvee.lock"
PLAN = ".cuvee-plan.json"
KINDS = ("run", "mix", "train", "dedup", "card", "eval", "tokenizer", "classifier", "annotate", "search", "rephrase")


class FolderError(RuntimeError):
    """A folder cuvee must not use as asked; the message says why and what to do instead."""


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def owner(folder: str | Path) -> dict | None:
    """The folder's marker, or None when cuvee did not create it (or the marker is unreadable)."""
    p = Path(folder) / MARKER
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("kind") in KINDS else None


def _is_empty_dir(folder: Path) -> bool:
    return folder.is_dir() and not any(folder.iterdir())


def claim(folder: str | Path, kind: str, *, what: str = "folder") -> Path:
    """Create ``folder`` (or adopt an empty one) as a cuvee folder of ``kind``; refuse foreign folders.

    A folder that already holds files but no cuvee marker belongs to someone else: writing a run into
    it would mix cuvee's files with theirs and later make ``--fresh`` unable to tell them apart.
    """
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
        atomic_write_text(folder / MARKER, json.dumps({"kind": kind, "created": _now(), "cuvee_version": __version__},
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


def empty_owned(folder: str | Path, kind: str, *, what: str = "folder") -> int:
    """Delete everything inside a cuvee folder of ``kind`` except its marker and lock (``--fresh``).

    Call it while holding the folder's lock: the folder itself stays, so the lock another process
    would need stays the same file and a concurrent run cannot slip in between delete and re-create.
    """
    folder = Path(folder)
    mark = owner(folder)
    if mark is None or mark["kind"] != kind:
        raise FolderError(f"refusing to empty {what} {folder}: it is not a cuvee {kind} folder")
    if why := _dangerous(folder):
        raise FolderError(f"refusing to empty {what} {folder}: {why}")
    n = 0
    for entry in folder.iterdir():
        if entry.name in (MARKER, LOCK):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        n += 1
    return n


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a sibling ``.<name>.<pid>.tmp`` and a rename: readers see the old
    file or the new one, never half of it (a killed writer leaves a ``*.tmp`` that ``clean_stale_tmp`` removes)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FolderLock:
    """An exclusive, non-blocking ``flock`` on ``<folder>/.cuvee.lock``, released on exit or process death.

    ``lock_name`` names another lock file in ``folder``: a user-named output file is locked through a sibling."""

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
            raise FolderError(f"{self.what} {self.folder} is in use by another cuvee process"
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
    return out


def _short(v: Any, n: int = 120) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= n else s[: n - 3] + "..."


def _compare(folder: str | Path, binding: dict[str, Any], what: str, fresh_hint: str) -> dict | None:
    """The recorded plan if it equals ``binding``; None if none is recorded; FolderError if it differs."""
    path = Path(folder) / PLAN
    if not path.exists():
        return None
    fp = fingerprint(binding)
    try:
        recorded = json.loads(path.read_text())
        old = recorded["binding"]
        old_fp = recorded["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        raise FolderError(f"{what} {folder}: its recorded plan {path.name} is unreadable; "
                          f"start again with {fresh_hint}") from None
    if old_fp == fp and fingerprint(old) == fp:
        return recorded
    diffs = _differences(old, json.loads(json.dumps(binding, default=str))) or ["(fingerprints differ)"]
    raise FolderError(
        f"{what} {folder} was started with a different plan, so its files cannot be resumed by this one:\n  "
        + "\n  ".join(diffs)
        + f"\nRerun with the original settings to resume, use {fresh_hint} to start over in this folder, "
          f"or choose another folder.")


def bind(folder: str | Path, binding: dict[str, Any], *, what: str = "folder", fresh_hint: str = "--fresh") -> dict:
    """Record ``binding`` in ``folder`` the first time; afterwards refuse any binding that differs.

    Returns the recorded plan. Raises FolderError naming the differing keys, before any work starts.
    """
    recorded = _compare(folder, binding, what, fresh_hint)
    if recorded is not None:
        return recorded
    recorded = {"fingerprint": fingerprint(binding), "created": _now(), "cuvee_version": __version__,
                "binding": binding}
    atomic_write_text(Path(folder) / PLAN, json.dumps(recorded, indent=2, default=str))
    return recorded


def bind_check(folder: str | Path, binding: dict[str, Any], *, what: str = "folder",
               fresh_hint: str = "--fresh") -> dict:
    """Like ``bind`` but read-only: the folder must already hold this very plan."""
    recorded = _compare(folder, binding, what, fresh_hint)
    if recorded is None:
        raise FolderError(f"{what} {folder} has no recorded plan ({PLAN}); it was not started by this cuvee")
    return recorded


def clean_stale_tmp(folder: str | Path) -> int:
    """Remove temporary files that killed processes left behind (``*.tmp``); call only under the lock."""
    n = 0
    for p in Path(folder).rglob("*.tmp"):
        if p.is_file() and not p.is_symlink():
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    return n


@contextmanager
def owned(folder: str | Path, kind: str, binding: dict[str, Any], *, fresh: bool = False, what: str = "folder",
          fresh_hint: str = "--fresh") -> Iterator[Path]:
    """The preamble of every command that writes its own folder, in one place: claim ``folder`` as ``kind``,
    hold its lock, empty it first when ``fresh``, bind it to ``binding`` and remove what a killed run left."""
    folder = claim(folder, kind, what=what)
    with locked(folder, what):
        if fresh:
            empty_owned(folder, kind, what=what)
        bind(folder, binding, what=what, fresh_hint=fresh_hint)
        clean_stale_tmp(folder)
        yield folder
