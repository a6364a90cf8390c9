"""The rephrase output folder's files: append-only records that make a rerun generate nothing twice.

Every generated answer is appended the moment it arrives, in exactly one of three files:

``rephrased.jsonl``   a finished document (the mix source: the only ``.jsonl`` in the folder), its
                      provenance in ``metadata`` (``rephrase_source_id`` is what a rerun skips by);
``rejected.ndjson``   a source document dropped by a check, with the reason and the tokens it cost;
``parts.ndjson``      a rewritten piece of a long document whose other pieces are not all done yet.

Each record is one line written by one ``write`` to a file opened for appending, so a ``kill -9`` leaves
either the whole line or none of it; a line cut by anything harsher (power loss) is the file's last and
has no newline, and is cut off when the folder is opened again. Any other unreadable line means the
folder was changed outside cuvee, and it is refused rather than guessed at.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DOCS = "rephrased.jsonl"
REJECTED = "rejected.ndjson"
PARTS = "parts.ndjson"
SUMMARY = "rephrase_summary.json"


class RephraseError(Exception):
    """A refusal or failure the user has to act on; reported in one line."""


@dataclass
class Totals:
    """What the folder holds: documents kept, dropped by reason, and the tokens all of it cost."""

    documents: int = 0
    dropped: dict = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add_tokens(self, prompt_tokens, completion_tokens) -> None:
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0


def _read_lines(path: Path) -> tuple[list[dict], int]:
    """The records of ``path`` and the number of torn last lines cut off (0 or 1)."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    cut = 0
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(keep)
        data, cut = data[:keep], 1
    records = []
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            rec = None
        if not isinstance(rec, dict) or "id" not in rec:
            raise RephraseError(f"{path}: line {n} is not a record cuvee wrote; the folder was changed outside "
                                "cuvee: start again with --fresh or use another --out")
        records.append(rec)
    return records, cut


class Ledger:
    """The three record files of one output folder, opened for appending; ``done`` and ``parts`` as found."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        docs, c1 = _read_lines(self.folder / DOCS)
        rejected, c2 = _read_lines(self.folder / REJECTED)
        parts, c3 = _read_lines(self.folder / PARTS)
        self.torn_lines_cut = c1 + c2 + c3
        self.totals = Totals()
        self.done: set[str] = set()
        for rec in docs:
            meta = rec.get("metadata") or {}
            self.done.add(str(meta.get("rephrase_source_id")))
            self.totals.documents += 1
            self.totals.add_tokens(meta.get("rephrase_prompt_tokens"), meta.get("rephrase_completion_tokens"))
        for rec in rejected:
            self.done.add(str(rec["id"]))
            self.totals.dropped[rec["reason"]] = self.totals.dropped.get(rec["reason"], 0) + 1
            self.totals.add_tokens(rec.get("prompt_tokens"), rec.get("completion_tokens"))
        self.parts: dict[str, dict[int, dict]] = {}  # source id -> piece index -> record, for unfinished documents
        for rec in parts:
            if str(rec["id"]) not in self.done:
                self.parts.setdefault(str(rec["id"]), {})[int(rec["piece"])] = rec
        self._fds = {name: os.open(self.folder / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                     for name in (DOCS, REJECTED, PARTS)}

    def pending_part_tokens(self) -> tuple[int, int]:
        """Tokens already spent on pieces of documents not finished yet."""
        recs = [r for pieces in self.parts.values() for r in pieces.values()]
        return sum(r.get("prompt_tokens") or 0 for r in recs), sum(r.get("completion_tokens") or 0 for r in recs)

    def _append(self, name: str, rec: dict) -> None:
        data = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:  # one write for a regular file; the loop only matters on a short write (disk full)
            view = view[os.write(self._fds[name], view):]

    def document(self, rec: dict) -> None:
        self._append(DOCS, rec)
        meta = rec["metadata"]
        self._close(str(meta["rephrase_source_id"]))
        self.totals.documents += 1
        self.totals.add_tokens(meta.get("rephrase_prompt_tokens"), meta.get("rephrase_completion_tokens"))

    def reject(self, rec: dict) -> None:
        self._append(REJECTED, rec)
        self._close(str(rec["id"]))
        self.totals.dropped[rec["reason"]] = self.totals.dropped.get(rec["reason"], 0) + 1
        self.totals.add_tokens(rec.get("prompt_tokens"), rec.get("completion_tokens"))

    def part(self, rec: dict) -> None:
        self._append(PARTS, rec)
        self.parts.setdefault(str(rec["id"]), {})[int(rec["piece"])] = rec

    def _close(self, source_id: str) -> None:
        self.done.add(source_id)
        self.parts.pop(source_id, None)

    def sync(self) -> None:
        for fd in self._fds.values():
            os.fsync(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
