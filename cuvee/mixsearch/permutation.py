"""A permutation test of the fit choice: could the best leave-one-out Spearman among the fit families have come
from proxies whose losses do not depend on their weights at all?

The search picks, per target, the fit whose LOO Spearman is (near) best among four families, so the chosen
fit's score is the maximum of four noisy scores. The test refits every family on ``B`` permutations of the
proxies' measured losses (the weights stay put; seeded, so a rerun gives the same p) and compares the
*selection statistic* -- the maximum over the families of the LOO Spearman -- with its value on the real
losses: ``p = (1 + #{perm >= observed}) / (B + 1)`` (never 0; a Monte Carlo p-value that is exact for any B).

Cost, and what is refitted. One leave-one-out pass of the nonlinear fits of cuvee/mixsearch/fit.py takes 3 to
30 s per family at 16 proxies (measured on a busy 2-core CPU), i.e. hours for B = 200. So the statistic is
computed -- on the real losses and on every permutation alike, which keeps the test exact -- with each family's
linear-in-parameters core, every leave-one-out refit of every permutation done at once as matrix products
(B = 200, all four families: 0.2 s at 16 proxies, 0.6 s at 32 on the same CPU):

``ridge``       identical to fit.py's (penalty re-chosen by inner LOO error inside every LOO refit);
``loglinear``   the law's log-linear start: least squares of ``log(y - c0)`` on the weights, ``c0`` one of
                the three offsets fit.py starts from, the one with the smallest squared error kept;
``separable``   ``c + sum_j k_j exp(-t w_j)`` with one rate ``t`` shared by the sources, from a grid;
``powerlaw``    ``c + sum_j k_j (w_j + eps)^-a`` on fit.py's grid of ``a``, coefficients unconstrained.

The observed statistic is therefore not the chosen fit's own LOO Spearman (both are reported); a target whose
losses only the polished nonlinear fits can rank gets a larger p here -- the test errs towards "not supported".
"""

from __future__ import annotations

import numpy as np

from cuvee.mixsearch.families import POWER_EPS, POWER_EXPONENTS, RIDGE_ALPHAS, features

PERMUTATIONS = 200
SIGNIFICANCE = 0.05  # a search warns when the fit choice's p is above this
SEPARABLE_RATES = np.geomspace(0.3, 30.0, 15)
LOGLINEAR_OFFSETS = (0.0, 0.5, 0.9)  # c0 = frac * min(y), as fit.py's loglinear starts


def _spearman_rows(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``pred`` with the same row of ``y`` (NaN where either is constant)."""
    from scipy.stats import rankdata

    rp, ry = rankdata(pred, axis=1), rankdata(y, axis=1)
    rp -= rp.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    den = np.sqrt((rp ** 2).sum(1) * (ry ** 2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rp * ry).sum(1) / den
    return np.where(den > 1e-12, rho, np.nan)


def _operators(x: np.ndarray, xi: np.ndarray, alpha: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """For least squares (ridge with penalty ``alpha``, intercept unpenalised) on design ``x``: the hat matrix
    and the prediction row of the held-out point ``xi``, both linear maps of the responses."""
    xm = np.column_stack([x, np.ones(len(x))])
    reg = alpha * np.eye(xm.shape[1])
    reg[-1, -1] = 0.0
    proj = np.linalg.pinv(xm.T @ xm + reg) @ xm.T
    return xm @ proj, np.append(xi, 1.0) @ proj


def _grid_loo(designs: list[np.ndarray], ys: np.ndarray, inner_loo: bool = False,
              standardize: bool = False, alphas=(0.0,)) -> np.ndarray:
    """LOO predictions (rows of ``ys`` = permutations) of least squares on a grid of designs: within each refit
    the grid point with the lowest in-sample SSE (or, ``inner_loo``, the lowest inner LOO error) is used."""
    b, n = ys.shape
    pred = np.empty((b, n))
    for i in range(n):
        m = np.arange(n) != i
        ysub = ys[:, m]
        best_err, best_pred = np.full(b, np.inf), np.zeros(b)
        for x in designs:
            xs, xi = x[m], x[i]
            if standardize:
                mean, scale = xs.mean(0), xs.std(0)
                scale = np.where(scale > 1e-12, scale, 1.0)
                xs, xi = (xs - mean) / scale, (xi - mean) / scale
            for alpha in alphas:
                hat, row = _operators(xs, xi, alpha)
                resid = ysub - ysub @ hat.T
                if inner_loo:
                    resid = resid / np.maximum(1 - np.diag(hat), 1e-9)
                err = (resid ** 2).mean(1)
                better = err < best_err - 1e-15
                best_err = np.where(better, err, best_err)
                best_pred = np.where(better, ysub @ row, best_pred)
        pred[:, i] = best_pred
    return pred


def _loglinear_loo(w: np.ndarray, ys: np.ndarray) -> np.ndarray:
    b, n = ys.shape
    pred = np.empty((b, n))
    for i in range(n):
        m = np.arange(n) != i
        ysub = ys[:, m]
        hat, row = _operators(w[m], w[i])
        best_err, best_pred = np.full(b, np.inf), np.zeros(b)
        for frac in LOGLINEAR_OFFSETS:
            c0 = frac * ysub.min(1, keepdims=True)
            z = np.log(np.maximum(ysub - c0, 1e-9))
            fitted = c0 + np.exp(np.clip(z @ hat.T, -50, 50))
            err = ((fitted - ysub) ** 2).mean(1)
            better = err < best_err - 1e-15
            best_err = np.where(better, err, best_err)
            best_pred = np.where(better, c0[:, 0] + np.exp(np.clip(z @ row, -50, 50)), best_pred)
        pred[:, i] = best_pred
    return pred


def family_loo(w: np.ndarray, ys: np.ndarray) -> dict[str, np.ndarray]:
    """LOO predictions of each family's linear core for every row of ``ys`` (see the module docstring)."""
    return {
        "loglinear": _loglinear_loo(w, ys),
        "separable": _grid_loo([np.exp(-w * t) for t in SEPARABLE_RATES], ys),
        "powerlaw": _grid_loo([(w + POWER_EPS) ** -a for a in POWER_EXPONENTS], ys),
        "ridge": _grid_loo([features(w)], ys, inner_loo=True, standardize=True, alphas=RIDGE_ALPHAS),
    }


def selection_statistic(w: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Per row of ``ys``: the largest LOO Spearman over the families (a family that cannot rank counts -1)."""
    rhos = np.stack([_spearman_rows(p, ys) for p in family_loo(w, ys).values()])
    return np.nanmax(np.where(np.isnan(rhos), -1.0, rhos), axis=0)


def permutation_test(w: np.ndarray, y: np.ndarray, permutations: int = PERMUTATIONS, seed: int = 0) -> dict:
    """The selection statistic on the real losses against ``permutations`` shuffles of them (seeded)."""
    w, y = np.asarray(w, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ys = np.vstack([y, rng.permuted(np.tile(y, (permutations, 1)), axis=1)])
    stat = selection_statistic(w, ys)
    observed, null = float(stat[0]), stat[1:]
    exceed = int(np.sum(null >= observed - 1e-12))
    return {"statistic": "max over families of LOO Spearman (linear cores, see cuvee/mixsearch/permutation.py)",
            "observed": observed, "permutations": permutations, "seed": seed, "exceed": exceed,
            "p_value": (1 + exceed) / (permutations + 1), "null_p95": float(np.quantile(null, 0.95)),
            "null_mean": float(np.mean(null))}
