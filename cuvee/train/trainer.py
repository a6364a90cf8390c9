"""The training loop (nanoGPT-style, one readable function): packed document-masked batches, one
:class:`~cuvee.train.step.Step` per optimizer step (AdamW, warmup + cosine/WSD/linear LR, gradient accumulation
and clipping, bf16 autocast on GPU, optional torch.compile, FSDP2 under torchrun, the non-finite policy; the mix
search's proxies take the same step), checkpoints with loader state for exact resume, tokens/s + MFU logs.

The output folder belongs to one run: it is claimed (cuvee marker), locked for the whole run (a second
process is refused) and bound to what decides its content (config, data, init checkpoint), so a resume
never continues a different run's checkpoints and a resumed ``log.jsonl`` never repeats a step.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack
from pathlib import Path

import torch

from cuvee.kernel.atomic import write_text
from cuvee.kernel.workdir import FolderError, Workdir, open_workdir
from cuvee.train import checkpoint as ckpt
from cuvee.train import distributed as dist_utils
from cuvee.train.config import TrainConfig
from cuvee.train.evaluate import public
from cuvee.train.loader import PackedLoader
from cuvee.train.mfu import flops_per_token, mfu, peak_flops
from cuvee.train.model import Llama
from cuvee.train.shards import data_identity, open_shards, shard_inputs
from cuvee.train.step import Execution, Step, TrainingDiverged, weights_finite
from cuvee.train.strict_json import dumps as strict_dumps

log = logging.getLogger(__name__)
TRAIN_FOLDER = Workdir("train", "training output folder")


class JsonlLog:
    """``log.jsonl``, strict JSON: a non-finite value is written as null (a diverged run stops, see below)."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(strict_dumps(record) + "\n")


def train(cfg: TrainConfig, resume: bool = True, stop_after: int | None = None, init_from: str | Path | None = None,
          init_optimizer: bool = True, peak_lr: float | None = None, quiet: bool = False) -> dict:
    """Train per ``cfg``; returns a summary (losses per step, tokens, checkpoints, eval).

    ``resume``: continue from ``<out_dir>/checkpoints`` if there is a checkpoint (exactly, loader included).
    ``stop_after``: stop once this many total steps are done (simulates an interruption; tests).
    ``init_from``: start a *new* run from another run's checkpoint weights (and optimizer moments if
    ``init_optimizer``); step, schedule and data order start fresh - this is what ``cuvee anneal`` does.
    ``resume=False`` starts over: the output folder is emptied first (only if cuvee created it).
    Raises :class:`cuvee.kernel.workdir.FolderError` (folder in use, foreign, or bound to another plan) before any step.
    """
    info = dist_utils.setup()
    clean = False
    try:
        with ExitStack() as held:  # the folder lock, released when the run ends however it ends
            result = _train(cfg, info, held, resume, stop_after, init_from, init_optimizer, peak_lr, quiet)
            clean = True
            dist_utils.teardown(info, clean=True)  # every rank waits here: none exits mid-collective
        return result
    finally:
        if not clean:
            dist_utils.teardown(info, clean=False)


