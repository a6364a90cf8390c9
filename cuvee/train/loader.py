"""Packed, document-masked, resumable batches over Megatron shards.

Documents are read in a per-epoch O(1)-memory shuffled order (:class:`FeistelPermutation`), EOS-terminated,
and concatenated into rows of ``seq_len`` tokens (nanoGPT-style: row tokens ``p..p+S`` give inputs ``p..p+S-1``
and targets ``p+1..p+S``; the next row starts at ``p+S``). Each row carries:

* ``doc_ids``       segment index per token (unique within the row): attention never crosses a document;
* ``position_ids``  restart at 0 at every document (and at the start of a row for a document continued
                    from the previous row, whose earlier part is out of reach anyway);
* ``labels``        the next token, or ``IGNORE_INDEX`` where the next token starts a new document
                    (predicting a document's first token from the previous document is noise);
* ``cu_seqlens``    segment boundaries over the flattened batch, for varlen attention kernels;
* ``doc_index``     global document index per token (per-document evaluation, bootstrap).

Document order (``order``, the train config's ``data.order``):

* ``global`` (default, the historical behaviour): a fresh seeded permutation of all documents every epoch.
  Well mixed, but the share of each mix source among the first N steps wanders around its weight.
* ``mix``: the mixer's own document order, which is already blended (greedy token deficit: every prefix holds
  each source's weight up to one document) and shuffled within each source by the mixer's seed, so the
  weights a user writes are the weights the model sees at every step (anneals, short ablations). Every epoch
  repeats the same order.
* ``window``: the mixer's order shuffled within consecutive windows of ``window`` documents (a fresh seeded
  shuffle per window and per epoch): a prefix's share stays within about one window of the weights.
* ``pieces``: the documents cut into pieces of at most ``piece_tokens`` (default ``seq_len``) tokens, each mix
  source's pieces shuffled by the seed and re-blended at the mix's weights (:class:`cuvee.train.piece_blend.
  ArmBlend`; a fresh order per epoch): every step reads the weights to within one piece per source, whatever
  the documents' sizes, while every seed reads a different order. Each piece is masked as a document of its
  own; ``doc_index`` still names the document a piece was cut from. Needs each document's source
  (:func:`cuvee.train.piece_blend.arm_sources`; refused in one line otherwise).

Sharding across data-parallel ranks: in ``global`` order rank r reads documents r, r+W, r+2W, ... of each
epoch's permutation. In ``mix`` and ``window`` order all ranks pack the same token stream and rank r takes
rows r, r+W, r+2W, ...: the global batch of step k (``W x batch_size`` rows) is exactly the next contiguous
stretch of the mix, whatever the ranks' document lengths (``pieces`` likewise). The state (epoch, cursor, offset into the current
document) is three integers, so a restart resumes with exactly the batches an uninterrupted run would have
produced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import xxhash

from cuvee.train.permutation import FeistelPermutation
from cuvee.train.piece_blend import ArmBlend, SourcesUnknownError, arm_sources
from cuvee.train.shards import ShardSet

log = logging.getLogger(__name__)
IGNORE_INDEX = -100
ORDERS = ("global", "mix", "window", "pieces")


def _several_mixes(order: str, mixes: int, window: int) -> tuple[int, str]:
    """(level, message): how ``order`` reads data made of several mix outputs, true for each order. ``mix`` and
    ``window`` follow the documents as stored, so the mixes come one after another; ``pieces`` re-blends every
    source of every mix (:func:`cuvee.train.piece_blend.arm_sources`), at each source's token share."""
    if order == "pieces":
        return logging.INFO, (f"order 'pieces' over {mixes} mixes: their sources are blended together at every step, "
                              f"each source at its share of the {mixes} mixes' tokens (not at one mix's weights)")
    how = "in their own order" if order == "mix" else f"shuffled only within windows of {window} documents"
    return logging.WARNING, (f"order {order!r} over {mixes} mixes: they are read one after another ({how}), "
                             f"not blended; order 'pieces' blends them")


@dataclass
class _Cursor:
    epoch: int = 0
    cursor: int = 0  # index into this rank's share of the epoch's document order
    offset: int = 0  # tokens of the current document already consumed

    def copy(self) -> _Cursor:
        return _Cursor(self.epoch, self.cursor, self.offset)


