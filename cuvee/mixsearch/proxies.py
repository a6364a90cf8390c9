"""One proxy run: a small model trained on one mixture, read straight from the per-source token caches.

No data is copied or re-tokenized per proxy: :class:`~cuvee.train.piece_blend.BlendView` (shared with the
anneal's ``order: pieces``) is a :class:`~cuvee.train.shards.ShardSet` whose document order is the mixer's blend
(``cuvee.mixer.blend.greedy_blend`` over per-source ``epoch_stream`` shuffles, exactly as ``cuvee mix`` writes
shards) computed over the memory-mapped caches.

Below the document level: a proxy reads tens of thousands of tokens while one web page can hold ten
thousand, so a whole-document blend would miss the weights by up to a document per source. The view
blends *pieces* of at most ``piece_tokens`` tokens (the training sequence length): every prefix of the
stream then holds each source's weight to within one piece, and the loader (``order: mix``) reads the
stream in order, so every step sees the mixture's shares. Each piece is masked as a document of its own
(attention never crosses pieces or documents). The shares measured over the steps actually trained are
recorded with every proxy.

Training and scoring are the trainer's own :class:`~cuvee.train.step.Step` and evaluation call, so a proxy runs as
``cuvee train`` would with its config: autocast, compile, attention backend, ``on_nonfinite`` (skipped steps are
counted in the record), accumulation, clipping and the LR schedule over the proxy's own number of steps.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch

from cuvee.mixer.indexed import IndexedDataset
from cuvee.train.config import TrainConfig
from cuvee.train.loader import PackedLoader
from cuvee.train.model import Llama
from cuvee.train.piece_blend import BlendView
from cuvee.train.step import Execution, Step


def steps_for(train: TrainConfig, tokens: int) -> int:
    return max(1, math.ceil(tokens / (train.data.seq_len * train.micro_batch * train.grad_accum)))


def _metric(result: dict, keep: np.ndarray, doc_bytes: np.ndarray | None) -> dict:
    nats = result["doc_nats"][keep]
    out = {"documents": int(keep.size), "loss": float(nats.sum() / max(1, result["doc_tokens"][keep].sum())),
           "doc_nats": nats.tolist(), "doc_tokens": result["doc_tokens"][keep].tolist()}
    if doc_bytes is not None:
        out["bpb"] = float(nats.sum() / math.log(2) / doc_bytes.sum())
    out["metric"] = "bpb" if doc_bytes is not None else "loss"
    out["value"] = out[out["metric"]]
    return out


def train_proxy(train: TrainConfig, caches: list[IndexedDataset], names: list[str], weights, tokens: int,
                seed: int, tokenizer: dict, targets: dict, threads: int = 0) -> dict:
    """Train a fresh model on the blend for ``tokens`` tokens; evaluate every target.

    ``targets``: name -> (ShardSet, kept indices, per-document bytes or None). ``seed`` sets the model's
    initialisation and the blend's per-source shuffles (so two arms with one seed start alike and differ only
    in their weights). Returns a JSON-able record (per-document nats included, for paired verdicts)."""
    t0, c0 = time.perf_counter(), os.times()
    if threads:
        torch.set_num_threads(threads)
    steps = steps_for(train, tokens)
    seq, mb, ga = train.data.seq_len, train.micro_batch, train.grad_accum
    need = steps * seq * mb * ga + 2 * seq  # the loader peeks one token past the last row
    view = BlendView(caches, names, weights, need, seed, seq, tokenizer)
    torch.manual_seed(seed)
    mcfg = train.resolved_model(tokenizer["vocab_size"])
    # the device the worker was given (CUDA_VISIBLE_DEVICES from --devices / --gpus-per-task), else the CPU
    execution = Execution.of(train, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    model = Llama(mcfg).to(execution.device)
    step = Step(train, model, execution, total_steps=steps,
                last_good=lambda: "a proxy keeps no checkpoint (the values are the search file's proxy.train)")
    loader = PackedLoader(view, seq, mb, seed=seed, add_eos=False, order="mix")
    src_of = view.source_ids()
    seen = np.zeros(len(names), dtype=np.int64)
    final_loss = None  # of the last step not skipped
    model.train()
    for i in range(steps):
        micro = [next(loader) for _ in range(ga)]
        for batch in micro:  # the shares this proxy actually trained on
            idx = batch["doc_index"].numpy().reshape(-1)
            seen += np.bincount(src_of[idx[idx >= 0]], minlength=len(names))
        done = step(micro, i)  # on_nonfinite: stop raises TrainingDiverged; skip drops the update, counted
        final_loss = done.loss if done.finite else final_loss
    evals = {name: _metric(execution.evaluate(model, shards, seq, mb, int(keep.max()) + 1), keep, doc_bytes)
             for name, (shards, keep, doc_bytes) in targets.items()}
    c1 = os.times()
    return {
        "weights": [float(w) for w in weights], "seed": seed, "steps": steps,
        "tokens": int(steps * seq * mb * ga), "params": int(model.num_params()),
        "shares_trained": {n: float(c / max(1, seen.sum())) for n, c in zip(names, seen)},
        "final_train_loss": final_loss, "skipped_steps": step.skipped, "targets": evals,
        "wall_s": round(time.perf_counter() - t0, 3),
        "cpu_s": round((c1.user + c1.system) - (c0.user + c0.system), 3),
    }