def _train(cfg: TrainConfig, info, held: ExitStack, resume: bool, stop_after: int | None, init_from,
           init_optimizer: bool, peak_lr: float | None, quiet: bool) -> dict:
    device = info.device
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out_dir = cfg.resolved_out_dir()
    say = (lambda *a: None) if quiet or not info.is_main else (lambda msg: print(msg, flush=True))

    # ---- data and model --------------------------------------------------------------------
    shards = open_shards(cfg.data.paths)
    mcfg = cfg.resolved_model(shards.vocab_size)
    if shards.vocab_size and mcfg.vocab_size < shards.vocab_size:
        raise ValueError(f"model vocab_size {mcfg.vocab_size} < tokenizer vocab_size {shards.vocab_size}")
    if cfg.data.seq_len > mcfg.max_seq_len:
        raise ValueError(f"seq_len {cfg.data.seq_len} exceeds model max_seq_len {mcfg.max_seq_len}")
    eval_sets = {name: open_shards(path) for name, path in cfg.eval_paths.items()}  # a missing one fails now
    if cfg.data.order == "pieces":  # needs every document's source: one line now, before the folder is claimed
        from cuvee.train.piece_blend import arm_sources

        arm_sources(shards)
    execution = Execution.of(cfg, device)  # e.g. attention: flex on a CPU is refused here, before the folder is claimed
    _open_out_dir(out_dir, _binding(cfg, mcfg, shards, info, init_from, init_optimizer, peak_lr), shard_inputs(shards),
                  resume, info, held)
    loader = PackedLoader(shards, cfg.data.seq_len, cfg.micro_batch, seed=cfg.data.seed, rank=info.rank,
                          world_size=info.world_size, add_eos=cfg.data.add_eos,
                          order=cfg.data.order, window=cfg.data.window)  # "mix": the blend holds at every step
    model = Llama(mcfg).to(device)
    train_step = Step(cfg, model, execution, info, peak_lr=peak_lr, last_good=lambda: _last_good(out_dir))
    optimizer = train_step.optimizer

    # ---- resume / init ---------------------------------------------------------------------
    step, tokens_seen, losses = 0, 0, {}
    latest = ckpt.latest_checkpoint(out_dir) if resume else None
    if latest is not None:
        state = ckpt.load_checkpoint(latest)
        _load_model_and_optim(model, optimizer, state, info, load_optim=True)
        loader.load_state_dict(state["loader"][info.rank])
        step, tokens_seen = state["step"], state["tokens_seen"]
        torch.set_rng_state(state["rng"])
        say(f"resumed from {latest} at step {step}")
    if info.is_main:
        _truncate_log(out_dir / "log.jsonl", step)
    if latest is None and init_from is not None:
        state = ckpt.load_checkpoint(init_from)
        _load_model_and_optim(model, optimizer, state, info, load_optim=init_optimizer)
        say(f"initialised from {init_from} (step {state['step']})")

    n_params = model.num_params()
    flops_tok = flops_per_token(model.num_params(exclude_embeddings=True), mcfg.n_layers, mcfg.dim, cfg.data.seq_len)
    peak = peak_flops(torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    tokens_per_step = cfg.micro_batch * cfg.data.seq_len * cfg.grad_accum * info.world_size
    say(f"model {n_params / 1e6:.2f}M params, attention={execution.backend}, device={device}, world={info.world_size}, "
        f"{tokens_per_step} tokens/step, {flops_tok / 1e6:.1f} MFLOPs/token")
    jlog = JsonlLog(out_dir / "log.jsonl", info.is_main)
    if info.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))
    last_ckpt = None

    # ---- the loop --------------------------------------------------------------------------
    model.train()
    t_last, tokens_last = time.perf_counter(), tokens_seen
    while step < cfg.steps and (stop_after is None or step < stop_after):
        done = train_step([next(loader) for _ in range(cfg.grad_accum)], step)  # on_nonfinite: stop raises here
        step += 1
        tokens_seen += tokens_per_step
        if not done.finite:  # on_nonfinite: skip - the step's data is consumed, its update dropped
            jlog.write({"event": "skip", "step": step, "loss": done.loss, "grad_norm": done.grad_norm, "lr": done.lr,
                        "reason": "non-finite loss or gradient norm; update skipped", "time": time.time()})
            say(f"step {step:6d} | skipped: loss {done.loss}, gradient norm {done.grad_norm} (not finite)")
        else:
            losses[step] = done.loss

        if done.finite and (step % cfg.log_every == 0 or step == cfg.steps or step == 1):
            if device.type == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            tok_s = (tokens_seen - tokens_last) / max(now - t_last, 1e-9)
            util = mfu(tok_s / info.world_size, flops_tok, peak)
            rec = {"event": "train", "step": step, "loss": done.loss, "lr": done.lr, "grad_norm": done.grad_norm,
                   "tokens": tokens_seen, "tokens_per_s": tok_s, "mfu": util, "time": time.time()}
            jlog.write(rec)
            say(f"step {step:6d} | loss {done.loss:.4f} | lr {done.lr:.2e} | gnorm {done.grad_norm:.3f} | "
                f"{tok_s:,.0f} tok/s" + (f" | MFU {100 * util:.1f}%" if util is not None else ""))
            t_last, tokens_last = now, tokens_seen

        if (cfg.ckpt_every and step % cfg.ckpt_every == 0 and step >= cfg.ckpt_after) or step == cfg.steps or step == stop_after:
            last_ckpt = _save(out_dir, step, tokens_seen, model, optimizer, loader, cfg, mcfg, shards, info) or last_ckpt

    # ---- final evaluation ------------------------------------------------------------------
    eval_results = {}
    if step >= cfg.steps and cfg.eval_paths and info.world_size == 1:
        for name, eval_shards in eval_sets.items():
            res = public(execution.evaluate(model, eval_shards, cfg.data.seq_len, cfg.micro_batch, cfg.eval_docs))
            eval_results[name] = res
            jlog.write({"event": "eval", "step": step, "source": name, **res})
            say(f"eval {name}: loss {res['loss']:.4f}" + (f", bpb {res['bpb']:.4f}" if res["bpb"] else ""))
    if train_step.skipped:
        say(f"warning: {train_step.skipped} step(s) of this session had a non-finite loss or gradient norm and were skipped "
            f"(on_nonfinite: skip); see the \"skip\" events in {out_dir / 'log.jsonl'}")
    return {"out_dir": str(out_dir), "step": step, "tokens": tokens_seen, "losses": losses, "eval": eval_results,
            "skipped_steps": train_step.skipped,
            "checkpoint": str(last_ckpt) if last_ckpt else None, "params": n_params, "model": mcfg.model_dump()}


