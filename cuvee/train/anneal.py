"""``cuvee anneal``: judge a data source the Llama 3 way - anneal a trained checkpoint on a candidate mix
(e.g. 30 % candidate + 70 % default) and on a control mix, same start, same token budget, LR linearly
to 0; average the last k checkpoints of each; compare held-out loss and bits-per-byte per eval source.

Noise: every arm is run with several data-order seeds (the spread across seeds is training noise),
and a paired bootstrap over held-out documents gives a confidence interval for the difference
(evaluation noise). A difference counts only if it clears both.

The output folder (and each arm's run folder under ``runs/``) is a cuvee train folder: claimed, locked
while the ablation runs, and bound to its plan (start checkpoint, mixes, budget, seeds), so a rerun
resumes only the same ablation and never averages checkpoints of two different ones.
"""

from __future__ import annotations

import json
import math
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from cuvee.folders import FolderLock, bind, claim, clean_stale_tmp, empty_owned
from cuvee.train.checkpoint import average_state_dicts, checkpoint_identity, list_checkpoints, load_checkpoint
from cuvee.train.config import DataConfig, ModelConfig, OptimConfig, TrainConfig, _Strict
from cuvee.train.evaluate import evaluate, public
from cuvee.train.model import Llama
from cuvee.train.schedule import lr_at
from cuvee.train.shards import open_shards
from cuvee.train.trainer import train


class AnnealConfig(_Strict):
    name: str = "anneal"
    checkpoint: str  # a .pt checkpoint or a run dir (its latest checkpoint)
    candidate: list[str]  # mix YAML(s) or mixer output dir(s)
    control: list[str]
    tokens: int = Field(..., gt=0)  # anneal budget per run
    eval: dict[str, str]  # eval source name -> held-out shards
    seq_len: int | None = None  # default: the checkpoint's
    micro_batch: int | None = None
    grad_accum: int = 1
    lr: float | None = None  # default: the checkpoint run's LR at its last step (peak if that was ~0)
    seeds: list[int] = [0, 1]
    average_last: int = Field(3, ge=1)
    eval_docs: int = 200
    bootstrap: int = Field(2000, ge=100)
    out_dir: str = "runs/anneal/${name}"
    threads: int = 0

    def resolved_out_dir(self) -> Path:
        return Path(self.out_dir.replace("${name}", self.name))


def start_lr(state: dict) -> float:
    """The LR the checkpoint was trained at when it was saved (where an anneal branches off)."""
    cfg = TrainConfig(**state["config"])
    lr = lr_at(max(state["step"] - 1, 0), cfg.steps, cfg.optim)
    return lr if lr > 0.05 * cfg.optim.lr else cfg.optim.lr