class PackedLoader:
    def __init__(
        self,
        shards: ShardSet,
        seq_len: int,
        batch_size: int,
        seed: int = 1234,
        rank: int = 0,
        world_size: int = 1,
        add_eos: bool = True,
        shuffle: bool = True,
        epochs: int | None = None,
        doc_limit: int | None = None,
        order: str = "global",
        window: int = 1024,
        piece_tokens: int | None = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        if shards.num_documents < world_size:
            raise ValueError(f"{shards.num_documents} documents cannot feed {world_size} ranks")
        if add_eos and shards.eos_id is None:
            raise ValueError("add_eos needs the tokenizer's eos_id (manifest.json) - or set add_eos: false")
        if order not in ORDERS:
            raise ValueError(f"unknown data order {order!r}; known: {', '.join(ORDERS)}")
        if order == "window" and window < 1:
            raise ValueError(f"window must be >= 1 document, got {window}")
        if order != "global" and len(shards.manifests) > 1:
            log.log(*_several_mixes(order, len(shards.manifests), window))
        if order == "pieces" and doc_limit is not None:
            raise ValueError("order: pieces reads whole arms; doc_limit is for evaluation passes")
        self.order, self.window = order, window
        self.piece_tokens = (piece_tokens or seq_len) if order == "pieces" else None
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ValueError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        self._arm = arm_sources(shards) if order == "pieces" else None  # one clear line when sources are unknown
        self._view_cache: tuple[int, ArmBlend] | None = None
        self.interleave_rows = order != "global"  # ranks share one stream and take every W-th row
        self.shards, self.seq_len, self.batch_size = shards, seq_len, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.add_eos, self.shuffle, self.epochs = add_eos, shuffle, epochs
        self.num_documents = min(shards.num_documents, doc_limit or shards.num_documents)  # eval: first k docs
        self.state = _Cursor()
        self.skipped_empty = 0
        self.batches = 0
        self._perm: FeistelPermutation | None = None
        self._perm_epoch = -1
        self._window_key: tuple[int, int] | None = None
        self._doc_cache: tuple[int, int, np.ndarray] | None = None  # (epoch, cursor, tokens)

    # ---- document order -------------------------------------------------------------------
    def _view(self, epoch: int) -> ArmBlend:
        """Epoch ``epoch``'s piece blend (order ``pieces``): the seed's own order first, a fresh one after."""
        if self._view_cache is None or self._view_cache[0] != epoch:
            seed = self.seed if epoch == 0 else xxhash.xxh64_intdigest(f"{self.seed}:pieces:{epoch}".encode())
            self._view_cache = (epoch, ArmBlend(self.shards, self._arm, seed, self.piece_tokens, self.add_eos))
        return self._view_cache[1]

    def source_table(self) -> tuple[list[str], np.ndarray]:
        """(source names, source index of every global document): the sources :func:`arm_sources` identifies
        (the mix's per-document index, or a folder of one source), else the shards' own (``UNKNOWN_SOURCE``
        where unrecorded; only in the orders that do not need them)."""
        arm = self._arm
        if arm is None:
            try:
                arm = arm_sources(self.shards)
            except SourcesUnknownError:
                return self.shards.source_names, self.shards.source_ids()
        return list(arm.names), arm.doc_source

    def _docs_per_epoch(self, epoch: int = 0) -> int:
        n, w, r = self.num_documents, self.world_size, self.rank
        if self.order == "pieces":
            return self._view(epoch).num_documents
        if self.interleave_rows:
            return n
        return (n - r + w - 1) // w

    def document_at(self, epoch: int, cursor: int) -> int:
        """Global document index read by this rank at (epoch, cursor)."""
        if self.order == "pieces":
            return self._view(epoch).document_origin(cursor)
        if self.interleave_rows:
            if self.order == "mix" or not self.shuffle:
                return cursor
            k = cursor // self.window  # window order: shuffle inside window k only
            start = k * self.window
            if self._window_key != (epoch, k):
                size = min(self.window, self.num_documents - start)
                wseed = xxhash.xxh64_intdigest(f"{self.seed}:{epoch}:window{self.window}:{k}".encode())
                self._perm, self._window_key = FeistelPermutation(size, wseed), (epoch, k)
            return start + self._perm[cursor - start]
        j = self.rank + cursor * self.world_size
        if not self.shuffle:
            return j
        if self._perm_epoch != epoch:
            epoch_seed = xxhash.xxh64_intdigest(f"{self.seed}:{epoch}".encode())
            self._perm, self._perm_epoch = FeistelPermutation(self.num_documents, epoch_seed), epoch
        return self._perm[j]

    def _tokens(self, st: _Cursor) -> tuple[int, np.ndarray]:
        key = (st.epoch, st.cursor)
        if self._doc_cache is None or self._doc_cache[:2] != key:
            if self.order == "pieces":  # EOS already ends each document's last piece
                view = self._view(st.epoch)
                self._doc_cache = (st.epoch, st.cursor, view.document(st.cursor), view.document_origin(st.cursor))
                return self._doc_cache[3], self._doc_cache[2]
            doc = self.document_at(st.epoch, st.cursor)
            toks = self.shards.document(doc)
            eos = self.shards.eos_id
            if self.add_eos and len(toks) and toks[-1] != eos:
                toks = np.append(toks, np.asarray(eos, dtype=toks.dtype))
            self._doc_cache = (st.epoch, st.cursor, toks, doc)
        return self._doc_cache[3], self._doc_cache[2]

    def _advance_doc(self, st: _Cursor) -> None:
        st.cursor, st.offset = st.cursor + 1, 0
        if st.cursor >= self._docs_per_epoch(st.epoch):
            st.epoch, st.cursor = st.epoch + 1, 0

    def _exhausted(self, st: _Cursor) -> bool:
        return self.epochs is not None and st.epoch >= self.epochs

    def _take(self, st: _Cursor, n: int) -> list[tuple[np.ndarray, bool, int]]:
        """Consume n stream tokens: pieces of (tokens, starts_document, global doc index)."""
        pieces = []
        while n > 0 and not self._exhausted(st):
            doc, toks = self._tokens(st)
            if len(toks) == 0:
                self.skipped_empty += 1
                if self.skipped_empty in (1, 10, 100, 1000) or self.skipped_empty % 10000 == 0:
                    log.warning("skipped %d empty documents so far", self.skipped_empty)
                self._advance_doc(st)
                continue
            piece = toks[st.offset : st.offset + n]
            pieces.append((piece, st.offset == 0, doc))
            n -= len(piece)
            st.offset += len(piece)
            if st.offset >= len(toks):
                self._advance_doc(st)
        return pieces

    # ---- rows and batches -----------------------------------------------------------------
    def _row(self):
        s = self.seq_len
        pieces = self._take(self.state, s)
        if not pieces:
            raise StopIteration
        peek = self._take(self.state.copy(), 1)  # empty at the end of a finite (eval) pass
        last_label = IGNORE_INDEX if not peek or peek[0][1] else int(peek[0][0][0])
        tokens = np.empty(s, dtype=np.int64)
        labels = np.empty(s, dtype=np.int64)
        positions = np.empty(s, dtype=np.int64)
        doc_ids = np.empty(s, dtype=np.int32)
        doc_index = np.empty(s, dtype=np.int64)
        at = 0
        for seg, (piece, _starts, doc) in enumerate(pieces):
            m = len(piece)
            tokens[at : at + m] = piece
            labels[at : at + m - 1] = piece[1:]
            labels[at + m - 1] = IGNORE_INDEX  # next token belongs to the next document
            positions[at : at + m] = np.arange(m)
            doc_ids[at : at + m] = seg
            doc_index[at : at + m] = doc
            at += m
        vocab = self.shards.vocab_size
        if vocab is not None and at and int(tokens[:at].max()) >= vocab:
            bad = sorted({int(d) for d, t in zip(doc_index[:at], tokens[:at]) if t >= vocab})
            raise ValueError(f"token id >= vocab_size {vocab} in document(s) {bad[:5]}: shards and manifest disagree")
        if at < s:  # only in a finite pass: pad the tail, fully masked
            tokens[at:], labels[at:], positions[at:] = 0, IGNORE_INDEX, 0
            doc_ids[at:], doc_index[at:] = len(pieces), -1
        else:
            labels[s - 1] = last_label
        return tokens, labels, positions, doc_ids, doc_index

    def __iter__(self):
        return self

    def _skip_rows(self, n: int) -> None:
        """Step over n rows of the shared stream (other ranks' rows): memory-mapped slices, no token copies."""
        for _ in range(n):
            self._take(self.state, self.seq_len)

    def __next__(self) -> dict[str, torch.Tensor]:
        rows = []
        saved = self.state.copy()
        skip = self.world_size - 1 if self.interleave_rows else 0
        try:
            for _ in range(self.batch_size):
                self._skip_rows(self.rank if skip else 0)
                rows.append(self._row())
                self._skip_rows(skip - self.rank if skip else 0)
        except StopIteration:
            if not rows:
                self.state = saved
                raise
        self.batches += 1
        cols = [np.stack(c) for c in zip(*rows)]
        batch = dict(zip(("input_ids", "labels", "position_ids", "doc_ids", "doc_index"), map(torch.from_numpy, cols)))
        batch["cu_seqlens"], batch["max_seqlen"] = _cu_seqlens(cols[3])
        return batch

    # ---- resume ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        st = self.state
        return {
            "epoch": st.epoch, "cursor": st.cursor, "offset": st.offset, "batches": self.batches, "skipped_empty": self.skipped_empty,
            "seed": self.seed, "rank": self.rank, "world_size": self.world_size, "seq_len": self.seq_len,
            "batch_size": self.batch_size, "num_documents": self.num_documents, "shuffle": self.shuffle,
            "order": self.order, "window": self.window if self.order == "window" else None,
            "piece_tokens": self.piece_tokens,
        }

    def load_state_dict(self, sd: dict) -> None:
        now = self.state_dict()
        sd = {"order": "global", "window": None, "piece_tokens": None, **sd}  # older checkpoints: these defaults
        for key in ("seed", "rank", "world_size", "seq_len", "batch_size", "num_documents", "shuffle", "order",
                    "window", "piece_tokens"):
            if sd.get(key) != now[key]:
                raise ValueError(f"loader state mismatch on {key}: checkpoint {sd.get(key)!r}, now {now[key]!r}")
        self.state = _Cursor(sd["epoch"], sd["cursor"], sd["offset"])
        self.batches, self.skipped_empty = sd["batches"], sd["skipped_empty"]
        self._doc_cache = None


def realised_shares(
    source: PackedLoader | ShardSet,
    steps: int,
    *,
    seq_len: int | None = None,
    batch_size: int | None = None,
    grad_accum: int = 1,
    world_size: int | None = None,
    order: str | None = None,
    seed: int | None = None,
    window: int | None = None,
    add_eos: bool | None = None,
) -> list[dict]:
    """Cumulative share of tokens from each mix source over the first 1..``steps`` optimizer steps.

    ``source`` is a loader (its settings are used, from its start, and it is left untouched) or a ShardSet
    (then ``seq_len`` and ``batch_size`` are needed). One optimizer step is ``grad_accum`` batches on each of
    ``world_size`` ranks, all counted. Returns one dict per step completed (fewer when a finite pass ends):
    ``{"step", "tokens", "source_tokens": {name: n}, "shares": {name: fraction}}``, tokens being the real
    (non-padding) input tokens, EOS included. Sources come from :meth:`PackedLoader.source_table` (documents
    whose source cannot be identified count as ``"(unknown)"``).
    """
    if isinstance(source, PackedLoader):
        ld = source
        shards = ld.shards
        kw = {"seq_len": ld.seq_len, "batch_size": ld.batch_size, "seed": ld.seed, "world_size": ld.world_size,
                  "add_eos": ld.add_eos, "shuffle": ld.shuffle, "epochs": ld.epochs, "doc_limit": ld.num_documents,
                  "order": ld.order, "window": ld.window, "piece_tokens": ld.piece_tokens}
    else:
        shards = source
        if seq_len is None or batch_size is None:
            raise ValueError("realised_shares over shards needs seq_len and batch_size")
        kw = {"seq_len": seq_len, "batch_size": batch_size, "seed": 1234, "world_size": 1, "add_eos": True, "order": "global",
                  "window": 1024}
    for key, value in (("seq_len", seq_len), ("batch_size", batch_size), ("world_size", world_size),
                       ("order", order), ("seed", seed), ("window", window), ("add_eos", add_eos)):
        if value is not None:
            kw[key] = value
    if steps < 0 or grad_accum < 1:
        raise ValueError("steps must be >= 0 and grad_accum >= 1")
    per_step, done = None, steps
    for rank in range(kw["world_size"]):
        loader = PackedLoader(shards, rank=rank, **kw)
        if per_step is None:
            names, doc_source = loader.source_table()
            per_step = np.zeros((steps, len(names)), dtype=np.int64)
        for step in range(steps):
            for _ in range(grad_accum):
                try:
                    batch = next(loader)
                except StopIteration:
                    done = min(done, step)
                    break
                idx = batch["doc_index"].numpy().reshape(-1)
                idx = idx[idx >= 0]
                per_step[step] += np.bincount(doc_source[idx], minlength=len(names))
    out = []
    cum = np.cumsum(per_step[:done], axis=0)
    for step, row in enumerate(cum, start=1):
        total = int(row.sum())
        out.append({
            "step": step,
            "tokens": total,
            "source_tokens": {n: int(c) for n, c in zip(names, row)},
            "shares": {n: (float(c) / total if total else 0.0) for n, c in zip(names, row)},
        })
    return out


def _cu_seqlens(doc_ids: np.ndarray) -> tuple[torch.Tensor, int]:
    flat = doc_ids.reshape(-1)
    starts = np.ones(flat.shape, dtype=bool)
    starts[1:] = flat[1:] != flat[:-1]
    starts[:: doc_ids.shape[1]] = True  # every row starts a segment
    cu = np.append(np.flatnonzero(starts), flat.size).astype(np.int32)
    return torch.from_numpy(cu), int(np.diff(cu).max())