def _binding(cfg: TrainConfig, mcfg, shards, info, init_from, init_optimizer: bool, peak_lr: float | None) -> dict:
    """What decides the output folder's content; a resume must match it exactly (cuvee.kernel.workdir.bind).

    Left out on purpose, because they change no weight, loss or data order, only how the run is observed
    or executed: ``name``/``out_dir`` (they only name the folder), ``log_every`` (how often a line is
    logged), ``ckpt_every``/``ckpt_after``/``keep_checkpoints`` (where snapshots are taken and how many are kept; resume
    is exact from any step), ``threads`` (CPU threads: execution only, like resuming on another machine)
    and ``data.paths`` (where the shards live: the data is bound by content instead, so a moved mix still
    resumes and a different one at the same path does not). ``world_size`` stays: it changes the batch
    and each rank's data order. ``vocab_multiple`` is bound through its effect, the resolved model's
    vocab_size, so a run started before the padding resumes with ``--set vocab_multiple=1``.
    """
    c = cfg.model_dump(mode="json")
    for key in ("name", "out_dir", "log_every", "ckpt_every", "ckpt_after", "keep_checkpoints", "threads", "vocab_multiple",
                "on_nonfinite"):
        c.pop(key)
    c["data"].pop("paths")
    c["model"] = mcfg.model_dump(mode="json")  # resolved: a preset is bound by its values, not its name
    init = ({"checkpoint": ckpt.checkpoint_identity(init_from), "optimizer": init_optimizer}
            if init_from is not None else None)
    return {"config": c, "data": data_identity(shards), "world_size": info.world_size, "init": init,
            "peak_lr": peak_lr}


def _open_out_dir(out_dir: Path, binding: dict, inputs: dict, resume: bool, info, held: ExitStack) -> None:
    """Rank 0 opens the folder through the kernel (held for the whole run); every rank learns the outcome."""
    failure = error = None
    if info.is_main:
        try:
            # the sweep removes e.g. a torch.save killed half-way through a checkpoint
            open_workdir(out_dir, TRAIN_FOLDER, binding, held, fresh=not resume, inputs=inputs)
        except Exception as e:
            if info.world_size == 1:
                raise
            failure, error = (isinstance(e, FolderError), str(e)), e
    failure = dist_utils.broadcast_from_main(failure, info)  # also keeps the other ranks out until the folder is ready
    if failure is not None:
        if info.is_main:
            raise error
        raise (FolderError if failure[0] else RuntimeError)(failure[1])


def _truncate_log(path: Path, step: int) -> None:
    """Keep only the log lines the checkpoint at ``step`` covers, so the resumed run never repeats a step.

    Train lines after ``step`` were logged past the checkpoint and will be logged again; eval lines at
    ``step`` or later were written after the final checkpoint and will be written again; a line a killed
    process left half-written is dropped. Rewritten atomically.
    """
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    keep = []
    for line in lines:
        try:
            rec = json.loads(line)
            at = int(rec.get("step", 0))
        except (ValueError, TypeError, AttributeError):
            continue
        if at < step or (at == step and rec.get("event") in ("train", "skip")):
            keep.append(line)
    if keep != lines or (lines and not path.read_text().endswith("\n")):
        write_text(path, "".join(line + "\n" for line in keep))


def _load_model_and_optim(model, optimizer, state: dict, info, load_optim: bool) -> None:
    if info.world_size == 1:
        model.load_state_dict(state["model"])
        if load_optim and state.get("optim"):
            optimizer.load_state_dict(state["optim"])
        return
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, state["model"], options=opts)
    if load_optim and state.get("optim"):
        set_optimizer_state_dict(model, optimizer, state["optim"], options=opts)


def _last_good(out_dir: Path) -> str:
    last = ckpt.latest_checkpoint(out_dir)
    return f"the last checkpoint, {last}, holds finite weights" if last else "no checkpoint was written"


def _save(out_dir, step, tokens_seen, model, optimizer, loader, cfg, mcfg, shards, info):
    if not weights_finite(model, info):  # a checkpoint is never written from NaN/inf weights
        raise TrainingDiverged(f"training diverged by step {step}: the weights are not finite, so no checkpoint is "
                               f"written for this step; {_last_good(out_dir)}. Lower optim.lr or check the optim "
                               f"and model values")
    loader_states = dist_utils.all_gather_objects(loader.state_dict(), info)
    model_sd = dist_utils.full_state_dict(model, info)
    if info.world_size == 1:
        optim_sd = optimizer.state_dict()
    else:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        optim_sd = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not info.is_main:
        return None
    payload = {"step": step, "tokens_seen": tokens_seen, "model": model_sd, "optim": optim_sd, "loader": loader_states,
               "rng": torch.get_rng_state(), "config": cfg.model_dump(mode="json"), "model_config": mcfg.model_dump(),
               "tokenizer": shards.tokenizer}
    return ckpt.save_checkpoint(out_dir, step, payload, cfg.keep_checkpoints)
