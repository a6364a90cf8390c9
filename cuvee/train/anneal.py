"""``cuvee anneal``: judge a data source the Llama 3 way - anneal a trained checkpoint on a candidate mix
(e.g. 30 % candidate + 70 % default) and on a control mix, same start, same token budget, LR linearly
to 0; average the last k checkpoints of each; compare held-out loss and bits-per-byte per eval source.

Pairing: for every seed in ``seeds`` (default 3) the candidate and the control run start from the same
checkpoint (same weights, same optimizer moments) with the same data-order seed and the same loader order
(``order``, default ``pieces``: each arm's documents cut into ``seq_len`` pieces, every mix source's pieces
shuffled by the seed and re-blended at the mix's weights (:mod:`cuvee.train.piece_blend`), so every step reads
the configured shares to within one piece while every seed reads another order; each piece is masked as a
document of its own. It needs each document's source: a mixer output, or one source per folder; otherwise it
is refused before any work, in one line. ``window``, the earlier default, shuffles the mixer's blended order
within windows of documents: with few large documents the share a seed reads then wanders, e.g. 10 % to 53 %
of a nominal 30 %, issue #26); both arms are evaluated on the same documents. The
verdict is paired by seed (:mod:`cuvee.train.verdict`). The two arms are separate mixer outputs, so their
shared 70 % part is *not* read document-for-document in the same order - the same seed (and the mixer's own
seed, equal in both mix YAMLs) is the closest pairing available; what remains shows up as seed noise, which the
verdict measures rather than assumes. ``order: mix`` is refused with several seeds: every seed would then read
the same order and the seed noise would be invisible.

Before any training each eval set is deduplicated (exact token-id duplicates within the set) and, when
:mod:`cuvee.train.decontam` is available, decontaminated against both arms' training sources (exact,
near-duplicate, and containment: most of its n-grams inside the arm's documents); removed documents are counted
in the report per arm that holds them and never scored, and a set that loses more than
``max_eval_loss_share`` of its pool is warned about (report and stderr).

Verdict per eval source (:func:`cuvee.train.verdict.compare`, assembled in :mod:`cuvee.train.anneal_report`):
paired t over seeds widened by the eval-document noise; interval at the look's level, p, MDE at 80 % power, one
of "candidate better" / "control better" / "no difference (equivalent within ±margin)" (only with a stated
margin - ``equivalence_margin`` x the control's metric, or ``equivalence_margin_abs`` in the metric's unit - and
only when the interval lies inside it; no default margin) / "inconclusive" (with how many seeds or eval
documents would resolve it at the next look's level).

Looks (:mod:`cuvee.train.sequential`): each verdict on a new seed set (or changed evaluation settings) is a new
look, recorded in ``looks.json``; look k of ``looks`` (K, default 1) is tested at alpha_k from the declared
``spending`` (``obrien_fleming`` or ``pocock``), so the family-wise false "better/worse" rate over all looks is
<= ``alpha`` (union bound). A rerun on the same seeds is the same look; a new seed set beyond K, or a changed
looks / spending / alpha / margin after a look, is refused before any training.

Report (``run_anneal`` returns it; also ``report.json`` and ``report.md`` in the output folder) - keys:

* ``name``, ``config`` (the AnnealConfig), ``start_step``, ``start_lr``, ``pairing`` (text), ``seeds``;
* ``look``: ``look`` k, ``looks`` K, ``spending``, ``alpha``, ``alpha_tested``, ``familywise_bound``,
  ``next_alpha``, ``text``;
* ``sources``: eval source -> ``metric`` ("bpb" or "loss"), ``candidate`` / ``control`` (mean over seeds of the
  averaged model's metric), ``candidate_per_seed`` / ``control_per_seed``, ``effect`` (control - candidate,
  > 0: candidate better; also as ``delta_control_minus_candidate``), ``ci`` [lo, hi] at ``ci_level`` (the
  look's 1 - alpha_k; the verdict's interval), ``ci95`` [lo, hi], ``alpha`` (tested), ``p_value``, ``mde``
  (80 % power), ``se``, ``df``, ``seed_se``, ``document_se``, ``dominant_noise``, ``margin`` (absolute),
  ``per_seed_effect``, ``seeds_candidate_better``, ``verdict``, ``reason``, ``seeds_needed``, ``docs_needed``,
  ``documents`` (scored), ``beyond_noise`` (verdict is better/worse);
* ``decontamination``: eval source -> ``pool`` (first ``eval_docs`` documents), ``duplicates`` (exact repeats
  within the set, removed), ``overlap`` (removed as overlapping training data, or None when no check ran),
  ``removed_by_arm`` (candidate / control: how many removed documents each arm's training data holds; a
  document in both counts in both), ``scored``, ``warning`` (a sentence when the set lost more than
  ``max_eval_loss_share`` of its pool, also on stderr; else None), ``method``, ``details`` (decontam report:
  each removed document's ``sources`` and ``arms``); with ``decontam_meaning``, ``overlap_by_meaning`` and
  ``by_meaning`` (threshold, model, and per removed document its training source, document and cosine);
  ``warnings``: every such sentence;
* ``shares``: arm -> {``method`` ("loader: realised over the ... steps trained", or why not and the
  manifest's shares instead), ``shares`` {mix source: token share over all seeds}, ``tokens``, ``seed_range``
  {source: [lowest, highest] per-seed share}, ``per_seed``: seed -> {``method``, ``shares``, ``nominal`` (the
  configured weights), ``tokens``, ``steps``, ``step_range`` {source: [lowest, highest] share within one step},
  ``prefix_gap`` {source: largest gap to its weight after any step, in tokens}}} (:mod:`cuvee.train.arm_shares`);
  report.md gives them per seed next to each seed's effect per eval source;
* ``averaging``: arm -> seed -> {``steps`` averaged, ``total_steps``, ``span`` (fraction of the anneal),
  ``text``}; ``averaging_text``: one sentence;
* ``runs``: arm -> seed -> {``final_train_loss``, ``averaged_checkpoints``, ``eval`` (per source summary)}.

The output folder (and each arm's run folder under ``runs/``) is a cuvee train folder: claimed, locked
while the ablation runs, and bound to its plan (start checkpoint, mixes, budget), so a rerun resumes only the
same ablation and never averages checkpoints of two different ones. The seed list is not part of the plan:
every seed's run folder is bound on its own, so adding seeds to an inconclusive ablation resumes it - and is
the next look of the sequential plan above (``looks.json``), never a second test at the same alpha.
"""

