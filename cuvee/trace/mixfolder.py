"""A mix folder opened for reading: which shard document holds a token, its index record, its tokens.

Why a class of its own: a trace, a card's spot checks and the 100-position test open the mix once and ask many
positions; the manifest, the per-document index and each shard's cumulative lengths are read once. Nothing here
writes, and a mix whose files disagree with its manifest is refused in one line naming ``cuvee mix --verify``.

Positions: a *global token offset* counts every token of the mix's shards in manifest order (the EOS the mixer
appends to each document included), from 0; ``shard + offset`` counts within one shard. Both land on a
:class:`Position`: the shard, the document's index in it, and the token's offset in the document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel.errors import UserError
from cuvee.mixer.docindex import MixIndex
from cuvee.mixer.indexed import IndexedDataset


class TraceError(UserError, ValueError):
    """A trace that cannot be made as asked (a position out of range, a folder that is not a mix or a run, an
    archive that cannot be read); the message says which and what to do."""


@dataclass(frozen=True)
class Position:
    """One token of a mix: ``shard`` (its prefix), the ``document``'s index in the shard, the ``offset`` of the
    token in the document, and ``token``, its global offset in the mix."""

    shard: str
    document: int
    offset: int
    token: int


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.is_file():
        raise TraceError(f"{folder}: no manifest.json, so not a cuvee mix folder (cuvee mix CONFIG --out {folder} "
                         f"builds one)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: unreadable ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise TraceError(f"{path}: not a cuvee mix manifest (no 'shards' list)")
    return manifest


class MixFolder:
    """A mix folder's shards and per-document index (:class:`cuvee.mixer.docindex.MixIndex`), read-only."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.index = MixIndex(self.folder, self.manifest)  # one line for a mix without its index
        self.shards = [str(s["prefix"]) for s in self.manifest["shards"]]
        tokens = [int(s.get("tokens", 0)) for s in self.manifest["shards"]]
        self.starts = np.concatenate([[0], np.cumsum(tokens, dtype=np.int64)])  # global offset of each shard
        self._datasets: dict[str, IndexedDataset] = {}
        self._ends: dict[str, np.ndarray] = {}
        self._tokenizer = None

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", self.folder.name))

    @property
    def total_tokens(self) -> int:
        return int(self.starts[-1])

    def dataset(self, shard: str) -> IndexedDataset:
        if shard not in self._datasets:
            if shard not in self.shards:
                raise TraceError(f"{self.folder}: no shard {shard!r} in manifest.json (shards: "
                                 f"{', '.join(self.shards[:5])}{', ...' if len(self.shards) > 5 else ''})")
            prefix = self.folder / shard
            if not Path(f"{prefix}.idx").is_file() or not Path(f"{prefix}.bin").is_file():
                raise TraceError(f"{prefix}.bin/.idx: missing; the mix is incomplete (cuvee mix {self.folder} --verify)")
            ds = IndexedDataset(prefix)
            entry = self.manifest["shards"][self.shards.index(shard)]
            if len(ds) != entry.get("documents", len(ds)) or ds.num_tokens != entry.get("tokens", ds.num_tokens):
                raise TraceError(f"{prefix}: {len(ds):,} documents / {ds.num_tokens:,} tokens, manifest.json says "
                                 f"{entry.get('documents'):,} / {entry.get('tokens'):,}; the shard changed since the "
                                 f"mix was written (cuvee mix {self.folder} --verify)")
            self._datasets[shard] = ds
            self._ends[shard] = np.cumsum(ds.sequence_lengths, dtype=np.int64)
        return self._datasets[shard]

    def shard_name(self, shard: str | int) -> str:
        """A shard named by prefix (``demo_00001``) or by its number in the manifest (``1``)."""
        s = str(shard)
        if s in self.shards:
            return s
        if s.isdigit() and int(s) < len(self.shards):
            return self.shards[int(s)]
        raise TraceError(f"{self.folder}: no shard {s!r} (give a prefix such as {self.shards[0]!r} or a number "
                         f"0..{len(self.shards) - 1})")

    def at_token(self, token: int) -> Position:
        """The position of global token offset ``token``."""
        if not 0 <= token < self.total_tokens:
            raise TraceError(f"token {token:,} is outside mix {self.name!r} ({self.folder}): it holds "
                             f"{self.total_tokens:,} tokens, offsets 0..{self.total_tokens - 1:,}")
        k = int(np.searchsorted(self.starts, token, side="right")) - 1
        return self.in_shard(self.shards[k], token - int(self.starts[k]))

    def in_shard(self, shard: str | int, offset: int) -> Position:
        """The position of token ``offset`` of ``shard`` (prefix or number)."""
        name = self.shard_name(shard)
        self.dataset(name)
        ends = self._ends[name]
        total = int(ends[-1]) if len(ends) else 0
        if not 0 <= offset < total:
            raise TraceError(f"offset {offset:,} is outside shard {name} of mix {self.name!r}: it holds {total:,} "
                             f"tokens, offsets 0..{total - 1:,}")
        doc = int(np.searchsorted(ends, offset, side="right"))
        start = int(ends[doc - 1]) if doc else 0
        return Position(name, doc, offset - start, int(self.starts[self.shards.index(name)]) + offset)

    def document_position(self, shard: str, document: int, offset: int = 0) -> Position:
        """The position of token ``offset`` of document ``document`` of ``shard``."""
        ds = self.dataset(shard)
        ends = self._ends[shard]
        start = int(ends[document - 1]) if document else 0
        if not 0 <= offset < int(ds.sequence_lengths[document]):
            raise TraceError(f"offset {offset} is outside document {document} of shard {shard}")
        return Position(shard, document, offset, int(self.starts[self.shards.index(shard)]) + start + offset)

    def tokens(self, pos: Position) -> np.ndarray:
        """Every token of the document at ``pos`` (its EOS included), memory-mapped."""
        return self.dataset(pos.shard)[pos.document]

    def describe(self, pos: Position) -> dict:
        """The index's record of the document at ``pos``: source, selection, epoch, table entry, file, row, id."""
        return self.index.describe(pos.shard, pos.document)

    def source_entry(self, source_index: int) -> dict:
        return (self.manifest.get("sources") or [])[source_index]

    @property
    def eos_id(self) -> int | None:
        return (self.manifest.get("tokenizer") or {}).get("eos_id")

    @property
    def tokenizer(self):
        """The mix's tokenizer, loaded from the manifest's spec and checked against its fingerprint."""
        if self._tokenizer is None:
            from cuvee.mixer.mix import check_manifest_tokenizer
            from cuvee.mixer.tokenizers import load_tokenizer

            spec = (self.manifest.get("config") or {}).get("tokenizer") or self.manifest.get("tokenizer")
            tok = load_tokenizer(spec, num_threads=1)
            check_manifest_tokenizer(self.manifest, tok)
            self._tokenizer = tok
        return self._tokenizer
