"""The rephrase output folder's records: three resume ledgers that make a rerun generate nothing twice.

Every generated answer is appended the moment it arrives, in exactly one of three files, each a
:class:`cuvee.kernel.ledger.Ledger` (one line per record, a torn last line cut and redone on resume, any other
unreadable line refused as a change made outside cuvee):

``rephrased.jsonl``   a finished document (the mix source: the only ``.jsonl`` in the folder), its
                      provenance in ``metadata`` (``rephrase_source_id`` is what a rerun skips by);
``rejected.ndjson``   a source document dropped by a check, with the reason and the tokens it cost;
``parts.ndjson``      a rewritten piece of a long document whose other pieces are not all done yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cuvee.kernel.errors import UserError
from cuvee.kernel.ledger import Ledger

DOCS = "rephrased.jsonl"
REJECTED = "rejected.ndjson"
PARTS = "parts.ndjson"
SUMMARY = "rephrase_summary.json"
ADVICE = "; the folder was changed outside cuvee: start again with --fresh or use another --out"


class RephraseError(UserError):
    """A refusal or failure of ``cuvee rephrase`` the user has to act on; reported in one line."""


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


class Records:
    """The three ledgers of one output folder, opened for appending; ``done`` and ``parts`` as found."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.ledgers: dict[str, Ledger] = {}
        try:
            for name in (DOCS, REJECTED, PARTS):
                self.ledgers[name] = Ledger(self.folder / name, advice=ADVICE)
                for n, rec in enumerate(self.ledgers[name].records, 1):
                    if "id" not in rec:
                        raise RephraseError(f"{self.folder / name}: line {n} is not a record cuvee wrote{ADVICE}")
        except BaseException:
            self.close()
            raise
        self.torn_lines_cut = sum(led.contents.torn for led in self.ledgers.values())
        self.totals = Totals()
        self.done: set[str] = set()
        for rec in self.ledgers[DOCS].records:
            meta = rec.get("metadata") or {}
            self.done.add(str(meta.get("rephrase_source_id")))
            self.totals.documents += 1
            self.totals.add_tokens(meta.get("rephrase_prompt_tokens"), meta.get("rephrase_completion_tokens"))
        for rec in self.ledgers[REJECTED].records:
            self.done.add(str(rec["id"]))
            self.totals.dropped[rec["reason"]] = self.totals.dropped.get(rec["reason"], 0) + 1
            self.totals.add_tokens(rec.get("prompt_tokens"), rec.get("completion_tokens"))
        self.parts: dict[str, dict[int, dict]] = {}  # source id -> piece index -> record, for unfinished documents
        for rec in self.ledgers[PARTS].records:
            if str(rec["id"]) not in self.done:
                self.parts.setdefault(str(rec["id"]), {})[int(rec["piece"])] = rec

    def pending_part_tokens(self) -> tuple[int, int]:
        """Tokens already spent on pieces of documents not finished yet."""
        recs = [r for pieces in self.parts.values() for r in pieces.values()]
        return sum(r.get("prompt_tokens") or 0 for r in recs), sum(r.get("completion_tokens") or 0 for r in recs)

    def document(self, rec: dict) -> None:
        self.ledgers[DOCS].append(rec)
        meta = rec["metadata"]
        self._close(str(meta["rephrase_source_id"]))
        self.totals.documents += 1
        self.totals.add_tokens(meta.get("rephrase_prompt_tokens"), meta.get("rephrase_completion_tokens"))

    def reject(self, rec: dict) -> None:
        self.ledgers[REJECTED].append(rec)
        self._close(str(rec["id"]))
        self.totals.dropped[rec["reason"]] = self.totals.dropped.get(rec["reason"], 0) + 1
        self.totals.add_tokens(rec.get("prompt_tokens"), rec.get("completion_tokens"))

    def part(self, rec: dict) -> None:
        self.ledgers[PARTS].append(rec)
        self.parts.setdefault(str(rec["id"]), {})[int(rec["piece"])] = rec

    def _close(self, source_id: str) -> None:
        self.done.add(source_id)
        self.parts.pop(source_id, None)

    def close(self) -> None:
        for led in self.ledgers.values():
            led.close()
