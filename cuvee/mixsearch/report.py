"""The search's outputs: the pick as a mix YAML, ``report.json``, ``report.md`` and the figures of
cuvee/mixsearch/plots.py (when matplotlib is installed).

The pick is a ready mix config (``pick.yaml``) only when the search supports it: every target's chosen fit
ranks the proxies beyond chance, no proof arm measured better than the pick and the transfer check (if run)
did not see the ranks fall apart. Otherwise it is written as ``pick.NOT-SUPPORTED.yaml``, with a header
saying why, for inspection: a name nobody trains by mistake.

Everything here is recomputed from the job records, so a resumed search writes the same files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from cuvee.kernel.atomic import write_text as atomic_write_text
from cuvee.mixsearch.fit import DIVERGED_SPREAD
from cuvee.train.strict_json import dumps as strict_dumps
from cuvee.train.verdict import WORSE


def rounded_weights(w: np.ndarray, digits: int = 6) -> list[float]:
    """Weights rounded for YAML that still sum to 1 within the mixer's 1e-6 (residue on the largest)."""
    r = [round(float(x), digits) for x in w]
    i = int(np.argmax(r))
    r[i] = round(r[i] + (1.0 - sum(r)), digits)
    return r


PICK = "pick.yaml"
NOT_SUPPORTED = "pick.NOT-SUPPORTED.yaml"


def unsupported_because(report: dict) -> list[str]:
    """Why the pick is not a mix to train, one line per reason; empty when the search supports it."""
    why = [w for w in report.get("warnings") or []]  # per target: the fit ranks the proxies no better than noise
    for t, f in report["fits"].items():
        if f["fits"][f["chosen"]].get("diverged"):
            why.append(f"target {t}: every fit diverged (leave-one-out error not finite or over "
                       f"{DIVERGED_SPREAD:g}x the range of the proxies' values)")
    for t, per in (report.get("verdicts") or {}).items():
        for arm, v in per.items():
            if v["verdict"] == WORSE:
                why.append(f"target {t}: the pick measured worse than the {arm} mix in the proof ({v['metric']} "
                           f"{v['pick']:.4f} against {v['control']:.4f}, effect {v['effect']:+.4f}, 95 % CI "
                           f"[{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}])")
    transfer = report.get("transfer")
    if transfer and transfer["verdict"] == "ranks did not hold":
        why.append(f"the proxies' ranks did not hold at {transfer['transfer_tokens']:,} tokens (transfer check)")
    return why


def on_bounds(names: list[str], w, lo, hi, fits: dict) -> dict | None:
    """Which sources the pick holds at a bound, whether that makes it a corner (vertex) of the bounded simplex
    (all but at most one source at a bound), and a sentence saying what that means; None when it is inside."""
    tol = 1e-6
    lower = [n for n, x, a in zip(names, w, lo) if x <= a + tol]
    upper = [n for n, x, b in zip(names, w, hi) if x >= b - tol and n not in lower]
    if not lower and not upper:
        return None
    corner = len(lower) + len(upper) >= len(names) - 1
    loglinear = [t for t, f in fits.items() if f["chosen"] == "loglinear"]
    parts = [f"{', '.join(upper)} at {'its' if len(upper) == 1 else 'their'} upper bound"] if upper else []
    parts += [f"{', '.join(lower)} at {'its' if len(lower) == 1 else 'their'} lower bound"] if lower else []
    if corner:
        note = (f"The pick is a corner of the bounds ({'; '.join(parts)}): the fitted optimum lies at the edge of the "
                f"region the proxies sampled, so it says which direction the proxies favour, not an optimum found "
                f"inside the bounds")
        if loglinear:
            note += (f"; the chosen fit of {', '.join(loglinear)} is log-linear, monotone in every weight, and its "
                     f"optimum is always a corner")
    else:
        note = f"The pick sits on the bounds ({'; '.join(parts)}): the fitted optimum lies at or beyond them"
    return {"lower": lower, "upper": upper, "corner": corner, "note": note + "."}


