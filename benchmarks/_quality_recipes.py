"""The recipes' final quality ranking on human labels, and the rules, fixed before measuring, that choose what
recipes/nemotron_cc.yaml, recipes/dclm.yaml and recipes/fineweb.yaml ship (issue #36). Used by
bench_quality_labels.py; nothing here is a second benchmark.

A recipe's final ranking of a labelled document is what the recipe does to it: documents its filters drop
(``language`` and the heuristic stages, built from the recipe's own YAML and run on the text) rank below every
kept one; kept documents are ordered by the recipe's score (``quality_ensemble``'s bucket, the classifier's score)
or, for FineWeb, which has no score, are all equal (its ranking is its keep/drop decision). A ccNet tail drop
(``perplexity`` stage, ``keep: [head, middle]``: bits per byte above the 66.6th percentile of the documents that
reach it) is one more filter.

Rules (written 2026-11-28 before the run that applies them; each compares a candidate with the current
configuration by the paired bootstrap of the final ranking's ROC-AUC, on every label set):

* R1 combine: ``mean`` unless ``max`` is better than ``mean`` on every set with a paired 95 % interval above 0;
* R2 a change (a member added, a classifier replaced, the perplexity tail drop added) is adopted when it helps:
  its paired interval lies above 0 on at least one set and below 0 on none;
* order: Nemotron-CC from its shipped pair (demo fastText + lid.176 P(en)): R1, then add the DCLM-style
  classifier (Nemotron-CC's first member is DCLM's), then add perplexity, then R1 again on the final members;
  DCLM: replace the demo classifier by the DCLM-style one, then the perplexity tail drop; FineWeb: the
  perplexity tail drop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
FILTER_STAGES = ("language", "gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality")
TAIL_PERCENTILE = 66.6  # ccNet: keep head and middle, drop the tail third
RECIPES = ("nemotron_cc", "dclm", "fineweb")


@dataclass(frozen=True)
class Config:
    """One way a recipe could rank documents."""

    recipe: str
    score: tuple[str, ...] = ()  # members: one = that score, several = quality_ensemble
    combine: str = "mean"
    tail_drop: bool = False  # perplexity keep [head, middle] after the recipe's filters

    @property
    def name(self) -> str:
        what = ("score " + self.score[0] if len(self.score) == 1 else
                f"{self.combine}({', '.join(self.score)})" if self.score else "keep/drop")
        return f"{self.recipe}: {what}{' + perplexity tail drop' if self.tail_drop else ''}"

    @property
    def members(self) -> tuple[str, ...]:
        return self.score + (("perplexity",) if self.tail_drop else ())


SHIPPED_BEFORE = {
    "nemotron_cc": Config("nemotron_cc", ("demo_fasttext", "language"), "max"),
    "dclm": Config("dclm", ("demo_fasttext",)),
    "fineweb": Config("fineweb"),
}


def candidates() -> list[Config]:
    """Every configuration the rules can reach (all are scored, so each step's comparison is at hand)."""
    out = []
    for combine in ("max", "mean"):
        for dclm in (False, True):
            for ppl in (False, True):
                members = ("demo_fasttext", "language") + (("dclm_standin",) if dclm else ()) + (("perplexity",) if ppl else ())
                out.append(Config("nemotron_cc", members, combine))
    out += [Config("dclm", (clf,), tail_drop=t) for clf in ("demo_fasttext", "dclm_standin") for t in (False, True)]
    out += [Config("fineweb", tail_drop=t) for t in (False, True)]
    return out


def recipe_filters_pass(recipe: str, texts: list[str], workdir: Path) -> np.ndarray:
    """True where a text survives the recipe's language and heuristic stages, built from its YAML, in its order."""
    from datatrove.data import Document

    from cuvee.pipeline.registry import BuildContext, get_stage

    stages = yaml.safe_load((REPO / "recipes" / f"{recipe}.yaml").read_text())["stages"]
    steps = []
    for i, st in enumerate(stages):
        if st["stage"] not in FILTER_STAGES:
            continue
        spec = get_stage(st["stage"])
        ctx = BuildContext(run_dir=workdir, work_dir=workdir, tasks=1, stage_index=i, stage_name=st["stage"])
        built = spec.build(spec.params(**{k: v for k, v in st.items() if k != "stage"}), ctx)
        steps += [s for s in (built if isinstance(built, list) else [built]) if hasattr(s, "filter")]
    keep = np.ones(len(texts), dtype=bool)
    for j, text in enumerate(texts):
        doc = Document(text=text, id=str(j))
        for step in steps:  # c4_quality rewrites the text: later steps see what it kept
            verdict = step.filter(doc)
            if not (verdict[0] if isinstance(verdict, tuple) else verdict):
                keep[j] = False
                break
    return keep


def _rank01(x: np.ndarray) -> np.ndarray:
    """Percentile rank in (0, 1) with ties sharing their mean rank: an order-only score."""
    from scipy.stats import rankdata

    return rankdata(x) / (len(x) + 1)


def final_ranking(cfg: Config, passes: np.ndarray, members: dict[str, np.ndarray], ensemble) -> np.ndarray:
    """Kept documents above dropped ones (+2), ordered by the recipe's score within each group."""
    keep = passes.copy()
    if cfg.tail_drop:
        from cuvee.classifiers.perplexity import bucket_cutoffs

        bpb = members["perplexity"]
        (cut,) = bucket_cutoffs(bpb[keep], [TAIL_PERCENTILE])
        keep &= bpb <= cut
    if not cfg.score:
        score = np.zeros(len(keep))
    elif len(cfg.score) == 1:
        s = members[cfg.score[0]]
        score = _rank01(-s if cfg.score[0] == "perplexity" else s)
    else:
        score = ensemble(cfg.score, cfg.combine) / 20.0  # quality_bucket 0..19, the recipe's 20 buckets
    return keep * 2.0 + score


def measure(labels: np.ndarray, texts: list[str], members: dict[str, np.ndarray], ensemble, bootstrap, n_boot: int,
            workdir: Path) -> dict:
    """Every candidate configuration's final ranking on one label set: ROC-AUC, interval, paired differences
    against length, against its best member and against every other configuration of its recipe."""
    from cuvee.classifiers.metrics import roc_auc

    passes = {r: recipe_filters_pass(r, texts, workdir / r) for r in RECIPES}
    cands = [c for c in candidates() if set(c.members) <= set(members)]
    extra = {f"filters:{r}": passes[r].astype(np.float64) for r in RECIPES}  # a recipe's filters alone
    oriented = {m: (-s if m == "perplexity" else s) for m, s in members.items()} | extra
    length = np.array([len(t) for t in texts], dtype=np.float64)
    finals = {c.name: final_ranking(c, passes[c.recipe], members, ensemble) for c in cands}
    names = ["length", *oriented, *finals]
    scores = [length, *oriented.values(), *finals.values()]
    boot = bootstrap(labels, scores, n_boot)
    col = {n: j for j, n in enumerate(names)}
    auc = {n: float(roc_auc(labels, s)) for n, s in zip(names, scores)}

    def paired(a: str, b: str) -> dict:
        d = boot[:, col[a]] - boot[:, col[b]]
        return {"diff": round(auc[a] - auc[b], 4), "ci95": [round(float(np.percentile(d, q)), 4) for q in (2.5, 97.5)]}

    rows = {}
    for c in cands:
        own = [*c.members, "language", f"filters:{c.recipe}"]
        best = max(dict.fromkeys(own), key=lambda m: auc[m])
        ci = [round(float(np.percentile(boot[:, col[c.name]], q)), 4) for q in (2.5, 97.5)]
        rows[c.name] = {"auc": round(auc[c.name], 4), "ci95": ci, "kept": int((finals[c.name] >= 2).sum()),
                        "best_member": best, "best_member_auc": round(auc[best], 4),
                        "vs_length": paired(c.name, "length"), "vs_best": paired(c.name, best)}
    diffs = {(a.name, b.name): paired(a.name, b.name) for a in cands for b in cands if a.recipe == b.recipe and a != b}
    return {"recipe_rows": rows, "config_diffs": diffs, "length_auc": round(auc["length"], 4),
            "filters_kept": {r: int(p.sum()) for r, p in passes.items()}}


def pick(results: list[dict]) -> dict[str, dict]:
    """Apply the rules to every label set's measured configurations: per recipe, the steps and the chosen one."""
    def diff(a: Config, b: Config) -> list[dict]:  # a - b, per set
        return [r["config_diffs"][(a.name, b.name)] for r in results]

    def helps(d: list[dict]) -> bool:
        return any(x["ci95"][0] > 0 for x in d) and not any(x["ci95"][1] < 0 for x in d)

    def r1(cfg: Config, steps: list) -> Config:
        mx, mn = replace(cfg, combine="max"), replace(cfg, combine="mean")
        d = diff(mx, mn)
        chosen = mx if all(x["ci95"][0] > 0 for x in d) else mn
        steps.append({"rule": "R1", "compare": f"{mx.name} vs {mn.name}", "diffs": d, "chosen": chosen.name})
        return chosen

    def r2(cur: Config, cand: Config, steps: list) -> Config:
        d = diff(cand, cur)
        chosen = cand if helps(d) else cur
        steps.append({"rule": "R2", "compare": f"{cand.name} vs {cur.name}", "diffs": d, "chosen": chosen.name})
        return chosen

    out = {}
    for recipe in RECIPES:
        steps: list = []
        cur = SHIPPED_BEFORE[recipe]
        if recipe == "nemotron_cc":
            cur = r1(cur, steps)
            cur = r2(cur, replace(cur, score=cur.score + ("dclm_standin",)), steps)
            cur = r2(cur, replace(cur, score=cur.score + ("perplexity",)), steps)
            cur = r1(cur, steps)
        elif recipe == "dclm":
            cur = r2(cur, replace(cur, score=("dclm_standin",)), steps)
            cur = r2(cur, replace(cur, tail_drop=True), steps)
        else:
            cur = r2(cur, replace(cur, tail_drop=True), steps)
        out[recipe] = {"before": SHIPPED_BEFORE[recipe].name, "chosen": cur, "steps": steps}
    return out


def print_recipe_tables(results: list[dict], picked: dict[str, dict]) -> None:
    print("\n## Recipes: final ranking on human labels (documents a recipe's filters drop rank below kept ones)\n")
    print(RULES_LINE)
    for recipe, p in picked.items():
        cfg: Config = p["chosen"]
        print(f"\n### {recipe}: ships `{cfg.name}` (before: `{p['before']}`)\n")
        print("| set | final ROC-AUC [95 %] | length | final - length [paired 95 %] | best member | "
              "final - best member [paired 95 %] | before: ROC-AUC |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            row = r["recipe_rows"][cfg.name]
            before = r["recipe_rows"][p["before"]]
            print(f"| {r['dataset']} | {row['auc']:.3f} [{row['ci95'][0]:.3f}-{row['ci95'][1]:.3f}] | "
                  f"{r['length_auc']:.3f} | {row['vs_length']['diff']:+.3f} [{_ci(row['vs_length'])}] | "
                  f"{row['best_member']} {row['best_member_auc']:.3f} | {row['vs_best']['diff']:+.3f} "
                  f"[{_ci(row['vs_best'])}] | {before['auc']:.3f} |")
        for s in p["steps"]:
            per = "; ".join(f"{r['dataset']} {d['diff']:+.3f} [{_ci(d)}]" for r, d in zip(results, s["diffs"]))
            print(f"- {s['rule']}: {s['compare']}: {per} -> `{s['chosen']}`")


def _ci(d: dict) -> str:
    return f"{d['ci95'][0]:+.3f} to {d['ci95'][1]:+.3f}"


RULES_LINE = ("Rules fixed before the run: R1 `mean` unless `max` is better on every set (paired 95 % interval "
              "above 0); R2 a change is adopted when its paired interval is above 0 on one set at least and below "
              "0 on none (benchmarks/_quality_recipes.py).")