from __future__ import annotations

import math
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import xxhash
from pydantic import Field, field_validator, model_validator

from cuvee.kernel.workdir import Workdir, open_workdir
from cuvee.train.anneal_report import (
    begin_look,
    final_train_loss,
    look_key,
    plan,
    render_markdown,
    source_verdicts,
)
from cuvee.train.arm_shares import measured_shares, summarise
from cuvee.train.checkpoint import (
    average_state_dicts,
    checkpoint_identity,
    list_checkpoints,
    load_checkpoint,
)
from cuvee.train.config import (
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    _Strict,
)
from cuvee.train.evaluate import public
from cuvee.train.model import Llama
from cuvee.train.piece_blend import arm_sources
from cuvee.train.schedule import lr_at
from cuvee.train.sequential import Look, Spending, record_look
from cuvee.train.shards import open_shards
from cuvee.train.step import Execution
from cuvee.train.strict_json import dumps as strict_dumps
from cuvee.train.trainer import train


class AnnealConfig(_Strict):
    name: str = "anneal"
    checkpoint: str  # a .pt checkpoint or a run dir (its latest checkpoint)
    candidate: list[str]  # mix YAML(s) or mixer output dir(s)
    control: list[str]
    tokens: int = Field(..., gt=0)  # anneal budget per run
    eval: dict[str, str]  # eval source name -> held-out shards (disjoint from both arms' sources)
    seq_len: int | None = Field(None, gt=1, le=1 << 20)  # default: the checkpoint's
    micro_batch: int | None = Field(None, gt=0, le=1 << 16)
    grad_accum: int = Field(1, gt=0, le=1 << 16)
    lr: float | None = Field(None, gt=0)  # default: the checkpoint run's LR at its last step (peak if that was ~0)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])  # paired: each seed runs both arms; >= 3 for a usable seed-noise estimate
    # loader document order of both arms (see module doc); "pieces": every step at the mix's weights
    order: Literal["global", "mix", "window", "pieces"] = "pieces"
    window: int = Field(1024, gt=0)
    average_last: int = Field(3, ge=1)
    eval_docs: int = Field(200, gt=0)  # eval pool: the first eval_docs documents of each eval set, before dedup/decontam
    # "no difference" needs a stated margin (no default: see cuvee/train/anneal_report.py): relative to the
    # control's metric, or absolute in the metric's unit (bpb, or loss); neither: never "no difference"
    equivalence_margin: float | None = Field(None, ge=0)
    equivalence_margin_abs: float | None = Field(None, gt=0)
    alpha: float = Field(0.05, gt=0, lt=1)  # family-wise over all looks
    looks: int = Field(1, ge=1, le=100)  # planned looks (seed sets judged); see cuvee/train/sequential.py
    spending: Spending = "obrien_fleming"  # Lan-DeMets alpha spending over the looks
    decontaminate: bool = True  # run cuvee.train.decontam (when present) before training
    decontam_threshold: float = Field(0.8, gt=0, le=1)
    # containment (cuvee.train.decontam): an eval document is removed when an arm's training data holds this
    # share of its distinct n-grams (embedded, split into pieces, half copied); None: whole-document checks only
    containment: float | None = Field(0.3, gt=0, le=1)
    containment_ngram: int | None = Field(None, ge=2, le=4096)  # None: 13 tokens, 50 for byte-level tokenizers
    # by meaning (cuvee.train.decontam_meaning): an eval document is also removed when a training document's
    # embedding is within this cosine of its own (the decontaminate stage's by_meaning test); None: not checked
    decontam_meaning: float | None = Field(None, gt=0, le=1)
    decontam_meaning_model: str = "all-MiniLM-L6-v2"
    max_eval_loss_share: float = Field(0.1, ge=0, le=1)  # warn when an eval set loses more than this share
    bootstrap: int = Field(2000, ge=100)  # unused since the analytic paired verdict; kept so old configs load
    # lm-evaluation-harness tasks (shipped names or task YAML paths) run offline on each averaged model,
    # exported to Hugging Face format; reported per arm and seed next to bits per byte
    downstream: list[str] = Field(default_factory=list)
    downstream_limit: int | None = Field(None, gt=0)
    allow_task_code: bool = False  # downstream task YAMLs may run their Python (lm-eval !function); see eval-downstream
    out_dir: str = "runs/anneal/${name}"
    threads: int = Field(0, ge=0, le=4096)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        return v

    @model_validator(mode="after")
    def _margin(self):
        if self.equivalence_margin is not None and self.equivalence_margin_abs is not None:
            raise ValueError("equivalence_margin (relative) and equivalence_margin_abs (absolute): state one of them")
        return self

    @model_validator(mode="after")
    def _order(self):
        if self.order == "mix" and len(self.seeds) > 1:
            raise ValueError("order: mix reads the same document order for every seed, so the seeds would not "
                             "measure training noise; use order: pieces (the mix's weights at every step)")
        return self

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
    # checkpoints every steps // 2k and at the final step; the last k are averaged (e.g. 100 steps, k = 3: steps
    # 80, 96, 100 = the last 20 % of the anneal); _averaging() reports exactly which
    every = max(1, steps // (2 * ac.average_last))
    # only the averaged checkpoints are written: saving earlier ones (model + AdamW state, 1.8 GB at 125M)
    # took more than half of each anneal arm's training time on an H200. An arm stopped before the first of
    # them restarts from the branch checkpoint, which gives the same run.
    averaged = sorted(set(range(every, steps + 1, every)) | {steps})[-ac.average_last:]
    return TrainConfig(
        name=f"{arm}_seed{seed}", model=state["model_config"],
        data=DataConfig(paths=paths, seq_len=seq_len, seed=seed, add_eos=base.data.add_eos, order=ac.order,
                        window=ac.window),
        optim=OptimConfig(**{**base.optim.model_dump(), "lr": lr, "warmup_steps": 0, "schedule": "linear", "min_lr_ratio": 0.0}),
        out_dir=str(ac.resolved_out_dir() / "runs" / f"{arm}_seed{seed}"), steps=steps, micro_batch=micro,
        grad_accum=ac.grad_accum, seed=seed, attention=base.attention, dtype=base.dtype, compile=base.compile,
        loss_chunk_tokens=base.loss_chunk_tokens,
        log_every=max(1, steps // 10), ckpt_every=every, ckpt_after=averaged[0], keep_checkpoints=ac.average_last,
        threads=ac.threads,
    )


ANNEAL_FOLDER = Workdir("train", "anneal output folder")
_NOT_BOUND = ("name", "out_dir", "threads", "eval", "eval_docs", "bootstrap", "seeds", "equivalence_margin",
              "equivalence_margin_abs", "alpha", "looks", "spending", "decontaminate", "decontam_threshold",
              "containment", "containment_ngram", "decontam_meaning", "decontam_meaning_model", "max_eval_loss_share", "downstream", "downstream_limit",
              "allow_task_code")


def _downstream(ac: AnnealConfig, model, mcfg, state: dict, run_dir: Path) -> dict:
    """lm-eval multiple-choice accuracy of one arm's averaged model (exported to ``<run>/hf_averaged``)."""
    from cuvee.train.hf_export import export_hf
    from cuvee.train.lm_eval_backend import evaluate_hf

    hf_dir = export_hf(model, mcfg, run_dir / "hf_averaged", state.get("tokenizer"))
    return evaluate_hf(str(hf_dir), list(ac.downstream), limit=ac.downstream_limit, device="cpu",
                       allow_task_code=ac.allow_task_code)


def _downstream_summary(ac: AnnealConfig, results: dict) -> dict:
    """Per task: each arm's accuracy per seed and the paired per-seed differences. No verdict is drawn from
    these: accuracy over a few hundred items moves by several points between seeds at small scale (see the
    stderr), so they are reported as evidence next to bits per byte, not instead of it."""
    out = {}
    for task in ac.downstream:
        row = {}
        for metric in ("acc", "acc_norm"):
            cand = [results["candidate"][s]["downstream"][task].get(metric) for s in ac.seeds]
            ctrl = [results["control"][s]["downstream"][task].get(metric) for s in ac.seeds]
            if any(v is None for v in cand + ctrl):
                continue
            diff = [a - b for a, b in zip(cand, ctrl)]
            row[metric] = {"candidate_per_seed": cand, "control_per_seed": ctrl,
                           "candidate": float(np.mean(cand)), "control": float(np.mean(ctrl)),
                           "effect_candidate_minus_control": float(np.mean(diff)), "per_seed_effect": diff}
        row["items"] = results["candidate"][ac.seeds[0]]["downstream"][task].get("samples")
        out[task] = row
    return out


def _binding(ac: AnnealConfig) -> dict:
    """What the arm runs under ``runs/`` depend on. Left out: ``name``/``out_dir`` (they only name the
    folder), ``threads`` (execution only), ``seeds`` (each seed's run folder is bound on its own, so seeds
    can be added to an ablation) and the evaluation settings (``eval``, ``eval_docs``, margin, alpha,
    decontamination): the report is recomputed from the arms on every run; the look plan (looks.json,
    cuvee.train.sequential) decides which of their changes are a new look and which are refused.
    The start checkpoint is bound by content, not by path."""
    b = ac.model_dump(mode="json")
    for key in _NOT_BOUND:
        b.pop(key)
    if b.get("order") == "global":  # folders bound before `order` existed resume
        b.pop("order")
    if b.get("order") != "window":
        b.pop("window", None)
    b["checkpoint"] = checkpoint_identity(ac.checkpoint)
    return b


def run_anneal(ac: AnnealConfig, quiet: bool = False, fresh: bool = False) -> dict:
    """Run (or resume) the ablation; ``fresh``: start over in a folder cuvee created (``--fresh``)."""
    state = load_checkpoint(ac.checkpoint)  # refuses a checkpoint that is not plain data, before any folder is made
    if ac.order == "pieces":  # arms whose documents' sources are unknown: one line, before any folder is made
        for paths in (ac.candidate, ac.control):
            arm_sources(open_shards(paths))
    if ac.downstream:  # a task that would run code is refused now, not after hours of training
        from cuvee.evaltasks import checked_task

        for task in ac.downstream:
            checked_task(task, ac.allow_task_code, warn=lambda _line: None)
    with ExitStack() as held:
        open_workdir(ac.resolved_out_dir(), ANNEAL_FOLDER, _binding(ac), held, fresh=fresh)
        look = begin_look(ac, ac.resolved_out_dir())  # a look the plan does not allow is refused before training
        return _run_anneal(ac, state, quiet, look)


# ---- eval-set hygiene ------------------------------------------------------------------------------------
def _train_paths(paths: list[str]) -> list[str]:
    """Mixer output dirs of an arm (a mix YAML: the folder `cuvee mix` built it into, as training reads it)."""
    from cuvee.train.shards import resolve_mix_yaml

    return [str(resolve_mix_yaml(Path(p))) if str(p).endswith((".yaml", ".yml")) else str(p) for p in paths]


def _decontam():
    """``cuvee.train.decontam.decontaminate`` when that module exists (it is optional), else None."""
    try:
        from cuvee.train.decontam import decontaminate
    except ImportError:
        return None
    return decontaminate


def _clean_eval_sets(ac: AnnealConfig, eval_sets: dict, say) -> tuple[dict[str, np.ndarray], dict]:
    """Per eval source: indices (within the first ``eval_docs``) of the documents to score, and the counts."""
    pools = {name: min(ac.eval_docs, shards.num_documents) for name, shards in eval_sets.items()}
    keep: dict[str, np.ndarray] = {}
    info: dict[str, dict] = {}
    for name, shards in eval_sets.items():
        seen, kept = set(), []
        for i in range(pools[name]):
            h = xxhash.xxh64_intdigest(np.ascontiguousarray(shards.document(i)).tobytes())
            if h not in seen:
                seen.add(h)
                kept.append(i)
        keep[name] = np.array(kept, dtype=np.int64)
        info[name] = {"pool": pools[name], "duplicates": pools[name] - len(kept), "overlap": None,
                      "method": "exact duplicates within the set removed; no training-overlap check "
                                "(cuvee.train.decontam not available or decontaminate: false)", "details": None}
    decontaminate = _decontam() if ac.decontaminate else None
    arms_of: dict[str, list[str]] = {}  # training source -> the arms holding it (a shared part: both)
    if decontaminate is not None or ac.decontam_meaning is not None:
        for arm, paths in (("candidate", ac.candidate), ("control", ac.control)):
            for path in _train_paths(paths):
                arms_of.setdefault(path, []).append(arm)
    train_sources = list(arms_of)
    if decontaminate is not None:
        clean, details = decontaminate(eval_sets, train_sources, max_docs=ac.eval_docs, threshold=ac.decontam_threshold,
                                       containment=ac.containment, containment_ngram=ac.containment_ngram)
        for src, path in zip(details["train_sources"], train_sources):
            src["arms"] = arms_of[path]
        contained = (f" + containment >= {ac.containment} of the document's n-grams" if ac.containment else "")
        for name in eval_sets:
            allowed = {int(i) for i in clean.get(name, range(pools[name]))}
            before = len(keep[name])
            keep[name] = np.array([i for i in keep[name] if int(i) in allowed], dtype=np.int64)
            info[name]["overlap"] = before - len(keep[name])
            info[name]["method"] = (f"exact duplicates within the set removed; documents overlapping either arm's "
                                    f"training sources removed (cuvee.train.decontam, exact + near-duplicate, "
                                    f"threshold {ac.decontam_threshold}{contained})")
            removed = [r for r in details["eval_sets"][name].get("removed", []) if "sources" in r]
            for r in removed:
                r["arms"] = sorted({a for si in r["sources"] for a in arms_of[train_sources[si]]})
            info[name]["removed_by_arm"] = {arm: sum(arm in r["arms"] for r in removed) for arm in ("candidate", "control")}
            per_set = {k: v for k, v in details["eval_sets"][name].items() if k != "removed"}
            per_set["removed"] = details["eval_sets"][name].get("removed", [])[:50]  # the first 50, for reading
            info[name]["details"] = per_set
        for name in eval_sets:
            info[name]["train_sources"] = details.get("train_sources")
            info[name]["parameters"] = details.get("parameters")
    if ac.decontam_meaning is not None:
        _by_meaning(ac, eval_sets, keep, info, train_sources, say)
    for name in eval_sets:
        info[name]["scored"] = len(keep[name])
        info[name]["warning"] = _loss_warning(name, info[name], ac.max_eval_loss_share)
        if info[name]["warning"]:
            print(f"[anneal] WARNING: {info[name]['warning']}", file=sys.stderr, flush=True)
        if not len(keep[name]):
            raise ValueError(f"eval source {name!r}: no documents left after dedup/decontamination")
        i = info[name]
        by_arm = i.get("removed_by_arm")
        arms = f" (candidate {by_arm['candidate']}, control {by_arm['control']})" if by_arm else ""
        say(f"[anneal] eval {name}: {i['pool']} documents, {i['duplicates']} duplicates, "
            f"{i['overlap'] if i['overlap'] is not None else 'unchecked'} overlapping training data{arms}, "
            + (f"{i['overlap_by_meaning']} by meaning, " if "overlap_by_meaning" in i else "") + f"{i['scored']} scored")
    return keep, info


def _by_meaning(ac: AnnealConfig, eval_sets: dict, keep: dict, info: dict, sources: list[str], say) -> None:
    """Eval hygiene by meaning (:mod:`cuvee.train.decontam_meaning`) against both arms' training sources."""
    from cuvee.train.decontam_meaning import meaning_overlap

    found = meaning_overlap(eval_sets, keep, sources, ac.decontam_meaning, ac.decontam_meaning_model, say=say)
    for name, f in found.items():
        keep[name] = np.asarray(f["kept"], dtype=np.int64)
        info[name]["overlap_by_meaning"] = len(f["removed"])
        info[name]["by_meaning"] = {"threshold": ac.decontam_meaning, "model": ac.decontam_meaning_model,
                                    "train_sources": sources, "removed": f["removed"][:50]}
        info[name]["method"] += (f"; documents within cosine {ac.decontam_meaning} of a training document "
                                 f"({ac.decontam_meaning_model}) removed (cuvee.train.decontam_meaning)")


def _loss_warning(name: str, info: dict, max_share: float) -> str | None:
    """One sentence when the eval set lost more than ``max_share`` of its pool, naming the arms that hold
    the removed documents; None otherwise."""
    lost = info["pool"] - info["scored"]
    if not info["pool"] or lost / info["pool"] <= max_share:
        return None
    text = (f"eval source {name!r} lost {lost} of its {info['pool']} documents ({100 * lost / info['pool']:.0f} %, "
            f"more than max_eval_loss_share {100 * max_share:.0f} %): {info['duplicates']} duplicates within the set, "
            f"{info['overlap'] if info['overlap'] is not None else 'unchecked'} overlapping training data")
    by_arm = info.get("removed_by_arm")
    if by_arm:
        text += f" (candidate arm holds {by_arm['candidate']}, control arm {by_arm['control']})"
        holders = [arm for arm in ("candidate", "control") if by_arm[arm]]
        if holders:
            text += (f"; the {' and '.join(holders)} arm{'s' if len(holders) > 1 else ''} contain{'' if len(holders) > 1 else 's'}"
                     f" eval data, and the verdict is drawn on the {info['scored']} documents left")
    return text


# ---- what each arm saw -----------------------------------------------------------------------------------
def _averaging(paths: list[Path], total: int) -> dict:
    steps = [int(p.stem.split("_")[1]) for p in paths]
    span = (total - steps[0]) / total if total else 0.0
    text = (f"steps {', '.join(map(str, steps))} of {total} = weights of the last {100 * span:.0f} % of the anneal"
            if len(steps) > 1 else f"step {steps[0]} of {total} (final weights, no averaging)")
    return {"steps": steps, "total_steps": total, "span": span, "text": text}


def _run_anneal(ac: AnnealConfig, state: dict, quiet: bool, look: Look) -> dict:
    say = (lambda *a: None) if quiet else (lambda m: print(m, flush=True))
    out = ac.resolved_out_dir()
    lr = ac.lr or start_lr(state)
    mcfg = ModelConfig(**state["model_config"])
    eval_sets = {name: open_shards(p) for name, p in ac.eval.items()}
    keep, decontam = _clean_eval_sets(ac, eval_sets, say)  # before any training
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seq_len = ac.seq_len or TrainConfig(**state["config"]).data.seq_len

    arms = (("candidate", ac.candidate), ("control", ac.control))
    results: dict[str, dict] = {"candidate": {}, "control": {}}
    doc_nats: dict[str, dict[str, list[np.ndarray]]] = {arm: {s: [] for s in eval_sets} for arm in results}
    denoms: dict[str, dict] = {}
    averaging: dict[str, dict] = {"candidate": {}, "control": {}}
    shares: dict[str, dict] = {}
    for seed in ac.seeds:  # paired: both arms of a seed share start, data-order seed and eval documents
        for arm, paths in arms:
            cfg = _arm_config(ac, state, arm, paths, seed, lr)
            say(f"[anneal] {arm} seed {seed}: {cfg.steps} steps x {cfg.micro_batch * cfg.data.seq_len * cfg.grad_accum} "
                f"tokens, lr {lr:.2e} -> 0, from step {state['step']}")
            run = train(cfg, init_from=ac.checkpoint, resume=True, quiet=quiet)
            last = list_checkpoints(cfg.resolved_out_dir())[-ac.average_last:]
            averaging[arm][str(seed)] = _averaging(last, cfg.steps)
            shares.setdefault(arm, {})[str(seed)] = measured_shares(cfg)  # what this seed read, step by step
            model = Llama(mcfg).to(device)
            model.load_state_dict(average_state_dicts([load_checkpoint(p)["model"] for p in last]))
            execution = Execution.of(cfg, device)  # scored with the backend and autocast the arm trained with
            evals = {}
            for name, shards in eval_sets.items():
                r = execution.evaluate(model, shards, seq_len, cfg.micro_batch, ac.eval_docs)
                k = keep[name]
                doc_nats[arm][name].append(r["doc_nats"][k])
                unit = "bpb" if r["doc_bytes"] is not None else "loss"
                den = (r["doc_bytes"] if unit == "bpb" else r["doc_tokens"])[k].astype(np.float64)
                denoms[name] = (unit, den)
                value = float(r["doc_nats"][k].sum() / den.sum() / (math.log(2) if unit == "bpb" else 1.0))
                evals[name] = public(r) | {"scored_documents": len(k), unit: value}
            results[arm][seed] = {"final_train_loss": final_train_loss(run, cfg.resolved_out_dir()),
                                  "averaged_checkpoints": [p.name for p in last], "eval": evals}
            if ac.downstream:
                results[arm][seed]["downstream"] = _downstream(ac, model, mcfg, state, cfg.resolved_out_dir())

    shares = {arm: summarise(per_seed) for arm, per_seed in shares.items()}
    first = next(iter(averaging["candidate"].values()))
    report = {"name": ac.name, "config": ac.model_dump(), "start_step": state["step"], "start_lr": lr,
              "seeds": list(ac.seeds), "look": look.to_dict(),
              "pairing": (f"per seed, both arms start from the same checkpoint with the same data-order seed and "
                          f"loader order ({ac.order}) and are scored on the same eval documents; the arms are "
                          f"separate mixer outputs, so their shared part is not read in the same document order"),
              "sources": source_verdicts(ac, look, eval_sets, doc_nats, denoms, results),
              "decontamination": decontam, "shares": shares, "averaging": averaging,
              "warnings": [d["warning"] for d in decontam.values() if d.get("warning")],
              "averaging_text": f"last {len(first['steps'])} checkpoints averaged per run: {first['text']}"}
    if ac.downstream:
        report["downstream"] = _downstream_summary(ac, results)
    report["runs"] = {arm: {str(s): {k: v for k, v in r.items() if k != "eval"} | {
        "eval": {n: {k: v for k, v in e.items() if not k.startswith("doc_")} for n, e in r["eval"].items()}}
        for s, r in runs.items()} for arm, runs in results.items()}
    record_look(out, look, look_key(ac), plan(ac), {n: v["verdict"] for n, v in report["sources"].items()})
    (out / "report.json").write_text(strict_dumps(report, indent=2, default=_json_default))  # NaN/inf -> null
    (out / "report.md").write_text(render_markdown(report))
    say(render_markdown(report))
    return report


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


__all__ = ["AnnealConfig", "render_markdown", "run_anneal"]