def chosen_by(report: dict, out: Path) -> dict:
    """What the pick's mix config records about its choice (``cuvee card`` shows it): the search, its report,
    per target the chosen fit, its LOO scores and the permutation p of the choice, the proof verdicts and the
    transfer check."""
    fits = {t: {"fit": f["chosen"], "loo_spearman": f["fits"][f["chosen"]]["loo_spearman"],
                "loo_rmse": f["fits"][f["chosen"]]["loo_rmse"], "proxies": len(report["proxies"]),
                "permutation_p": (f.get("permutation") or {}).get("p_value")}
            for t, f in report["fits"].items()}
    proof = {t: {arm: {"verdict": v["verdict"], "metric": v["metric"], "effect": v["effect"], "ci95": list(v["ci95"]),
                       "reason": v.get("reason", "")}
                 for arm, v in per.items()} for t, per in (report.get("verdicts") or {}).items()}
    transfer = report.get("transfer")
    return {"search": report["name"], "report": str((out / "report.md").resolve()),
            "supported": report["pick"]["supported"], "not_supported_because": report["pick"]["not_supported_because"],
            "fits": fits, "proof": proof or "not run", "transfer": transfer["verdict"] if transfer else "not run",
            "warnings": list(report.get("warnings") or [])}


def write_pick_yaml(cfg, names: list[str], weights: np.ndarray, out: Path, chosen: dict) -> Path:
    """The pick as a mix config (``cuvee mix``) with the picked weights, the search's sources and ``chosen_by``
    (:func:`chosen_by`): ``pick.yaml`` when supported, else ``pick.NOT-SUPPORTED.yaml`` headed by why; the other
    name is removed, so the folder never holds a ready pick the search does not support."""
    why = chosen["not_supported_because"]
    sources = []
    for s, w in zip(cfg.sources, rounded_weights(weights)):
        entry = {"name": s.name, "paths": list(s.paths), "weight": w, "max_epochs": s.max_epochs}
        if s.where:
            entry["where"] = s.where
        if s.text_key != "text":
            entry["text_key"] = s.text_key
        if s.min_chars != 1:
            entry["min_chars"] = s.min_chars
        sources.append(entry)
    spec = cfg.tokenizer.model_dump(mode="json", exclude_defaults=True)
    name = f"{cfg.name}_pick" + ("_not_supported" if why else "")
    mix = {"name": name,
           "description": (f"weights chosen by `cuvee mix search` ({cfg.name}); set target_tokens to your budget"
                           if not why else f"NOT SUPPORTED by `cuvee mix search` ({cfg.name}): see the header"),
           "target_tokens": cfg.proof_tokens, "seed": cfg.seed,
           "tokenizer": spec.get("name") or spec.get("path") if set(spec) <= {"kind", "name", "path"} else spec,
           "output_dir": f"out/mix/{name}", "sources": sources, "chosen_by": chosen}
    header = "# written by cuvee mix search; see report.md next to it\n"
    if why:
        header = ("# NOT SUPPORTED: cuvee mix search does not support these weights. They are written here to be "
                  "inspected,\n# not as a mix to train (a supported pick is written as pick.yaml). Why:\n"
                  + "".join(f"# - {' '.join(w.split())}\n" for w in why) + "# See report.md next to this file.\n")
    path, other = (out / NOT_SUPPORTED, out / PICK) if why else (out / PICK, out / NOT_SUPPORTED)
    atomic_write_text(path, header + yaml.safe_dump(mix, sort_keys=False, allow_unicode=True))
    other.unlink(missing_ok=True)
    return path


def pick_line(report: dict) -> str:
    """The CLI's last line: where the pick is and whether it is a mix to train."""
    p = report["pick"]
    if p["supported"]:
        return f"[search] pick supported: ready mix config {p['mix_yaml']} (report.md next to it)"
    n = len(p["not_supported_because"])
    return (f"[search] pick NOT SUPPORTED ({n} reason{'s' if n != 1 else ''} in report.md): written as "
            f"{p['mix_yaml']} for inspection, not as a mix to train")