def _arm_config(ac: AnnealConfig, state: dict, arm: str, paths: list[str], seed: int, lr: float) -> TrainConfig:
    base = TrainConfig(**state["config"])
    seq_len = ac.seq_len or base.data.seq_len
    micro = ac.micro_batch or base.micro_batch
    steps = max(1, math.ceil(ac.tokens / (seq_len * micro * ac.grad_accum)))
    every = max(1, steps // (2 * ac.average_last))  # the last k checkpoints span about the last half
    return TrainConfig(
        name=f"{arm}_seed{seed}", model=state["model_config"],
        data=DataConfig(paths=paths, seq_len=seq_len, seed=seed, add_eos=base.data.add_eos),
        optim=OptimConfig(**{**base.optim.model_dump(), "lr": lr, "warmup_steps": 0, "schedule": "linear", "min_lr_ratio": 0.0}),
        out_dir=str(ac.resolved_out_dir() / "runs" / f"{arm}_seed{seed}"), steps=steps, micro_batch=micro,
        grad_accum=ac.grad_accum, seed=seed, attention=base.attention, dtype=base.dtype, compile=base.compile,
        loss_chunk_tokens=base.loss_chunk_tokens,
        log_every=max(1, steps // 10), ckpt_every=every, keep_checkpoints=ac.average_last, threads=ac.threads,
    )


def _binding(ac: AnnealConfig) -> dict:
    """What the arm runs under ``runs/`` depend on. Left out: ``name``/``out_dir`` (they only name the
    folder), ``threads`` (execution only) and the evaluation settings (``eval``, ``eval_docs``,
    ``bootstrap``): the report is recomputed from the arms on every run, so they may change freely.
    The start checkpoint is bound by content, not by path."""
    b = ac.model_dump(mode="json")
    for key in ("name", "out_dir", "threads", "eval", "eval_docs", "bootstrap"):
        b.pop(key)
    b["checkpoint"] = checkpoint_identity(ac.checkpoint)
    return b


def _open_out_dir(out: Path, ac: AnnealConfig, fresh: bool, held: ExitStack) -> None:
    """Claim, lock (until the ablation ends) and bind the anneal folder; ``fresh`` empties it first."""
    what = "anneal output folder"
    claim(out, "train", what=what)
    lock = FolderLock(out, what).acquire()
    held.callback(lock.release)
    if fresh:  # emptied while we hold the lock; the marker and the lock file stay
        empty_owned(out, "train", what=what)
    bind(out, _binding(ac), what=what, fresh_hint="--no-resume")
    clean_stale_tmp(out)


def run_anneal(ac: AnnealConfig, quiet: bool = False, fresh: bool = False) -> dict:
    """Run (or resume) the ablation; ``fresh``: start over in a folder cuvee created (``--no-resume``)."""
    state = load_checkpoint(ac.checkpoint)  # refuses a checkpoint that is not plain data, before any folder is made
    with ExitStack() as held:
        _open_out_dir(ac.resolved_out_dir(), ac, fresh, held)
        return _run_anneal(ac, state, quiet)


def _run_anneal(ac: AnnealConfig, state: dict, quiet: bool) -> dict:
    say = (lambda *a: None) if quiet else (lambda m: print(m, flush=True))
    out = ac.resolved_out_dir()
    lr = ac.lr or start_lr(state)
    mcfg = ModelConfig(**state["model_config"])
    eval_sets = {name: open_shards(p) for name, p in ac.eval.items()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seq_len = ac.seq_len or TrainConfig(**state["config"]).data.seq_len

    results: dict[str, dict] = {"candidate": {}, "control": {}}
    doc_nats: dict[str, dict[str, list[np.ndarray]]] = {arm: {s: [] for s in eval_sets} for arm in results}
    for arm, paths in (("candidate", ac.candidate), ("control", ac.control)):
        for seed in ac.seeds:
            cfg = _arm_config(ac, state, arm, paths, seed, lr)
            say(f"[anneal] {arm} seed {seed}: {cfg.steps} steps x {cfg.micro_batch * cfg.data.seq_len * cfg.grad_accum} "
                f"tokens, lr {lr:.2e} -> 0, from step {state['step']}")
            run = train(cfg, init_from=ac.checkpoint, resume=True, quiet=quiet)
            last = list_checkpoints(cfg.resolved_out_dir())[-ac.average_last:]
            model = Llama(mcfg).to(device)
            model.load_state_dict(average_state_dicts([load_checkpoint(p)["model"] for p in last]))
            evals = {}
            for name, shards in eval_sets.items():
                r = evaluate(model, shards, seq_len, cfg.micro_batch, ac.eval_docs, "sdpa" if device.type == "cpu" else "flex", device)
                doc_nats[arm][name].append(r["doc_nats"])
                evals[name] = public(r) | {"doc_bytes": r["doc_bytes"], "doc_tokens": r["doc_tokens"]}
            results[arm][seed] = {"final_train_loss": run["losses"][max(run["losses"])] if run["losses"] else None,
                                  "averaged_checkpoints": [p.name for p in last], "eval": evals}

    report = {"name": ac.name, "config": ac.model_dump(), "start_step": state["step"], "start_lr": lr, "sources": {}}
    rng = np.random.default_rng(0)
    for name in eval_sets:
        denom_key = "doc_bytes" if results["candidate"][ac.seeds[0]]["eval"][name]["bpb"] is not None else "doc_tokens"
        unit = "bpb" if denom_key == "doc_bytes" else "loss"
        denom = results["candidate"][ac.seeds[0]]["eval"][name][denom_key].astype(np.float64)
        scale = 1 / math.log(2) if unit == "bpb" else 1.0
        per_seed = {arm: np.array([results[arm][s]["eval"][name][unit] for s in ac.seeds]) for arm in results}
        cand_docs = np.mean(doc_nats["candidate"][name], axis=0)  # seed-averaged nats per document
        ctrl_docs = np.mean(doc_nats["control"][name], axis=0)
        metric = lambda nats, idx: scale * nats[idx].sum() / denom[idx].sum()  # noqa: E731
        all_idx = np.arange(len(denom))
        delta = metric(ctrl_docs, all_idx) - metric(cand_docs, all_idx)  # > 0: candidate better
        boots = []
        for _ in range(ac.bootstrap):  # paired: the same resampled documents for both arms
            idx = rng.integers(0, len(denom), len(denom))
            boots.append(metric(ctrl_docs, idx) - metric(cand_docs, idx))
        lo, hi = np.percentile(boots, [2.5, 97.5])
        n = len(ac.seeds)
        seed_se = (math.sqrt(per_seed["candidate"].var(ddof=1) / n + per_seed["control"].var(ddof=1) / n)
                   if n > 1 else float("nan"))
        beyond = bool((lo > 0 or hi < 0) and (math.isnan(seed_se) or abs(delta) > 2 * seed_se))
        verdict = ("candidate better" if delta > 0 else "control better") if beyond else "no difference beyond noise"
        report["sources"][name] = {
            "metric": unit, "candidate": float(per_seed["candidate"].mean()), "control": float(per_seed["control"].mean()),
            "candidate_per_seed": per_seed["candidate"].tolist(), "control_per_seed": per_seed["control"].tolist(),
            "delta_control_minus_candidate": float(delta), "bootstrap_ci95": [float(lo), float(hi)],
            "seed_se": seed_se, "beyond_noise": beyond, "verdict": verdict,
            "documents": int(len(denom)),
        }
    report["runs"] = {arm: {str(s): {k: v for k, v in r.items() if k != "eval"} | {
        "eval": {n: {k: v for k, v in e.items() if not k.startswith("doc_")} for n, e in r["eval"].items()}}
        for s, r in runs.items()} for arm, runs in results.items()}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=float))
    (out / "report.md").write_text(render_markdown(report))
    say(render_markdown(report))
    return report


def render_markdown(report: dict) -> str:
    c = report["config"]
    lines = [
        f"# Anneal ablation: {report['name']}", "",
        f"From `{c['checkpoint']}` (step {report['start_step']}), LR {report['start_lr']:.2e} linearly to 0 over "
        f"{c['tokens']:,} tokens per run; seeds {c['seeds']}; last {c['average_last']} checkpoints averaged.",
        f"Candidate: `{', '.join(c['candidate'])}`. Control: `{', '.join(c['control'])}`.", "",
        "Δ = control − candidate (positive: the candidate is better). Noise: paired bootstrap over held-out "
        "documents (95 % CI) and the standard error across seeds; a verdict needs both.", "",
        "| eval source | metric | candidate | control | Δ | bootstrap 95 % CI | seed SE | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["sources"].items():
        lo, hi = s["bootstrap_ci95"]
        lines.append(f"| {name} | {s['metric']} | {s['candidate']:.4f} | {s['control']:.4f} | "
                     f"{s['delta_control_minus_candidate']:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {s['seed_se']:.4f} | "
                     f"{s['verdict']} |")
    return "\n".join(lines) + "\n"
