"""The transfer check: do the proxies' ranks hold at a larger budget?

The ``top_k`` best and ``bottom_k`` worst proxies (by the weighted target metric, the quantity the pick
minimises) are trained again with the same seed for ``transfer.tokens`` tokens. Reported per target and for
the weighted objective: the Spearman correlation between the two budgets over those mixtures, and the share of
(top, bottom) pairs whose order is the same at both budgets (with 2 + 2 mixtures, Spearman moves in steps of 0.2;
the pair share says directly whether the best stayed ahead of the worst).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from cuvee.kernel.errors import UserError


class TransferBudgetError(UserError, ValueError):
    """A transfer budget that would read some source past its max_epochs."""


def check_budget(tokens: int, names: list[str], hi: list[float], available: list[int],
                 max_epochs: list[float]) -> None:
    """Refuse, before any proxy trains, a transfer budget at which a mixture within the bounds could exceed a
    source's epoch cap (which mixtures get retrained is only known after the proxies)."""
    over = [f"{n} (weight up to {h:.3g} needs {h * tokens:,.0f} tokens, max_epochs {e:g} allows {e * a:,.0f})"
            for n, h, a, e in zip(names, hi, available, max_epochs) if h * tokens > e * a * (1 + 1e-9)]
    if over:
        raise TransferBudgetError(f"transfer.tokens {tokens:,} would read past max_epochs for " + "; ".join(over)
                                  + ": lower transfer.tokens, raise max_epochs or lower max_weight")


def objective(proxy: dict, target_weights: dict[str, float]) -> float:
    total = sum(target_weights.values())
    return sum(w * proxy["targets"][t]["value"] for t, w in target_weights.items()) / total


def select(proxies: list[dict], target_weights: dict[str, float], top_k: int, bottom_k: int) -> list[int]:
    """Indices of the top_k best then the bottom_k worst proxies (ties by index: deterministic)."""
    order = sorted(range(len(proxies)), key=lambda i: (objective(proxies[i], target_weights), i))
    return order[:top_k] + order[len(order) - bottom_k:]


def _agreement(small: list[float], large: list[float], top_k: int) -> float:
    pairs = [(i, j) for i in range(top_k) for j in range(top_k, len(small))]
    same = sum((small[i] < small[j]) == (large[i] < large[j]) for i, j in pairs)
    return same / len(pairs)


def _rho(a: list[float], b: list[float]) -> float:
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(stats.spearmanr(a, b).statistic)


def summarize(proxies: list[dict], picked: list[int], reruns: list[dict], target_weights: dict[str, float],
              top_k: int) -> dict:
    """Per target and for the weighted objective: values at both budgets, Spearman, pair agreement."""
    rows = {}
    for name in [*target_weights, "weighted"]:
        if name == "weighted":
            small = [objective(proxies[i], target_weights) for i in picked]
            large = [objective(r, target_weights) for r in reruns]
        else:
            small = [proxies[i]["targets"][name]["value"] for i in picked]
            large = [r["targets"][name]["value"] for r in reruns]
        rows[name] = {"proxy_budget": small, "transfer_budget": large, "spearman": _rho(small, large),
                      "pairs_same_order": _agreement(small, large, top_k)}
    held = rows["weighted"]["pairs_same_order"]
    return {"mixtures": picked, "top_k": top_k, "bottom_k": len(picked) - top_k,
            "proxy_tokens": proxies[picked[0]]["tokens"], "transfer_tokens": reruns[0]["tokens"], "targets": rows,
            "verdict": ("ranks held" if held == 1.0 else "ranks partly held" if held >= 0.5 and math.isfinite(held)
                        else "ranks did not hold")}