def _fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def render_markdown(r: dict) -> str:
    plan, names = r["plan"], r["plan"]["sources"]
    cfg = r["config"]
    lines = [f"# Mix search: {r['name']}", "",
             f"{len(r['proxies'])} proxies of {r['proxies'][0]['tokens']:,} tokens ({r['proxies'][0]['params']:,} "
             f"parameters, {r['proxies'][0]['steps']} steps) over sources {', '.join(names)}; targets "
             + ", ".join(f"{t['name']} (weight {t['weight']:g}" + (f", lm-eval task `{t['lm_eval']}`, each item's "
                         f"context and gold answer scored" if t.get("lm_eval") else "") + ")"
                         for t in cfg["targets"]) + ".",
             ("Mixtures: the natural token shares, one corner per source, then Dirichlet draws around the natural "
             "shares, all within the bounds (cuvee/mixsearch/sampling.py)."), "",
             *(x for w in r.get("warnings") or [] for x in (f"**Warning:** {w}", "")),
             "## Pick", "",
             "| source | available tokens | bounds | natural | uniform | pick |", "|---|---|---|---|---|---|"]
    pw = r["pick"]["weights"]
    for i, n in enumerate(names):
        lines.append(f"| {n} | {plan['available_tokens'][i]:,} | [{plan['lo'][i]:.3g}, {plan['hi'][i]:.3g}] | "
                     f"{plan['natural'][i]:.3f} | {plan['uniform'][i]:.3f} | **{pw[n]:.3f}** |")
    lines += ["", f"Predicted weighted target metric at the pick: {_fmt(r['pick']['predicted'])}."]
    if r["pick"].get("on_bounds"):
        lines += ["", r["pick"]["on_bounds"]["note"]]
    if r["pick"]["supported"]:
        lines += ["", "Supported (every target's fit ranks the proxies beyond chance"
                      + (", no proof arm measured better" if r.get("verdicts") else ", no proof run")
                      + f"): ready mix config `{r['pick']['mix_yaml']}`."]
    else:
        lines += ["", f"**Not supported**: written as `{r['pick']['mix_yaml']}` to be inspected, not as a mix to "
                      f"train, because:", "", *(f"- {w}" for w in r["pick"]["not_supported_because"])]
    lines += ["", "## Fits (leave-one-out over the proxies)", "",
              (f"Fits: log-linear mixing law, separable exponential, separable power law (one shared exponent), "
               f"RegMix-style ridge (cuvee/mixsearch/fit.py). Chosen: among the fits whose LOO Spearman is within "
               f"{_fmt(next(iter(r['fits'].values()), {}).get('spearman_tol'), 'g')} of the best, the lowest LOO "
               f"RMSE."), "",
              "| target | fit | LOO Spearman | LOO RMSE | LOO MAE | chosen |", "|---|---|---|---|---|---|"]
    for t, f in r["fits"].items():
        for k, s in f["fits"].items():
            err = ("diverged", "diverged") if s.get("diverged") else (_fmt(s["loo_rmse"], ".4g"), _fmt(s["loo_mae"], ".4g"))
            lines.append(f"| {t} | {k} | {_fmt(s['loo_spearman'], '.3f')} | {err[0]} | {err[1]} | "
                         f"{'yes' if k == f['chosen'] else ''} |")
    if any(s.get("diverged") for f in r["fits"].values() for s in f["fits"].values()):
        lines += ["", (f"Diverged: the fit's leave-one-out predictions are not finite or their RMSE exceeds "
                       f"{DIVERGED_SPREAD:g} times the range of the proxies' measured values (a constant guess stays "
                       f"within one range); such a fit is not chosen unless every fit diverged.")]
    lines += _permutation_lines(r["fits"])
    if r["verdicts"]:
        seeds = cfg["proof"]["seeds"]
        lines += ["", "## Proof: the pick against other mixes", "",
                  (f"Each arm trained from scratch with paired seeds {seeds} (same initialisation and per-source "
                  f"shuffles per seed), {r['proof']['pick'][str(seeds[0])]['tokens']:,} tokens; effect = control − "
                  "pick (positive: the pick is better); verdict by cuvee/train/verdict.py."), "",
                  ("| target | control arm | metric | pick | control | effect | 95 % CI | tested at | decision interval "
                  "| p | per-seed effect | verdict | seeds needed |"), "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        reasons = []
        for t, per in r["verdicts"].items():
            for arm, v in per.items():
                lo, hi = v["ci95"]
                dlo, dhi = v.get("ci", v["ci95"])
                lines.append(f"| {t} | {arm} | {v['metric']} | {v['pick']:.4f} | {v['control']:.4f} | "
                             f"{v['effect']:+.4f} | [{_fmt(lo, '+.4f')}, {_fmt(hi, '+.4f')}] | "
                             f"alpha {_fmt(v.get('alpha'), '.3g')} | [{_fmt(dlo, '+.4f')}, {_fmt(dhi, '+.4f')}] | "
                             f"{_fmt(v['p_value'], '.2g')} | "
                             f"{', '.join(f'{d:+.4f}' for d in v['per_seed_effect'])} | {v['verdict']} | "
                             f"{v['seeds_needed'] if v['seeds_needed'] else ''} |")
                reasons.append(f"- {t}, pick vs {arm}: {v.get('reason', '')}")
        lines += ["", "Why each verdict (the look, the level it was tested at and the family-wise bound):", "",
                  *reasons]
        lines += ["", ("Shares of each source measured over the steps each proof arm trained (seed "
                  f"{seeds[0]}):"), ""]
        for arm, runs in r["proof"].items():
            sh = runs[str(seeds[0])]["shares_trained"]
            lines.append(f"- {arm}: " + ", ".join(f"{n} {100 * x:.1f} %" for n, x in sh.items()))
    lines += _transfer_lines(r.get("transfer"))
    if r.get("plots"):
        lines += ["", "## Figures", "", *(f"![{name}]({name})" for name in r["plots"])]
    lines += ["", "## Proxies", "", "| # | kind | " + " | ".join(names) + " | " + " | ".join(
        t["name"] for t in cfg["targets"]) + " | wall s | CPU s |", "|" + "---|" * (4 + len(names) + len(cfg["targets"]))]
    for i, (p, kind) in enumerate(zip(r["proxies"], plan["kinds"])):
        lines.append(f"| {i} | {kind} | " + " | ".join(f"{x:.3f}" for x in p["weights"]) + " | "
                     + " | ".join(f"{p['targets'][t['name']]['value']:.4f}" for t in cfg["targets"])
                     + f" | {p['wall_s']:.1f} | {p['cpu_s']:.1f} |")
    lines += ["", "## Decontamination", ""]
    for t, d in r["decontamination"]["targets"].items():
        lines.append(f"- {t}: pool {d['pool']}, {d['duplicates_within']} duplicates within, {d['exact_overlap']} exact "
                     f"and {d['near_overlap']} near overlaps with the sources removed, {len(d['kept'])} scored")
    return "\n".join(lines) + "\n"


def _permutation_lines(fits: dict) -> list[str]:
    tests = {t: f["permutation"] for t, f in fits.items() if f.get("permutation")}
    if not tests:
        return []
    lines = ["", ("Permutation test of the choice (cuvee/mixsearch/permutation.py): the proxies' losses shuffled, "
             "every fit family refitted (its linear core, on the real and the shuffled losses alike), and the best "
             "LOO Spearman over the families compared with the real losses' best: p = (1 + shuffles scoring as "
             "well) / (shuffles + 1). A large p means the best of four fits ranks noise this well too."), "",
             "| target | chosen fit's LOO Spearman | best over families (linear cores) | null 95th percentile | "
             "shuffles | p |", "|---|---|---|---|---|---|"]
    for t, p in tests.items():
        rho = fits[t]["fits"][fits[t]["chosen"]]["loo_spearman"]
        lines.append(f"| {t} | {_fmt(rho, '.3f')} | {_fmt(p['observed'], '.3f')} | {_fmt(p['null_p95'], '.3f')} | "
                     f"{p['permutations']} (seed {p['seed']}) | {_fmt(p['p_value'], '.3f')} |")
    return lines


def _transfer_lines(t: dict | None) -> list[str]:
    if not t:
        return []
    lines = ["", "## Transfer check", "",
             (f"The {t['top_k']} best and {t['bottom_k']} worst proxies (mixtures {', '.join(map(str, t['mixtures']))})"
              f" trained again at {t['transfer_tokens']:,} tokens (proxies: {t['proxy_tokens']:,}), same seed. "
              f"Verdict: **{t['verdict']}**."), "",
             "| target | Spearman between budgets | (best, worst) pairs in the same order | values at proxy budget | "
             "values at transfer budget |", "|---|---|---|---|---|"]
    for name, row in t["targets"].items():
        lines.append(f"| {name} | {_fmt(row['spearman'], '.2f')} | {100 * row['pairs_same_order']:.0f} % | "
                     + ", ".join(f"{x:.4f}" for x in row["proxy_budget"]) + " | "
                     + ", ".join(f"{x:.4f}" for x in row["transfer_budget"]) + " |")
    return lines


def write_report(out: Path, report: dict) -> None:
    from cuvee.mixsearch.plots import draw

    report["plots"] = draw(out, report)
    atomic_write_text(out / "report.json", strict_dumps(report, indent=2, default=_default))
    atomic_write_text(out / "report.md", render_markdown(report))


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
