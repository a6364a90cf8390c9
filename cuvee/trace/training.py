"""A training run's step and row -> the mix documents the trainer packed into that row, and where in them.

The trainer's loader is deterministic (cuvee/train/loader.py): its state is three integers and every rank's rows
are consecutive ``seq_len`` windows of one token stream (order ``global``: each rank's own stream; ``mix``,
``window``, ``pieces``: one shared stream whose row ``j * W + r`` is rank r's j-th row). So the row is reproduced
by the loader itself, built from the run's ``config.json`` and world size (its folder's plan), one row per batch:
the state before that row says how far into its first document the row starts.

Rows of a step are numbered ``0 .. W * grad_accum * micro_batch - 1``, rank by rank, and within a rank in the order
the trainer reads them (micro-batch by micro-batch); steps count from 1, as ``log.jsonl`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel.workdir import owner, recorded_plan
from cuvee.trace.mixfolder import TraceError


@dataclass(frozen=True)
class TrainingRow:
    """Where token ``at`` of a step's row comes from: global document ``document`` of the run's shards (its shard
    prefix and local index), ``offset`` into it; ``info`` for the trace."""

    prefix: Path
    local: int
    offset: int
    info: dict


def is_training_folder(folder: Path) -> bool:
    mark = owner(folder)
    return (folder / "config.json").is_file() and mark is not None and mark.get("kind") == "train"


def training_config(folder: Path):
    from cuvee.kernel.config import validate
    from cuvee.train.config import TrainConfig

    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: unreadable ({e})") from None
    return validate(TrainConfig, raw, str(path))


def _find(doc: np.ndarray, piece: np.ndarray) -> int:
    """Where ``piece`` starts in ``doc`` (order ``pieces`` cuts documents; its loader keeps no piece offsets)."""
    n = len(piece)
    for start in np.flatnonzero(doc[: len(doc) - n + 1] == piece[0]).tolist():
        if np.array_equal(doc[start:start + n], piece):
            return int(start)
    raise TraceError("the row's tokens are not in the document the loader names; the shards changed since the run")


def training_row(folder: str | Path, step: int, row: int, at: int = 0) -> TrainingRow:
    """Token ``at`` of row ``row`` of step ``step`` (from 1) of training run ``folder``."""
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    folder = Path(folder)
    cfg = training_config(folder)
    plan = recorded_plan(folder) or {}
    world = int((plan.get("binding") or {}).get("world_size") or 1)
    per_rank = cfg.grad_accum * cfg.micro_batch
    if not 1 <= step <= cfg.steps:
        raise TraceError(f"step {step:,} is outside run {folder}: it trains steps 1..{cfg.steps:,}")
    if not 0 <= row < world * per_rank:
        raise TraceError(f"row {row:,} is outside a step of run {folder}: a step reads {world * per_rank:,} rows "
                         f"(world {world} x grad_accum {cfg.grad_accum} x micro_batch {cfg.micro_batch}), 0..{world * per_rank - 1:,}")
    if not 0 <= at < cfg.data.seq_len:
        raise TraceError(f"token {at:,} is outside a row of run {folder}: rows are {cfg.data.seq_len:,} tokens, 0..{cfg.data.seq_len - 1:,}")
    rank, k = divmod(row, per_rank)
    n = (step - 1) * per_rank + k  # the rank's n-th row
    shards = open_shards(cfg.data.paths)
    order = cfg.data.order
    shared = order != "global"
    loader = PackedLoader(shards, cfg.data.seq_len, 1, seed=cfg.data.seed, rank=0 if shared else rank,
                          world_size=1 if shared else world, add_eos=cfg.data.add_eos, order=order,
                          window=cfg.data.window)
    for _ in range(n * world + rank if shared else n):
        next(loader)
    state = loader.state_dict()
    batch = next(loader)
    doc_index = batch["doc_index"][0].numpy()
    seg = batch["doc_ids"][0].numpy()
    ids = batch["input_ids"][0].numpy()
    g = int(doc_index[at])
    start = int(np.flatnonzero(seg == seg[at])[0])  # the segment's first token in the row
    end = int(np.flatnonzero(seg == seg[at])[-1]) + 1
    toks = np.asarray(shards.document(g))
    if order == "pieces":
        offset = _find(toks, ids[start:end]) + (at - start)
    else:
        offset = (int(state["offset"]) if start == 0 else 0) + (at - start)
    offset = min(offset, len(toks) - 1)  # a loader-appended EOS (a document that lacked one) is its last token's
    if int(toks[offset]) != int(ids[at]):
        raise TraceError(f"run {folder}: the loader's row does not match document {g} at offset {offset}; the "
                         f"shards changed since the run (cuvee mix FOLDER --verify)")
    shard = int(np.searchsorted(shards.doc_offsets, g, side="right")) - 1
    info = {"folder": str(folder), "step": step, "row": row, "at": at, "rank": rank,
            "micro_batch": k // cfg.micro_batch, "row_in_micro_batch": k % cfg.micro_batch,
            "loader_epoch": int(state["epoch"]), "order": order, "world_size": world,
            "row_documents": sorted({int(x) for x in doc_index if x >= 0}), "global_document": g}
    return TrainingRow(Path(shards.datasets[shard].prefix), g - int(shards.doc_offsets[shard]), offset, info)
