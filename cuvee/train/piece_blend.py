"""Blending below the document level: every step reads the mix's weights, whatever the documents' sizes.

A short run (a mix-search proxy, an anneal) reads tens of thousands of tokens while one web page can hold ten
thousand, so a blend of whole documents misses the weights by up to a document per source, and a shuffle of
whole documents lets the share of a small source wander from seed to seed (issue #26: 10 % to 53 % of a
nominal 30 %). Here each source's documents are cut into *pieces* of at most ``piece_tokens`` tokens, each
source's pieces are shuffled by the seed (``cuvee.mixer.shuffle.epoch_stream``), and the sources are re-blended
by the mixer's own rule (``cuvee.mixer.blend.greedy_blend``): every prefix of the stream then holds each
source's weight to within one piece, for every seed. Each piece is read as a document of its own (the loader
masks attention and restarts positions at every piece), so no piece attends to another.

* :class:`BlendView` blends per-source token caches (``cuvee mix search`` proxies);
* :func:`arm_sources` reads which source each document of a mixer output came from (its per-document index,
  cuvee.mixer.docindex) and the weights the mix was written with (one clear line when it cannot), and
  :class:`ArmBlend` blends an anneal arm's documents at those weights (the loader's ``order: pieces``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel.errors import UserError
from cuvee.mixer.blend import greedy_blend
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.shuffle import epoch_stream
from cuvee.train.shards import UNKNOWN_SOURCE, ShardSet, _folder_manifest


class SourcesUnknownError(UserError, ValueError):
    """The per-document sources (or the weights) of a mix cannot be identified; the message is one line.
    ``detail``: why, without the folder's path or the advice to the refused command (what a report shows)."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail or message


