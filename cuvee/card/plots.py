"""PNG figures for the card (matplotlib, Agg backend): where people would rather look than read.

Each function writes one PNG and returns its path, or None when there is nothing to draw (e.g. a
partial run without a classifier), so the card simply leaves that figure out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

KEPT = "#3b7dd8"
DROPPED = "#e0795b"
TARGET = "#9aa5b1"
DPI = 110


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _label(value: object, limit: int = 60) -> str:
    """A label from data drawn as its characters: ``$`` would start matplotlib mathtext, which fails to
    draw on a crafted value (a language label, a stage or source name) and would stop the card."""
    s = " ".join(str(value).split())
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("$", r"\$")


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: stable bytes across runs
    _plt().close(fig)
    return path


def funnel_plot(rows: list[dict[str, Any]], path: Path, title: str = "Filter funnel") -> Path | None:
    """Horizontal bars: documents kept after each stage (blue) and removed by it (orange)."""
    rows = [r for r in rows if r.get("docs_in") is not None and r.get("docs_out") is not None]
    if not rows:
        return None
    plt = _plt()
    labels = [_label(r["label"]) for r in rows][::-1]
    kept = [r["docs_out"] for r in rows][::-1]
    dropped = [r["dropped"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.4))
    ax.barh(labels, kept, color=KEPT, label="kept")
    ax.barh(labels, dropped, left=kept, color=DROPPED, label="dropped at this stage")
    top = max(k + d for k, d in zip(kept, dropped)) or 1
    for y, (k, d) in enumerate(zip(kept, dropped)):
        ax.text(k + d + top * 0.01, y, f"{k:,}" + (f"  (-{d:,})" if d else ""), va="center", fontsize=8)
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("documents")
    ax.set_title(_label(title))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(rows) > 3 else -0.25), ncol=2, fontsize=8, frameon=False)
    return _save(fig, path)


def language_plot(languages: dict[str, int], path: Path, top: int = 20, title: str = "Language distribution (output documents)") -> Path | None:
    """Documents per language (top ``top``, the rest summed as 'other'), log scale when skewed."""
    if not languages:
        return None
    plt = _plt()
    items = sorted(languages.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(items) > top:
        items = items[: top - 1] + [("other", sum(v for _, v in items[top - 1 :]))]
    names = [_label(k, 24) for k, _ in items]
    vals = [v for _, v in items]
    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(items) + 2), 3.4))
    ax.bar(names, vals, color=KEPT)
    if len(vals) > 1 and max(vals) > 50 * max(1, min(vals)):
        ax.set_yscale("log")
    for x, v in enumerate(vals):
        ax.text(x, v, f"{v:,}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("documents")
    ax.set_title(_label(title, 80))
    ax.tick_params(axis="x", rotation=45 if len(items) > 8 else 0)
    return _save(fig, path)


def score_plots(scores: dict[str, list[float]], thresholds: dict[str, list[tuple[str, float]]], path: Path, bins: int = 30) -> Path | None:
    """One histogram per score key; dashed lines at the thresholds the recipe applied to it."""
    keys = sorted(k for k, v in scores.items() if v)
    if not keys:
        return None
    plt = _plt()
    cols = min(3, len(keys))
    nrows = -(-len(keys) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        vals = scores[key]
        ax.hist(vals, bins=bins, color=KEPT)
        for label, t in thresholds.get(key, []):
            ax.axvline(t, color=DROPPED, linestyle="--", linewidth=1.5)
            ax.text(t, ax.get_ylim()[1] * 0.95, f" {_label(label, 30)}={t:g}", color=DROPPED, fontsize=7, va="top")
        ax.set_title(f"{_label(key)} (n={len(vals):,})", fontsize=9)
        ax.set_ylabel("documents", fontsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle("Score distributions of kept documents", fontsize=10)
    return _save(fig, path)


def mix_plot(sources: list[dict[str, Any]], path: Path) -> Path | None:
    """Target vs realised tokens per mix source, with the source weight in the label."""
    sources = [s for s in sources if s.get("target_tokens") is not None or s.get("realised_tokens") is not None]
    if not sources:
        return None
    plt = _plt()
    import numpy as np

    names = [f"{_label(s.get('name', '?'), 30)}\n(w={float(s.get('weight', 0)):.2f})" for s in sources]
    tgt = [int(s.get("target_tokens") or 0) for s in sources]
    real = [int(s.get("realised_tokens") or 0) for s in sources]
    x = np.arange(len(sources))
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(sources) + 2), 3.4))
    ax.bar(x - 0.2, tgt, 0.4, color=TARGET, label="target tokens")
    ax.bar(x + 0.2, real, 0.4, color=KEPT, label="realised tokens")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("tokens")
    ax.set_title("Mix composition")
    ax.legend(fontsize=8)
    return _save(fig, path)
