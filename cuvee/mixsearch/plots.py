"""The search report's figures (PNG, written only when matplotlib is installed):

``predicted_vs_measured.png``  per target, the chosen fit's leave-one-out prediction against each proxy's loss;
``top_weights.png``            the weights of the best proxies (by the weighted target metric), the pick and the
                               natural mix, as stacked bars;
``source_effect.png``          each source's effect: the predicted weighted metric as that source's weight moves
                               across its bounds, the other sources kept in the pick's proportions (a partial
                               dependence through the chosen fits), with the proxies' measured values as dots.

Everything is drawn from the report dict, so a resumed search draws the same figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cuvee.kernel.atomic import replacing
from cuvee.mixsearch.fit import fit_of
from cuvee.mixsearch.sampling import project

TOP = 8  # best proxies shown in top_weights.png


def _save(fig, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with replacing(out / name) as tmp:
        fig.savefig(tmp, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return name


def _weighted(r: dict):
    tw = {t["name"]: t["weight"] for t in r["config"]["targets"]}
    total = sum(tw.values())
    fits = {t: fit_of(f) for t, f in r["fits"].items()}

    def predict(w: np.ndarray) -> np.ndarray:
        return sum(tw[t] * f.predict(w) for t, f in fits.items()) / total

    measured = np.array([sum(tw[t] * p["targets"][t]["value"] for t in tw) / total for p in r["proxies"]])
    return predict, measured


def _predicted_vs_measured(plt, out: Path, r: dict) -> str:
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
    return _save(fig, out, "predicted_vs_measured.png")


def _top_weights(plt, out: Path, r: dict) -> str:
    names = r["plan"]["sources"]
    _, measured = _weighted(r)
    best = np.argsort(measured, kind="stable")[:TOP]
    rows = [("pick", [r["pick"]["weights"][n] for n in names]), ("natural", r["plan"]["natural"])]
    rows += [(f"proxy {i} ({measured[i]:.3f})", r["proxies"][i]["weights"]) for i in best]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
    left = np.zeros(len(rows))
    for j, n in enumerate(names):
        vals = np.array([w[j] for _, w in rows])
        ax.barh(range(len(rows)), vals, left=left, label=n)
        left += vals
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("weight (best proxies by the weighted target metric, measured value in brackets)")
    ax.legend(fontsize=7, ncol=min(6, len(names)), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return _save(fig, out, "top_weights.png")


def effect_curves(r: dict, points: int = 41) -> dict[str, dict[str, list[float]]]:
    """Per source: weights across [lo, hi] and the predicted weighted metric there, the others in the pick's
    proportions (projected onto the bounds)."""
    names = r["plan"]["sources"]
    lo, hi = np.asarray(r["plan"]["lo"]), np.asarray(r["plan"]["hi"])
    pick = np.array([r["pick"]["weights"][n] for n in names])
    predict, _ = _weighted(r)
    curves = {}
    for j, n in enumerate(names):
        xs = np.linspace(lo[j], hi[j], points)
        rest = np.delete(pick, j)
        share = rest / rest.sum() if rest.sum() > 0 else np.full(rest.size, 1 / max(1, rest.size))
        ws = []
        for x in xs:
            w = np.insert(share * (1 - x), j, x)
            lo_j, hi_j = lo.copy(), hi.copy()
            lo_j[j] = hi_j[j] = x  # hold this source at x; the projection moves only the others
            ws.append(project(w, lo_j, hi_j) if lo_j.sum() <= 1 <= hi_j.sum() else np.full(len(names), np.nan))
        ws = np.asarray(ws)
        ok = np.isfinite(ws).all(1)
        curves[n] = {"weight": xs[ok].tolist(), "predicted": predict(ws[ok]).tolist() if ok.any() else []}
    return curves


def _source_effect(plt, out: Path, r: dict) -> str:
    names = r["plan"]["sources"]
    curves = effect_curves(r)
    _, measured = _weighted(r)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False, sharey=True)
    for j, (ax, n) in enumerate(zip(axes[0], names)):
        ax.scatter([p["weights"][j] for p in r["proxies"]], measured, s=10, color="grey", label="proxies")
        ax.plot(curves[n]["weight"], curves[n]["predicted"], color="C0", label="predicted")
        ax.axvline(r["pick"]["weights"][n], color="C3", lw=0.8, ls="--", label="pick")
        ax.set_xlabel(f"weight of {n}")
    axes[0][0].set_ylabel("weighted target metric")
    axes[0][0].legend(fontsize=7)
    return _save(fig, out, "source_effect.png")


def draw(out: Path, r: dict) -> list[str]:
    """The figures written into ``out`` (an empty list without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    return [_predicted_vs_measured(plt, out, r), _top_weights(plt, out, r), _source_effect(plt, out, r)]
