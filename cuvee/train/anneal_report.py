"""The verdict half of ``cuvee anneal``: the look plan, the per-source paired verdicts at the look's level, and
report.md. Kept apart from anneal.py (training and eval-set hygiene) so each stays one concern.

Looks (:mod:`cuvee.train.sequential`): the verdicts of an anneal folder are a sequence of looks, one per
distinct seed set and evaluation settings; ``looks`` / ``spending`` / ``alpha`` and the margin form the plan
recorded with the first look, and a look beyond ``looks`` is refused before any training.

Margin: ``equivalence_margin`` (relative: a fraction of the control's metric) or ``equivalence_margin_abs``
(absolute, in the eval metric's unit: bits per byte, or nats per token for token loss). No default: a fixed
default margin (the old ±0.5 % of the control, ±0.019 bpb at 3.8 bpb) is as large as the effects anneals
look for (+0.016 to +0.061 bpb), so "no difference" would hide them. None is derived from the design either:
the design gives the noise (MDE), not the size of effect that matters, so without a stated margin no "no
difference" verdict is given and the reason says to state one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from cuvee.train.arm_shares import shares_markdown
from cuvee.train.sequential import Look, next_look
from cuvee.train.verdict import BETTER, WORSE, compare

_EVALUATION = ("eval", "eval_docs", "decontaminate", "decontam_threshold", "containment", "containment_ngram",
               "max_eval_loss_share")


def plan(ac) -> dict:
    """What must not change once a look is recorded: the spending plan and the margin."""
    return {"looks": ac.looks, "spending": ac.spending, "alpha": ac.alpha,
            "equivalence_margin": ac.equivalence_margin, "equivalence_margin_abs": ac.equivalence_margin_abs}


def look_key(ac) -> dict:
    """A look is this: the seed set (order does not matter) and the settings the verdict is drawn from."""
    return {"seeds": sorted(ac.seeds), "evaluation": {k: getattr(ac, k) for k in _EVALUATION}}


def begin_look(ac, folder) -> Look:
    """The look this run's verdict will be (refused now, before training, when the plan does not allow it)."""
    return next_look(folder, look_key(ac), plan(ac), fresh_hint="--fresh")


def _margin(ac, control: float) -> float | None:
    if ac.equivalence_margin_abs is not None:
        return ac.equivalence_margin_abs
    return ac.equivalence_margin * control if ac.equivalence_margin else None


def source_verdicts(ac, look: Look, names, doc_nats: dict, denoms: dict, results: dict) -> dict:
    """Per eval source: the paired verdict at the look's level, its look text leading the reason."""
    out = {}
    for name in names:
        unit, den = denoms[name]
        scale = 1 / math.log(2) if unit == "bpb" else 1.0
        cand = np.stack(doc_nats["candidate"][name])
        ctrl = np.stack(doc_nats["control"][name])
        per_seed = {arm: np.array([results[arm][s]["eval"][name][unit] for s in ac.seeds]) for arm in results}
        margin = _margin(ac, float(per_seed["control"].mean()))
        v = compare(cand, ctrl, weights=den, scale=scale, margin=margin, alpha=look.level, **look.sizing()).to_dict()
        v["reason"] = f"{look.text()}; {v['reason']}"
        out[name] = {
            "metric": unit, "candidate": float(per_seed["candidate"].mean()), "control": float(per_seed["control"].mean()),
            "candidate_per_seed": per_seed["candidate"].tolist(), "control_per_seed": per_seed["control"].tolist(),
            **v, "delta_control_minus_candidate": v["effect"], "beyond_noise": v["verdict"] in (BETTER, WORSE),
            "documents": len(den),
        }
    return out


def final_train_loss(run: dict, run_dir: Path) -> float | None:
    """The last step's training loss; from the run's log.jsonl when the run was already complete (a rerun
    trains nothing), so that rerunning the same look writes the same report."""
    if run["losses"]:
        return run["losses"][max(run["losses"])]
    log = Path(run_dir) / "log.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    last = [r.get("loss") for r in rows if r.get("event") == "train" and r.get("step") == run["step"]]
    return last[-1] if last else None


