"""Mixtures over the bounded simplex {w : lo_i <= w_i <= hi_i, sum w = 1}.

Bounds: ``lo_i = min_weight``; ``hi_i = min(max_weight, max_epochs * available_i / tokens)``, so no mixture
asks a source for more repetitions than allowed at the largest budget it is trained with.

Scheme (deterministic from the search seed), N mixtures in this order:

1. the natural mix: each source's share of the available tokens, projected onto the bounds;
2. the corners: for each source, its largest feasible weight (the rest at their lower bounds, the
   remainder spread in proportion to natural shares) - the fit then sees every source at its extreme;
3. Dirichlet draws, alternating between draws around the natural shares, ``alpha_i = concentration * n *
   natural_i`` (floored at 0.05 so a small source is still explored), and flat draws, ``alpha_i = 1``
   (uniform over the simplex: without them the interior far from the natural mix holds no proxy, and a fit
   extrapolates there), each projected onto the bounds; draws within 1e-3 (L1) of a mixture already chosen
   are drawn again.

Projection: the Euclidean projection onto the bounded simplex, ``w_i = clip(v_i - tau, lo_i, hi_i)`` with
``tau`` found by bisection so the weights sum to 1.
"""

from __future__ import annotations

import numpy as np


class BoundsError(ValueError):
    """Bounds (weights and epoch caps) that no mixture can meet."""


def bounds(min_w: list[float], max_w: list[float], max_epochs: list[float], available: list[int], tokens: int,
           names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(min_w, dtype=np.float64)
    cap = np.array([e * a / tokens for e, a in zip(max_epochs, available)], dtype=np.float64)
    hi = np.minimum(np.asarray(max_w, dtype=np.float64), cap)
    short = [f"{n} (min_weight {lo[i]:g} needs {lo[i] * tokens:,.0f} tokens, max_epochs allows "
             f"{cap[i] * tokens:,.0f})" for i, n in enumerate(names) if lo[i] > hi[i] + 1e-12]
    if short:
        raise BoundsError("epoch caps make the budget impossible for " + "; ".join(short))
    if hi.sum() < 1 - 1e-9:
        detail = ", ".join(f"{n} <= {h:.3g}" for n, h in zip(names, hi))
        raise BoundsError(f"the sources cannot fill {tokens:,} tokens within max_weight and max_epochs "
                          f"(at most {hi.sum():.3g} of it: {detail}); add data, raise max_epochs or lower the tokens")
    return lo, hi


def project(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto {lo <= w <= hi, sum w = 1} (bisection on the shift tau)."""
    v = np.asarray(v, dtype=np.float64)
    a, b = float((v - hi).min()) - 1.0, float((v - lo).max()) + 1.0
    for _ in range(200):
        tau = 0.5 * (a + b)
        if np.clip(v - tau, lo, hi).sum() > 1:
            a = tau
        else:
            b = tau
    w = np.clip(v - 0.5 * (a + b), lo, hi)
    return _exact_sum(w, lo, hi)


def _exact_sum(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Put the rounding residue on a source with room, so the weights sum to 1 to the last bit it can."""
    r = 1.0 - w.sum()
    room = (hi - w) if r > 0 else (w - lo)
    i = int(np.argmax(room))
    w[i] += r
    return w


def natural(available: list[int], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    a = np.asarray(available, dtype=np.float64)
    return project(a / a.sum(), lo, hi)


def uniform(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return project(np.full(lo.size, 1.0 / lo.size), lo, hi)


def corner(i: int, nat: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Source i as large as the bounds allow; the others at their lower bounds plus the remainder in
    proportion to their natural shares (capped at their upper bounds)."""
    w = lo.copy()
    w[i] = min(hi[i], 1.0 - (lo.sum() - lo[i]))
    for _ in range(len(w)):
        rest = 1.0 - w.sum()
        if rest <= 1e-15:
            break
        room = np.where(np.arange(len(w)) == i, 0.0, hi - w)
        share = np.where(room > 0, np.maximum(nat, 1e-9), 0.0)
        if share.sum() == 0:
            break
        w += np.minimum(room, rest * share / share.sum())
    return _exact_sum(w, lo, hi)


def sample_mixtures(n_mixtures: int, available: list[int], lo: np.ndarray, hi: np.ndarray, seed: int,
                    concentration: float = 1.0) -> tuple[np.ndarray, list[str]]:
    """(N x sources weights, the kind of each: "natural", "corner:<i>", "dirichlet", "flat")."""
    nat = natural(available, lo, hi)
    rows, kinds = [nat], ["natural"]
    for i in range(lo.size):
        rows.append(corner(i, nat, lo, hi))
        kinds.append(f"corner:{i}")
    rng = np.random.default_rng(seed)
    alpha = concentration * lo.size * np.maximum(nat, 0.05)
    tries = 0
    flat = np.ones(lo.size)
    while len(rows) < n_mixtures:
        w = project(rng.dirichlet(alpha if (len(rows) - lo.size - 1) % 2 == 0 else flat), lo, hi)
        tries += 1
        if min(np.abs(np.asarray(rows) - w).sum(1)) < 1e-3 and tries < 100 * n_mixtures:
            continue
        kinds.append("dirichlet" if (len(rows) - lo.size - 1) % 2 == 0 else "flat")
        rows.append(w)
    return np.asarray(rows[:n_mixtures]), kinds[:n_mixtures]
