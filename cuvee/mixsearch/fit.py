"""Models of target loss as a function of the mixture weights, chosen by leave-one-out rank correlation,
and the pick: the weights minimising the predicted (weighted) target loss within the bounds.

Fits (per target; every one deterministic, so a rerun on the same proxies gives the same pick):

``loglinear``   the mixing law of Ye et al. (2024), ``L(w) = c + k * exp(sum_j t_j w_j)`` (least squares).
                Monotone along every direction, so its optimum is a vertex of the bounds: right for a target
                close to one source, wrong for a target that is a blend.
``separable``   the same law with one implicit domain per source, ``L(w) = c + sum_j k_j exp(-t_j w_j)``
                (``k_j, t_j >= 0``): each source lowers the loss of "its part" of the target with diminishing
                returns; convex, so a blended target gets an interior optimum.
``powerlaw``    separable with a data-scaling shape, ``L(w) = c + sum_j k_j (w_j + eps)^-a`` (``k_j, a >= 0``,
                ``eps = 0.01``: what the other sources transfer when source j is absent): one exponent shared
                by all sources, so n + 2 parameters, and for a fixed ``a`` the rest is a non-negative linear
                least-squares problem, solved exactly on a grid of ``a`` and then polished. Steadier than
                ``separable`` with few proxies (its fit has no local minima in ``k`` and ``c``).
``ridge``       RegMix-style regression (Liu et al., 2024): ridge on the weights and their pairwise products,
                the penalty chosen by leave-one-out error (closed form through the hat matrix).

Choice: leave-one-out over the proxies (each refit without one proxy predicts it). A fit whose LOO error is not
finite or exceeds ``DIVERGED_SPREAD`` (10) times the range of the measured losses has diverged (the report says
so instead of printing the error) and is not chosen unless every fit diverged. Of the others, the fits whose LOO
Spearman between predicted and measured loss is within ``SPEARMAN_TOL`` (0.02) of the best are taken as tied,
and of those the one with the lowest LOO RMSE wins (ranks from 10-20 proxies move by more than 0.02 when one
proxy changes, so a rank lead that small says less than a clearly smaller error). The best of four noisy scores
is biased upwards, so :func:`fit_target` also reports a permutation test of the choice (permutation.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from cuvee.mixsearch.families import POWER_EPS, POWER_EXPONENTS, RIDGE_ALPHAS, features
from cuvee.mixsearch.permutation import PERMUTATIONS, permutation_test
from cuvee.mixsearch.progress import timed
from cuvee.mixsearch.sampling import project

FITS = ("loglinear", "separable", "powerlaw", "ridge")
SPEARMAN_TOL = 0.02  # LOO Spearman values this close count as tied; the lower LOO RMSE wins
DIVERGED_SPREAD = 10.0  # a LOO RMSE above this many times the range of the measured losses: the fit diverged


@dataclass(frozen=True)
class Fit:
    kind: str
    params: tuple

    def predict(self, w: np.ndarray) -> np.ndarray:
        w = np.atleast_2d(np.asarray(w, dtype=np.float64))
        p = np.asarray(self.params, dtype=np.float64)
        n = w.shape[1]
        if self.kind == "loglinear":
            return p[0] + np.exp(p[1] + w @ p[2:2 + n])
        if self.kind == "separable":
            k, t = np.exp(p[1:1 + n]), np.exp(p[1 + n:1 + 2 * n])
            return p[0] + (k[None, :] * np.exp(-w * t[None, :])).sum(1)
        if self.kind == "powerlaw":
            k, a = np.exp(p[1:1 + n]), math.exp(p[1 + n])
            return p[0] + (k[None, :] * (w + POWER_EPS) ** -a).sum(1)
        mean, scale, coef, icpt = _ridge_unpack(p, n)
        return (features(w) - mean) / scale @ coef + icpt


def _ridge_unpack(p: np.ndarray, n: int):
    m = n + n * (n + 1) // 2
    return p[:m], p[m:2 * m], p[2 * m:3 * m], p[3 * m]


def _fit_loglinear(w: np.ndarray, y: np.ndarray) -> Fit:
    n = w.shape[1]
    best = None
    for frac in (0.0, 0.5, 0.9):
        c0 = frac * y.min()
        ly = np.log(np.maximum(y - c0, 1e-9))
        a = np.column_stack([np.ones(len(y)), w])
        sol = np.linalg.lstsq(a, ly, rcond=None)[0]
        x0 = np.concatenate([[c0, sol[0]], sol[1:]])

        def resid(p):
            return p[0] + np.exp(np.clip(p[1] + w @ p[2:], -50, 50)) - y

        def jac(p):  # analytic: one evaluation per iteration instead of n + 3 for finite differences
            z = p[1] + w @ p[2:]
            e = np.where(np.abs(z) < 50, np.exp(np.clip(z, -50, 50)), 0.0)
            return np.column_stack([np.ones(len(y)), e, e[:, None] * w])

        r = optimize.least_squares(resid, x0, jac=jac, method="trf", x_scale="jac", max_nfev=2000)
        cost = float(np.sum(r.fun ** 2))
        if best is None or cost < best[0]:
            best = (cost, r.x)
    return Fit("loglinear", tuple(float(x) for x in best[1][:2 + n]))


def _fit_separable(w: np.ndarray, y: np.ndarray) -> Fit:
    n = w.shape[1]
    best = None
    spread = max(float(y.max() - y.min()), 1e-6)
    for t0 in (1.0, 3.0, 10.0):
        x0 = np.concatenate([[y.min() - spread], np.full(n, math.log(spread)), np.full(n, math.log(t0))])

        def resid(p):
            k, t = np.exp(np.clip(p[1:1 + n], -50, 50)), np.exp(np.clip(p[1 + n:], -20, 6))
            return p[0] + (k[None, :] * np.exp(-w * t[None, :])).sum(1) - y

        def jac(p):  # analytic (zero where a parameter is clipped): 2n + 2 fewer evaluations per iteration
            lk, lt = p[1:1 + n], p[1 + n:]
            k, t = np.exp(np.clip(lk, -50, 50)), np.exp(np.clip(lt, -20, 6))
            term = k[None, :] * np.exp(-w * t[None, :])
            dk = term * ((lk > -50) & (lk < 50))[None, :]
            dt = -term * w * t[None, :] * ((lt > -20) & (lt < 6))[None, :]
            return np.column_stack([np.ones(len(y)), dk, dt])

        r = optimize.least_squares(resid, x0, jac=jac, method="trf", max_nfev=4000)
        cost = float(np.sum(r.fun ** 2))
        if best is None or cost < best[0]:
            best = (cost, r.x)
    p = best[1].copy()
    p[1 + n:] = np.clip(p[1 + n:], -20, 6)
    return Fit("separable", tuple(float(x) for x in p))


def _power_nnls(w: np.ndarray, y: np.ndarray, a: float) -> tuple[float, float, np.ndarray]:
    """For a fixed exponent: (SSE, c, k >= 0) by non-negative least squares (c free: split into c+ and c-)."""
    x = (w + POWER_EPS) ** -a
    ones = np.ones((len(y), 1))
    scale = np.maximum(x.max(0), 1e-12)
    sol, rnorm = optimize.nnls(np.hstack([ones, -ones, x / scale]), y, maxiter=50 * (x.shape[1] + 2))
    return float(rnorm ** 2), float(sol[0] - sol[1]), sol[2:] / scale


def _fit_powerlaw(w: np.ndarray, y: np.ndarray) -> Fit:
    n = w.shape[1]
    sse, c, k, a = min(((*_power_nnls(w, y, a), a) for a in POWER_EXPONENTS), key=lambda t: t[0])
    floor = 1e-12 * max(float(np.abs(y).max()), 1.0)
    x0 = np.concatenate([[c], np.log(np.maximum(k, floor)), [math.log(a)]])

    x, logx = w + POWER_EPS, np.log(w + POWER_EPS)

    def resid(p):
        return p[0] + (np.exp(np.clip(p[1:1 + n], -60, 50))[None, :] * x ** -math.exp(
            np.clip(p[1 + n], -10, 2))).sum(1) - y

    def jac(p):  # analytic (zero where a parameter is clipped)
        lk, la = p[1:1 + n], p[1 + n]
        a = math.exp(min(max(la, -10.0), 2.0))
        term = np.exp(np.clip(lk, -60, 50))[None, :] * x ** -a
        dk = term * ((lk > -60) & (lk < 50))[None, :]
        da = -(term * logx).sum(1) * a * (-10 < la < 2)
        return np.column_stack([np.ones(len(y)), dk, da])

    r = optimize.least_squares(resid, x0, jac=jac, method="trf", max_nfev=2000)
    p = r.x if float(np.sum(r.fun ** 2)) < sse else x0  # the polish never makes the fit worse
    p = p.copy()
    p[1:1 + n] = np.clip(p[1:1 + n], -60, 50)
    p[1 + n] = np.clip(p[1 + n], -10, 2)
    return Fit("powerlaw", tuple(float(v) for v in p))


def _ridge_solve(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    xm = np.column_stack([x, np.ones(len(y))])
    reg = alpha * np.eye(xm.shape[1])
    reg[-1, -1] = 0.0
    sol = np.linalg.solve(xm.T @ xm + reg, xm.T @ y)
    return sol[:-1], float(sol[-1])


def _fit_ridge(w: np.ndarray, y: np.ndarray) -> Fit:
    f = features(w)
    mean, scale = f.mean(0), f.std(0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    x = (f - mean) / scale
    xm = np.column_stack([x, np.ones(len(y))])
    best = None
    for alpha in RIDGE_ALPHAS:  # leave-one-out error in closed form: e_i / (1 - h_ii)
        reg = alpha * np.eye(xm.shape[1])
        reg[-1, -1] = 0.0
        hat = xm @ np.linalg.solve(xm.T @ xm + reg, xm.T)
        resid = y - hat @ y
        loo = resid / np.maximum(1 - np.diag(hat), 1e-9)
        err = float(np.mean(loo ** 2))
        if best is None or err < best[0] - 1e-15:
            best = (err, alpha)
    coef, icpt = _ridge_solve(x, y, best[1])
    return Fit("ridge", tuple(float(v) for v in np.concatenate([mean, scale, coef, [icpt]])))


FITTERS = {"loglinear": _fit_loglinear, "separable": _fit_separable, "powerlaw": _fit_powerlaw, "ridge": _fit_ridge}


def loo(kind: str, w: np.ndarray, y: np.ndarray, step=None) -> dict:
    """Leave-one-out predictions of one fit kind, with their Spearman correlation and errors (``step``: called
    after each refit, for progress)."""
    pred = np.empty(len(y))
    for i in range(len(y)):
        m = np.arange(len(y)) != i
        pred[i] = FITTERS[kind](w[m], y[m]).predict(w[i:i + 1])[0]
        if step is not None:
            step(kind)
    finite = bool(np.isfinite(pred).all())
    rho = stats.spearmanr(pred, y).statistic if finite and np.ptp(pred) > 0 and np.ptp(y) > 0 else float("nan")
    err = pred - y
    rmse = float(np.sqrt(np.mean(err ** 2)))
    return {"kind": kind, "loo_spearman": float(rho), "loo_rmse": rmse, "loo_mae": float(np.mean(np.abs(err))),
            "loo_predictions": pred.tolist(), "diverged": diverged(rmse, y)}


def diverged(rmse: float, y: np.ndarray) -> bool:
    """A fit's leave-one-out error is not an error but a blow-up: not finite, or above ``DIVERGED_SPREAD`` times
    the range of the measured losses (a fit that predicted the mean would stay below one range)."""
    return not math.isfinite(rmse) or rmse > DIVERGED_SPREAD * max(float(np.ptp(y)), 1e-12)


def choose(scores: dict[str, dict], tol: float = SPEARMAN_TOL) -> str:
    """The fit with the lowest LOO RMSE among those whose LOO Spearman is within ``tol`` of the best; a fit that
    diverged (:func:`diverged`) is chosen only when every one did."""
    def rho(k):
        r = scores[k]["loo_spearman"]
        return r if math.isfinite(r) else -2.0

    usable = [k for k in scores if not scores[k].get("diverged")] or list(scores)
    best = max(rho(k) for k in usable)
    tied = [k for k in usable if rho(k) >= best - tol - 1e-12]
    return min(tied, key=lambda k: (scores[k]["loo_rmse"], -rho(k), list(scores).index(k)))


def fit_target(w: np.ndarray, y: np.ndarray, permutations: int | None = None, seed: int = 0, say=None,
               name: str = "the target") -> dict:
    """Every fit of one target, their LOO scores, the chosen one (see :func:`choose`) and the permutation test
    of that choice (cuvee/mixsearch/permutation.py; ``permutations`` defaults to its ``PERMUTATIONS``). ``say``
    gets the progress lines (at most one every few seconds: the nonlinear fits take seconds to minutes)."""
    say = say or (lambda m: None)
    b = PERMUTATIONS if permutations is None else permutations
    n = len(y)
    with timed(say, f"fitting {name}: {len(FITS)} families x {n + 1} fits ({n} leave-one-out and the full one)",
               total=len(FITS) * (n + 1), label=f"fitting {name}") as ticker:
        scores = {k: loo(k, w, y, ticker.step) for k in FITS}
        for k in FITS:
            scores[k]["params"] = list(FITTERS[k](w, y).params)
            ticker.step(k)
    with timed(say, f"permutation test of {name}'s fit choice ({b} shuffles, {len(FITS)} families' linear cores)"):
        test = permutation_test(w, y, b, seed)
    return {"chosen": choose(scores), "spearman_tol": SPEARMAN_TOL, "fits": scores, "permutation": test}


def fit_of(result: dict) -> Fit:
    chosen = result["chosen"]
    return Fit(chosen, tuple(result["fits"][chosen]["params"]))


def pick(fits: dict[str, Fit], target_weights: dict[str, float], lo: np.ndarray, hi: np.ndarray,
         starts: np.ndarray) -> tuple[np.ndarray, float]:
    """Weights minimising ``sum_t W_t * fit_t(w) / sum W`` over the bounded simplex (SLSQP from every start;
    the best result, or the best start if SLSQP improves on none)."""
    total = sum(target_weights.values())

    def objective(w):
        return float(sum(target_weights[n] * f.predict(w)[0] for n, f in fits.items()) / total)

    best_w, best_v = None, math.inf
    cons = [{"type": "eq", "fun": lambda w: float(np.sum(w) - 1.0)}]
    for x0 in starts:
        v0 = objective(x0)
        if v0 < best_v:
            best_w, best_v = np.asarray(x0, dtype=np.float64), v0
        r = optimize.minimize(objective, x0, method="SLSQP", bounds=list(zip(lo, hi)), constraints=cons,
                              options={"maxiter": 500, "ftol": 1e-12})
        w = project(r.x, lo, hi)  # SLSQP may end a hair outside the bounds
        v = objective(w)
        if v < best_v - 1e-12:
            best_w, best_v = w, v
    return best_w, best_v
