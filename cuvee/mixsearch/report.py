"""The search's outputs: the pick as a ready mix YAML, ``report.json``, ``report.md`` and a plot of the
leave-one-out predicted vs measured loss (``predicted_vs_measured.png``, when matplotlib is installed).

Everything here is recomputed from the job records, so a resumed search writes the same files."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import yaml

from cuvee.train.strict_json import dumps as strict_dumps


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def rounded_weights(w: np.ndarray, digits: int = 6) -> list[float]:
    """Weights rounded for YAML that still sum to 1 within the mixer's 1e-6 (residue on the largest)."""
    r = [round(float(x), digits) for x in w]
    i = int(np.argmax(r))
    r[i] = round(r[i] + (1.0 - sum(r)), digits)
    return r


def write_pick_yaml(cfg, names: list[str], weights: np.ndarray, out: Path) -> Path:
    """``<out>/pick.yaml``: a mix config (``cuvee mix``) with the picked weights and the search's sources."""
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
    mix = {"name": f"{cfg.name}_pick",
           "description": f"weights chosen by `cuvee mix search` ({cfg.name}); set target_tokens to your budget",
           "target_tokens": cfg.proof_tokens, "seed": cfg.seed,
           "tokenizer": spec.get("name") or spec.get("path") if set(spec) <= {"kind", "name", "path"} else spec,
           "output_dir": f"out/mix/{cfg.name}_pick", "sources": sources}
    path = out / "pick.yaml"
    _atomic(path, "# written by cuvee mix search; see report.md next to it\n"
            + yaml.safe_dump(mix, sort_keys=False, allow_unicode=True))
    return path


def _fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def render_markdown(r: dict) -> str:
    plan, names = r["plan"], r["plan"]["sources"]
    cfg = r["config"]
    lines = [f"# Mix search: {r['name']}", "",
             f"{len(r['proxies'])} proxies of {r['proxies'][0]['tokens']:,} tokens ({r['proxies'][0]['params']:,} "
             f"parameters, {r['proxies'][0]['steps']} steps) over sources {', '.join(names)}; targets "
             + ", ".join(f"{t['name']} (weight {t['weight']:g})" for t in cfg["targets"]) + ".",
             ("Mixtures: the natural token shares, one corner per source, then Dirichlet draws around the natural "
             "shares, all within the bounds (cuvee/mixsearch/sampling.py)."), "",
             "## Pick", "",
             "| source | available tokens | bounds | natural | uniform | pick |", "|---|---|---|---|---|---|"]
    pw = r["pick"]["weights"]
    for i, n in enumerate(names):
        lines.append(f"| {n} | {plan['available_tokens'][i]:,} | [{plan['lo'][i]:.3g}, {plan['hi'][i]:.3g}] | "
                     f"{plan['natural'][i]:.3f} | {plan['uniform'][i]:.3f} | **{pw[n]:.3f}** |")
    lines += ["", (f"Predicted weighted target metric at the pick: {_fmt(r['pick']['predicted'])}. "
              f"Ready mix config: `{r['pick']['mix_yaml']}`."), "", "## Fits (leave-one-out over the proxies)", "",
              "| target | fit | LOO Spearman | LOO RMSE | LOO MAE | chosen |", "|---|---|---|---|---|---|"]
    for t, f in r["fits"].items():
        for k, s in f["fits"].items():
            lines.append(f"| {t} | {k} | {_fmt(s['loo_spearman'], '.3f')} | {_fmt(s['loo_rmse'], '.4g')} | "
                         f"{_fmt(s['loo_mae'], '.4g')} | {'yes' if k == f['chosen'] else ''} |")
    if r["verdicts"]:
        seeds = cfg["proof"]["seeds"]
        lines += ["", "## Proof: the pick against other mixes", "",
                  (f"Each arm trained from scratch with paired seeds {seeds} (same initialisation and per-source "
                  f"shuffles per seed), {r['proof']['pick'][str(seeds[0])]['tokens']:,} tokens; effect = control − "
                  "pick (positive: the pick is better); verdict by cuvee/train/verdict.py."), "",
                  ("| target | control arm | metric | pick | control | effect | 95 % CI | p | per-seed effect | "
                  "verdict | seeds needed |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
        for t, per in r["verdicts"].items():
            for arm, v in per.items():
                lo, hi = v["ci95"]
                lines.append(f"| {t} | {arm} | {v['metric']} | {v['pick']:.4f} | {v['control']:.4f} | "
                             f"{v['effect']:+.4f} | [{_fmt(lo, '+.4f')}, {_fmt(hi, '+.4f')}] | {_fmt(v['p_value'], '.2g')} | "
                             f"{', '.join(f'{d:+.4f}' for d in v['per_seed_effect'])} | {v['verdict']} | "
                             f"{v['seeds_needed'] if v['seeds_needed'] else ''} |")
        lines += ["", ("Shares of each source measured over the steps each proof arm trained (seed "
                  f"{seeds[0]}):"), ""]
        for arm, runs in r["proof"].items():
            sh = runs[str(seeds[0])]["shares_trained"]
            lines.append(f"- {arm}: " + ", ".join(f"{n} {100 * x:.1f} %" for n, x in sh.items()))
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


def _plot(out: Path, r: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    targets = list(r["fits"])
    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 4), squeeze=False)
    for ax, t in zip(axes[0], targets):
        f = r["fits"][t]
        measured = [p["targets"][t]["value"] for p in r["proxies"]]
        pred = f["fits"][f["chosen"]]["loo_predictions"]
        ax.scatter(measured, pred, s=18)
        lo, hi = min(measured + pred), max(measured + pred)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
        ax.set_title(f"{t}: {f['chosen']} (LOO rho {f['fits'][f['chosen']]['loo_spearman']:.2f})", fontsize=9)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted (leave-one-out)")
    fig.tight_layout()
    path = out / "predicted_vs_measured.png"
    tmp = out / f".predicted_vs_measured.png.{os.getpid()}.tmp"
    fig.savefig(tmp, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    os.replace(tmp, path)
    return path.name


def write_report(out: Path, report: dict) -> None:
    report["plot"] = _plot(out, report)
    _atomic(out / "report.json", strict_dumps(report, indent=2, default=_default))
    _atomic(out / "report.md", render_markdown(report))


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
