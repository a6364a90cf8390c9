"""Score distributions (``*_score`` metadata) and the thresholds the recipe applied to them.

Stages do not declare which metadata key their threshold applies to, so the link is inferred from
names: a numeric parameter called like a threshold (``threshold``, ``min_score``, ``*_threshold``...)
in stage ``fineweb_edu`` belongs to ``fineweb_edu_score``; language-ID stages belong to
``language_score``; a parameter whose *value* names a score key wins over both.
"""

from __future__ import annotations

import re
from typing import Any

from cuvee.card.run_data import StageStats

THRESHOLD_PARAM = re.compile(r"(threshold|cutoff|^min_.*score|^max_.*score|^min_score$|^max_score$|score_min|score_max)", re.IGNORECASE)


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _score_key_for(stage: StageStats, score_keys: list[str]) -> str | None:
    for v in stage.params.values():  # e.g. {"key": "edu_score"} or {"name": "edu"}
        if isinstance(v, str):
            if v in score_keys:
                return v
            if f"{v}_score" in score_keys:
                return f"{v}_score"
    name = stage.name.lower()
    if f"{name}_score" in score_keys:
        return f"{name}_score"
    if "lang" in name and "language_score" in score_keys:
        return "language_score"
    for k in score_keys:
        base = k.removesuffix("_score")
        if base and (base in name or name in base):
            return k
    return None


def thresholds_by_score(stages: list[StageStats], score_keys: list[str]) -> tuple[dict[str, list[tuple[str, float]]], list[dict[str, Any]]]:
    """(score key -> [(label, value)], every threshold-like parameter found, linked or not)."""
    linked: dict[str, list[tuple[str, float]]] = {}
    found: list[dict[str, Any]] = []
    for s in stages:
        for p, v in s.params.items():
            if not (_numeric(v) and THRESHOLD_PARAM.search(p)):
                continue
            key = _score_key_for(s, score_keys)
            found.append({"stage": s.name, "param": p, "value": float(v), "score_key": key})
            if key:
                linked.setdefault(key, []).append((p, float(v)))
    return linked, found


def summarize(values: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=float)
    q = np.quantile(a, [0.1, 0.5, 0.9])
    return {"n": int(a.size), "min": float(a.min()), "p10": float(q[0]), "median": float(q[1]), "p90": float(q[2]), "max": float(a.max()), "mean": float(a.mean())}
