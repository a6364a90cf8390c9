"""What defines each fit family's shape, shared by the nonlinear fits (fit.py) and the permutation test's linear
cores (permutation.py): both must refit the same families, so their constants and features live here, once."""

from __future__ import annotations

import numpy as np

POWER_EPS = 0.01  # powerlaw: what the other sources transfer when source j is absent, (w_j + eps)^-a
POWER_EXPONENTS = np.geomspace(0.02, 4.0, 41)  # the grid over the shared exponent a (then polished)
RIDGE_ALPHAS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def features(w: np.ndarray) -> np.ndarray:
    """The ridge's design: the weights and their pairwise products (RegMix)."""
    n = w.shape[1]
    pairs = [w[:, i] * w[:, j] for i in range(n) for j in range(i, n)]
    return np.column_stack([w, *pairs]) if pairs else w
