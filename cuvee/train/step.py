"""One training step and one evaluation call for ``cuvee train`` (and so anneal arms) and mix-search proxies:
a second copy of the step loses what the first guarantees (the proxies' had no autocast, compile or non-finite
policy, and scored with a fixed attention backend). Top to bottom: :class:`Execution` (backend and autocast, for
training and evaluation alike), the optimizer, :class:`Step` (LR, micro-batches, clipping, ``on_nonfinite``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from cuvee.kernel.config import ConfigError
from cuvee.kernel.errors import UserError
from cuvee.train import distributed as dist_utils
from cuvee.train.attention import build_doc_mask, resolve_backend
from cuvee.train.config import TrainConfig
from cuvee.train.evaluate import evaluate
from cuvee.train.loader import IGNORE_INDEX
from cuvee.train.schedule import lr_at

MAX_SKIPS_IN_A_ROW = 10  # on_nonfinite: skip stops after this many non-finite steps in a row: that is divergence


class TrainingDiverged(UserError, RuntimeError):
    """The loss, the gradients or the weights stopped being finite; the message names the step and the value."""


@dataclass(frozen=True)
class Execution:
    """How a train config runs on a device: its attention backend and bf16 autocast (``dtype: auto``: on CUDA
    only). Training and evaluation use the same, so a model is scored the way it was trained."""

    device: torch.device
    backend: str
    bf16: bool

    @classmethod
    def of(cls, cfg: TrainConfig, device: torch.device) -> Execution:
        backend = resolve_backend(cfg.attention, device)
        if backend == "flex" and device.type != "cuda":
            raise ConfigError("attention: flex needs a CUDA device to train (FlexAttention has no backward pass on "
                              "CPU); set attention: auto or sdpa")
        return cls(device, backend, cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda"))

    def evaluate(self, model, shards, seq_len: int, batch_size: int, max_docs: int | None) -> dict:
        """The one evaluation call: held-out loss and bpb per document (:func:`cuvee.train.evaluate.evaluate`)."""
        return evaluate(model, shards, seq_len, batch_size, max_docs, self.backend, self.device,
                        torch.bfloat16 if self.bf16 else None)


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (norm gains are not decayed)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    o = cfg.optim
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=fused or None,
    )


def weights_finite(model, info: dist_utils.DistInfo) -> bool:
    """Whether every parameter (every rank's shard) is finite; the same answer on every rank."""
    bad = torch.zeros((), device=info.device)
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p  # FSDP2 DTensor: this rank's shard
        bad += (~torch.isfinite(local.detach())).sum()
    return dist_utils.all_reduce_sum(bad, info).item() == 0


@dataclass(frozen=True)
class StepResult:
    lr: float
    loss: float  # the mean over every token the step predicts (all micro-batches, all ranks)
    grad_norm: float  # before clipping
    finite: bool  # False: the update was dropped (on_nonfinite: skip)


class Step:
    """One optimizer step of ``cfg`` on ``model``, called with the step's micro-batches; sets the model up as
    configured (FSDP2 under torchrun, per-block compile) and owns the optimizer. ``total_steps``: the schedule's
    length (a proxy's comes from its tokens); ``peak_lr``: replaces ``optim.lr`` (anneals); ``last_good``: what a
    divergence error says about where finite weights are left."""

    def __init__(self, cfg: TrainConfig, model: torch.nn.Module, execution: Execution,
                 info: dist_utils.DistInfo | None = None, total_steps: int | None = None, peak_lr: float | None = None,
                 last_good: Callable[[], str] = lambda: "no checkpoint was written"):
        self.cfg, self.model, self.execution = cfg, model, execution
        self.info = info or dist_utils.DistInfo(device=execution.device)
        self.total_steps = cfg.steps if total_steps is None else total_steps
        self.peak_lr, self.last_good = peak_lr, last_good
        if self.info.world_size > 1:
            dist_utils.shard_model(model, bf16_params=execution.bf16)
        if cfg.compile:
            for layer in model.layers:  # per-block compile (as torchtitan): small graphs, masks built outside
                layer.compile()
        self.optimizer = build_optimizer(model, cfg)
        self.autocast = (torch.autocast(execution.device.type, dtype=torch.bfloat16)  # under FSDP: bf16 parameters
                         if execution.bf16 and self.info.world_size == 1 else nullcontext())
        self.skipped = self.skipped_in_a_row = 0  # steps whose update was dropped (on_nonfinite: skip)

    def __call__(self, micro: list[dict], step: int) -> StepResult:
        """Step ``step`` (0-based): forward and backward every micro-batch, clip, then update or handle a NaN/inf."""
        cfg, info, device, backend = self.cfg, self.info, self.execution.device, self.execution.backend
        lr = lr_at(step, self.total_steps, cfg.optim, self.peak_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # normalise by the number of predicted tokens in the whole (global) step, not per micro-batch:
        n_valid = torch.tensor(float(sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in micro)), device=device)
        dist_utils.all_reduce_sum(n_valid, info)
        loss_sum = torch.zeros((), device=device)
        for batch in micro:
            batch = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}
            mask = build_doc_mask(batch["doc_ids"], backend)
            with self.autocast:
                loss = self.model(batch["input_ids"], batch["position_ids"], batch["doc_ids"], batch["labels"],
                                  backend=backend, mask=mask, reduction="sum", loss_chunk_tokens=cfg.loss_chunk_tokens)
            # FSDP averages gradients over ranks; scale by world so the result is the global token mean
            (loss * info.world_size / n_valid).backward()
            loss_sum += loss.detach()
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else math.inf  # inf: measured, never clipped
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        step_loss = (dist_utils.all_reduce_sum(loss_sum, info) / n_valid).item()
        finite = math.isfinite(step_loss) and math.isfinite(grad_norm)  # the same on every rank (reduced)
        if finite:
            self.skipped_in_a_row = 0
            self.optimizer.step()
        else:
            self.skipped_in_a_row += 1
            self._stop_unless_skipping(step + 1, step_loss, grad_norm, lr)
            self.skipped += 1
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(lr, step_loss, grad_norm, finite)

    def _stop_unless_skipping(self, step: int, loss: float, gnorm: float, lr: float) -> None:
        """A step with a NaN/inf loss or gradient norm: stop (default) or, with ``on_nonfinite: skip``, let its
        update be dropped - unless the weights themselves are already non-finite, which no skip repairs, or more
        than ``MAX_SKIPS_IN_A_ROW`` steps in a row were non-finite."""
        skip = self.cfg.on_nonfinite == "skip"
        if not skip:
            why = "stopped before updating the weights"
        elif not weights_finite(self.model, self.info):
            why = "the weights themselves are no longer finite (an earlier update diverged)"
        elif self.skipped_in_a_row > MAX_SKIPS_IN_A_ROW:
            why = (f"the last {self.skipped_in_a_row} steps were all non-finite (on_nonfinite: skip stops after "
                   f"{MAX_SKIPS_IN_A_ROW})")
        else:
            return
        raise TrainingDiverged(
            f"training diverged at step {step}: loss {loss}, gradient norm {gnorm} (not finite); {why}; "
            f"{self.last_good()}. Lower optim.lr (the schedule gave {lr:.3g} at this step) or check the optim and "
            f"model values" + ("" if skip else "; on_nonfinite: skip drops such steps instead of stopping"))
