"""One append-only resume ledger: a JSONL file of records, so a rerun of a per-record job does nothing twice.

Writing: each record is one line (JSON object, UTF-8, ``\\n``) written by one ``write`` to a file opened with
``O_APPEND``, so a ``kill -9`` leaves the whole line or none of it. fsync policy: the file is fsynced at most once
per :data:`SYNC_EVERY_S` while records are appended, and on :meth:`Ledger.sync` / :meth:`Ledger.close`; a power
loss can cost the records of the last second (a rerun asks for them again) and can tear the last line.

Reading (:func:`read`, which changes nothing): every line but the last must be a JSON object, otherwise the
file was changed outside cuvee and :class:`LedgerError` names the line. The last line, when it has no newline,
is one of: a complete record (kept; its newline is restored on open), a torn prefix of a record (it begins with
``{``: dropped, and cut off on open so the record is redone), or anything else (an error naming the line).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cuvee.kernel.errors import UserError

SYNC_EVERY_S = 1.0


class LedgerError(UserError, ValueError):
    """A ledger file cuvee cannot resume from: a line it did not write, or not a file."""


@dataclass(frozen=True)
class Contents:
    """What :func:`read` found: the records, the size read, and the bytes of whole lines to keep."""

    records: list[dict]
    size: int
    keep: int  # a torn last line starts here (== size when there is none)
    newline_missing: bool  # the last record is complete but lost its newline

    @property
    def torn(self) -> int:
        """Lines to cut on open (0 or 1)."""
        return int(self.keep < self.size)


def _record(line: bytes) -> dict | None:
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def read(path: str | Path, advice: str = "") -> Contents:
    """The records of ``path`` (none when it does not exist); LedgerError names the first line that is not one.
    ``advice`` ends that message (what the user should do)."""
    path = Path(path)
    if not path.exists():
        return Contents([], 0, 0, False)
    if not path.is_file():
        raise LedgerError(f"{path}: not a file{advice}")
    data = path.read_bytes()
    *lines, tail = data.split(b"\n")  # tail: what follows the last newline (b"" when the file ends in one)
    records = []
    for n, line in enumerate(lines, 1):
        rec = _record(line)
        if rec is None:
            raise LedgerError(f"{path}: line {n} is not a record cuvee wrote{advice}")
        records.append(rec)
    if not tail:
        return Contents(records, len(data), len(data), False)
    rec = _record(tail)
    if rec is not None:
        return Contents([*records, rec], len(data), len(data), True)
    if tail.startswith(b"{"):
        return Contents(records, len(data), len(data) - len(tail), False)
    raise LedgerError(f"{path}: line {len(lines) + 1} is not a record cuvee wrote{advice}")


class Ledger:
    """``path`` opened for appending records, after its torn last line (if any) is cut off.

    ``contents`` is what :func:`read` returned for it, when the caller checked the records first."""

    def __init__(self, path: str | Path, contents: Contents | None = None, advice: str = ""):
        self.path = Path(path)
        self.contents = contents if contents is not None else read(self.path, advice)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size != self.contents.size:
            os.close(self._fd)
            raise LedgerError(f"{self.path} changed since it was read; rerun")
        if self.contents.torn:
            os.ftruncate(self._fd, self.contents.keep)
        elif self.contents.newline_missing:
            self._write(b"\n")
        self._synced = time.monotonic()

    @property
    def records(self) -> list[dict]:
        return self.contents.records

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # one write for a regular file; the loop only matters on a short write (disk full)
            view = view[os.write(self._fd, view):]

    def append(self, record: dict) -> None:
        self._write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        if time.monotonic() - self._synced >= SYNC_EVERY_S:
            self.sync()

    def sync(self) -> None:
        os.fsync(self._fd)
        self._synced = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