def _fmt(x: float | None, spec: str = "+.4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _margin_text(c: dict) -> str:
    if c.get("equivalence_margin_abs") is not None:
        return f"Equivalence margin: ±{c['equivalence_margin_abs']:.3g} in the metric's unit (stated)."
    if c.get("equivalence_margin"):
        return f"Equivalence margin: ±{100 * c['equivalence_margin']:.2g} % of the control's metric (stated)."
    return "No equivalence margin stated: never \"no difference\" (state equivalence_margin to allow it)."


def render_markdown(report: dict) -> str:
    c = report["config"]
    look = report.get("look")
    level = f"{100 * (1 - look['alpha_tested']):.4g} %" if look else "95 %"
    lines = [
        f"# Anneal ablation: {report['name']}", "",
        (f"From `{c['checkpoint']}` (step {report['start_step']}), LR {report['start_lr']:.2e} linearly to 0 over "
         f"{c['tokens']:,} tokens per run; paired seeds {report['seeds']}; {report['averaging_text']}."),
        f"Candidate: `{', '.join(c['candidate'])}`. Control: `{', '.join(c['control'])}`.",
        f"Pairing: {report['pairing']}.", "",
        *([f"Sequential plan: {look['text']}.", ""] if look else []),
        *[f"**Warning**: {w}.\n" for w in report.get("warnings", [])],
        "Effect = control − candidate (positive: the candidate is better), per seed on the same documents, then "
        f"averaged. {level} interval (the look's level): paired t over seeds widened by eval-document noise "
        "(cuvee/train/verdict.py); MDE = smallest effect found with 80 % power at this many seeds and documents. "
        + _margin_text(c), "",
        f"| eval source | metric | candidate | control | effect | {level} CI | p | MDE | seeds cand. better | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["sources"].items():
        lo, hi = s.get("ci", s["ci95"])
        lines.append(f"| {name} | {s['metric']} | {s['candidate']:.4f} | {s['control']:.4f} | {s['effect']:+.4f} | "
                     f"[{_fmt(lo)}, {_fmt(hi)}] | {_fmt(s['p_value'], '.2g')} | {_fmt(s['mde'], '.4f')} | "
                     f"{s['seeds_candidate_better']}/{s['n_seeds']} | {s['verdict']} |")
    lines += ["", "Why:"] + [f"- **{name}**: {s['verdict']} - {s['reason']}." for name, s in report["sources"].items()]
    lines += ["", "| eval source | pool | exact duplicates removed | overlapping training data removed | held by arm | "
              "same meaning as training data removed | scored |", "|---|---|---|---|---|---|---|"]
    for name, d in report["decontamination"].items():
        by_arm = d.get("removed_by_arm")
        held = f"candidate {by_arm['candidate']}, control {by_arm['control']}" if by_arm else "n/a"
        meaning = (f"{d['overlap_by_meaning']} (cosine >= {d['by_meaning']['threshold']})"
                   if "overlap_by_meaning" in d else "not checked")
        lines.append(f"| {name} | {d['pool']} | {d['duplicates']} | "
                     f"{d['overlap'] if d['overlap'] is not None else 'not checked'} | {held} | {meaning} | {d['scored']} |")
    lines += shares_markdown(report)  # per arm and seed: shares read over the steps trained, each seed's effect
    if report.get("downstream"):
        lines += ["", "Downstream (lm-evaluation-harness, offline; per-seed values, no verdict drawn):", "",
                  "| task | metric | items | candidate | control | candidate − control | per seed |", "|---|---|---|---|---|---|---|"]
        for task, row in report["downstream"].items():
            for metric in ("acc", "acc_norm"):
                if metric in row:
                    m = row[metric]
                    lines.append(f"| {task} | {metric} | {row.get('items')} | {m['candidate']:.3f} | {m['control']:.3f} | "
                                 f"{m['effect_candidate_minus_control']:+.3f} | "
                                 f"{', '.join(f'{d:+.3f}' for d in m['per_seed_effect'])} |")
    return "\n".join(lines) + "\n"