def piece_table(lengths: np.ndarray, piece_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document, start, length) of every piece of documents of ``lengths`` tokens (an empty one: one piece)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    per_doc = np.maximum(1, -(-lengths // piece_tokens))
    doc = np.repeat(np.arange(lengths.size, dtype=np.int64), per_doc)
    first = np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
    start = (np.arange(doc.size, dtype=np.int64) - first) * piece_tokens
    length = np.minimum(lengths[doc] - start, piece_tokens)
    return doc, start, length


def blend_order(piece_lengths: list[np.ndarray], names: list[str], weights, tokens: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, piece) of each position of the blend of ``tokens`` tokens: every source's pieces in a fresh
    seeded order per epoch (a source shorter than its share is read again, reshuffled), sources picked by the
    greedy token-deficit rule, so every prefix holds each weight to within one piece."""
    streams = [epoch_stream(len(p), seed, n) for p, n in zip(piece_lengths, names)]
    src, piece = [], []

    def next_piece(i: int) -> int | None:
        item = next(streams[i], None)
        if item is None:
            return None
        src.append(i)
        piece.append(item[1])
        return int(piece_lengths[i][item[1]])

    for _ in greedy_blend([float(w) for w in weights], tokens, next_piece):
        pass
    return np.asarray(src, dtype=np.int16), np.asarray(piece, dtype=np.int64)


class _SourcedPieces(ShardSet):
    """A view whose documents are pieces, each from one named source (``_src``: source index per piece,
    ``_names``), as the loader's share accounting reads them."""

    _src: np.ndarray
    _names: list[str]

    @property
    def num_documents(self) -> int:
        return int(self._src.size)

    def document_source(self, i: int) -> int:
        return int(self._src[i])

    @property
    def source_names(self) -> list[str]:
        return list(self._names)

    def source_ids(self) -> np.ndarray:
        return self._src


class BlendView(_SourcedPieces):
    """The blend of ``weights`` over ``caches`` (one per source) for ``tokens`` tokens, as pieces of the
    cached documents (read it with the loader's ``order: mix``)."""

    def __init__(self, caches: list[IndexedDataset], names: list[str], weights, tokens: int, seed: int,
                 piece_tokens: int, tokenizer: dict):
        tables = [piece_table(c.sequence_lengths, piece_tokens) for c in caches]
        self._src, self._piece = blend_order([t[2] for t in tables], list(names), weights, tokens, seed)
        self._names, self._tables = list(names), tables
        super().__init__(datasets=list(caches), tokenizer=dict(tokenizer), manifests=[])


    @property
    def num_tokens(self) -> int:
        return int(sum(self.document_length(i) for i in range(self.num_documents)))

    def document(self, i: int) -> np.ndarray:
        s, k = int(self._src[i]), int(self._piece[i])
        doc, start, length = (int(x[k]) for x in self._tables[s])
        return self.datasets[s][doc][start:start + length]

    def document_length(self, i: int) -> int:
        return int(self._tables[int(self._src[i])][2][int(self._piece[i])])



# ---- anneal arms: the sources and weights of mixer outputs --------------------------------------------------
@dataclass(frozen=True)
class ArmSources:
    """Which source each document of an arm came from, and the weights the arm is blended at."""

    names: list[str]
    weights: list[float]  # normalised; the order of ``names``
    doc_source: np.ndarray  # source index of every global document
    method: str  # where the weights come from, one sentence


def arm_sources(shards: ShardSet) -> ArmSources:
    """The sources of ``shards`` (one arm) and their configured weights, or :class:`SourcesUnknownError`.

    A document's source is read from the mix's per-document index (:meth:`ShardSet.source_ids`), or, for a
    folder without one whose manifest lists exactly one source, is that source. Weights: the manifest's when the
    arm is one mix output; the token share each source holds in the arm's data when it is several."""
    ids = shards.source_ids().astype(np.int64)
    known = list(shards.source_names)
    names = [n for n in known if n != UNKNOWN_SOURCE]
    manifests: dict[Path, dict] = {}
    for k, ds in enumerate(shards.datasets):
        lo, hi = int(shards.doc_offsets[k]), int(shards.doc_offsets[k + 1])
        folder = Path(ds.prefix).parent.resolve()
        man = manifests.setdefault(folder, _folder_manifest(folder))
        if not (hi > lo and UNKNOWN_SOURCE in known and (ids[lo:hi] == known.index(UNKNOWN_SOURCE)).any()):
            continue
        listed = [str(s.get("name")) for s in man.get("sources") or [] if isinstance(s, dict)]
        if len(listed) != 1:
            why = (f"its manifest lists {len(listed)} sources without which document came from which (no "
                   f"per-document index)" if listed else "it has no mixer manifest listing its sources")
            raise SourcesUnknownError(
                f"{folder}: order: pieces needs the source of every document, but {why}; write the arm with "
                f"`cuvee mix` (or one source per folder), or set order: window",
                detail=f"the source of each document is unknown: in mix folder {folder.name!r}, {why}")
        if listed[0] not in names:
            names.append(listed[0])
        ids[lo:hi] = -1 - names.index(listed[0])  # marked; remapped below
    remap = np.array([names.index(n) if n in names else -1 for n in known], dtype=np.int64)
    doc_source = np.where(ids < 0, -1 - ids, remap[np.clip(ids, 0, None)]).astype(np.int16)
    tokens = np.bincount(doc_source, weights=_lengths(shards), minlength=len(names))
    if len(manifests) == 1:
        (man,) = manifests.values()
        given = {str(s.get("name")): s.get("weight") for s in man.get("sources") or [] if isinstance(s, dict)}
        w = [given.get(n) for n in names]
        if all(isinstance(x, (int, float)) and x >= 0 for x in w) and sum(w) > 0:
            return ArmSources(names, [float(x) / sum(w) for x in w], doc_source,
                              "the weights in the mix output's manifest.json")
    if tokens.sum() <= 0:
        raise SourcesUnknownError("order: pieces: the arm's documents hold no tokens")
    return ArmSources(names, (tokens / tokens.sum()).tolist(), doc_source,
                      "each source's token share of the arm's mix outputs (several outputs, or no weights recorded)")


def _lengths(shards: ShardSet) -> np.ndarray:
    return np.concatenate([np.asarray(d.sequence_lengths, dtype=np.int64) for d in shards.datasets])


class ArmBlend(_SourcedPieces):
    """One epoch of an arm's documents as pieces, re-blended at the arm's weights with ``seed``.

    Each source's documents are cut into slots of ``piece_tokens`` (at offsets 0, P, 2P, ... of the document),
    shuffled by the seed; the greedy rule picks the source. No piece crosses a multiple of ``piece_tokens`` of
    the stream, i.e. a row boundary when ``piece_tokens`` is the sequence length (the default): at a row start
    the source's next slot is read whole; in a row's remaining room the source's first set-aside rest that fits
    is read, else its next slot is cut to the room and its rest set aside (rests only ever fill rooms). So a
    piece of a long document fills a whole row, as an unblended document does, instead of most pieces being
    split over two rows (benchmarks/bench_anneal_shares.py: 67 -> 122 tokens per attention segment at 128).
    The epoch is the arm's tokens (EOS included) rounded up to ``piece_tokens``, so the next epoch starts on a
    row boundary; rests not used by then are not read in that epoch (as the slots a large source does not reach).

    Piece ``i`` (``document(i)``) is a slice of global document ``document_origin(i)`` of ``shards``; with
    ``add_eos`` the document's EOS (appended when it lacks one) ends its last piece, so a piece boundary never
    invents an EOS. A source smaller than its weight is read again, reshuffled."""

    def __init__(self, shards: ShardSet, sources: ArmSources, seed: int, piece_tokens: int, add_eos: bool):
        lengths = _lengths(shards)
        eos = shards.eos_id if add_eos else None
        if eos is not None:
            last = np.array([int(shards.document(i)[-1]) if n else -1 for i, n in enumerate(lengths.tolist())])
            lengths = lengths + (last != eos)
        members = [np.flatnonzero((sources.doc_source == s) & (lengths > 0)) for s in range(len(sources.names))]
        live = [k for k in range(len(members)) if members[k].size and sources.weights[k] > 0]
        tables = {k: piece_table(lengths[members[k]], piece_tokens) for k in live}
        streams = {k: epoch_stream(len(tables[k][0]), seed, sources.names[k]) for k in live}
        rests: dict[int, list[tuple[int, int, int]]] = {k: [] for k in live}
        rec = array("q")  # (source, global document, start, length) per piece, flat: 32 bytes a piece
        pos = 0  # tokens emitted so far

        def next_piece(j: int) -> int:
            nonlocal pos
            k = live[j]
            room = piece_tokens - pos % piece_tokens  # up to the next row boundary
            fit = next((n for n, r in enumerate(rests[k]) if r[2] <= room), None) if room < piece_tokens else None
            if fit is not None:
                doc, start, length = rests[k].pop(fit)
            else:
                _, slot = next(streams[k])
                doc, start, length = (int(x[slot]) for x in tables[k])
            take = min(length, room)
            if take < length:
                rests[k].append((doc, start + take, length - take))
            rec.extend((k, int(members[k][doc]), start, take))
            pos += take
            return take

        target = -(-int(lengths[np.concatenate([members[k] for k in live])].sum()) // piece_tokens) * piece_tokens
        for _ in greedy_blend([sources.weights[k] for k in live], target, next_piece):
            pass
        table = np.frombuffer(rec, dtype=np.int64).reshape(-1, 4)
        self._src = table[:, 0].astype(np.int16)
        self._origin, self._start, self._len = table[:, 1], table[:, 2], table[:, 3]
        self._names, self._eos, self._base = list(sources.names), eos, shards
        super().__init__(datasets=list(shards.datasets), tokenizer=dict(shards.tokenizer), manifests=[])


    @property
    def num_tokens(self) -> int:
        return int(self._len.sum())

    def _where(self, i: int) -> tuple[int, int, int]:
        return int(self._origin[i]), int(self._start[i]), int(self._len[i])

    def document(self, i: int) -> np.ndarray:
        g, start, length = self._where(i)
        toks = self._base.document(g)
        part = toks[start:start + length]
        if len(part) < length:  # the appended EOS
            part = np.append(part, np.asarray(self._eos, dtype=toks.dtype))
        return part

    def document_length(self, i: int) -> int:
        return self._where(i)[2]

    def document_origin(self, i: int) -> int:
        """The global document (of the arm's shards) piece i was cut from."""
        return self._where(i)[0]

