"""The search's fits: the separable power law recovers a planted law from few proxies, and the choice between
fits treats LOO Spearman values within 0.02 as tied and then prefers the lower LOO RMSE."""

from __future__ import annotations

import numpy as np

from cuvee.mixsearch.fit import FITS, POWER_EPS, SPEARMAN_TOL, choose, fit_target, loo


def _planted(n_mix: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(3), size=n_mix)
    k, a, c = np.array([0.3, 0.1, 0.2]), 0.4, 2.0
    y = c + ((w + POWER_EPS) ** -a * k).sum(1) + rng.normal(0, 0.005, n_mix)
    return w, y


def test_powerlaw_recovers_a_planted_power_law_from_ten_proxies():
    w, y = _planted(10)
    r = fit_target(w, y)
    assert "powerlaw" in FITS and r["chosen"] == "powerlaw", {k: (v["loo_spearman"], v["loo_rmse"])
                                                               for k, v in r["fits"].items()}
    s = loo("powerlaw", w, y)
    assert s["loo_spearman"] > 0.95 and s["loo_rmse"] < 0.05
    assert r["spearman_tol"] == SPEARMAN_TOL == 0.02


def _scores(**kv):
    return {k: {"loo_spearman": rho, "loo_rmse": rmse} for k, (rho, rmse) in kv.items()}


def test_choice_prefers_lower_rmse_within_the_spearman_tolerance():
    assert choose(_scores(loglinear=(0.90, 1.0), powerlaw=(0.885, 0.5))) == "powerlaw"
    assert choose(_scores(loglinear=(0.90, 1.0), powerlaw=(0.87, 0.5))) == "loglinear"
    assert choose(_scores(ridge=(float("nan"), 0.1), separable=(0.2, 0.9))) == "separable"
    assert choose(_scores(ridge=(0.5, 0.3), separable=(0.5, 0.3))) == "ridge"  # full tie: the first listed


def test_a_fit_that_cannot_rank_the_proxies_is_a_warning_in_the_report():
    from cuvee.mixsearch.report import render_markdown
    from cuvee.mixsearch.search import _weak_fits

    rng = np.random.default_rng(3)  # noise that no fit ranks (with seeds 1 and 2 the best of four reaches 0.6)
    w = rng.dirichlet(np.ones(3), size=10)
    fits = {"noise": fit_target(w, rng.normal(3.0, 0.01, 10)), "law": fit_target(*_planted(10))}
    warnings = _weak_fits(fits)
    assert len(warnings) == 1 and warnings[0].startswith("target noise: the best fit") and "not supported" in warnings[0]
    proxy = {"tokens": 1, "params": 1, "steps": 1, "weights": [0.2, 0.3, 0.5], "wall_s": 1.0, "cpu_s": 1.0,
             "targets": {"noise": {"value": 3.0}, "law": {"value": 3.0}}}
    report = {"name": "s", "plan": {"sources": ["a", "b", "c"], "available_tokens": [1, 1, 1], "lo": [0] * 3,
                                    "hi": [1] * 3, "natural": [1 / 3] * 3, "uniform": [1 / 3] * 3, "kinds": ["natural"]},
              "config": {"targets": [{"name": "noise", "weight": 1}, {"name": "law", "weight": 1}]},
              "proxies": [proxy], "fits": fits, "warnings": warnings, "verdicts": {}, "proof": {},
              "pick": {"weights": {"a": 0.2, "b": 0.3, "c": 0.5}, "predicted": 3.0, "mix_yaml": "x",
                       "supported": False, "not_supported_because": warnings},
              "decontamination": {"targets": {}}}
    md = render_markdown(report)
    assert f"**Warning:** {warnings[0]}" in md and md.index("**Warning:**") < md.index("## Pick")
    assert "within 0.02 of the best, the lowest LOO RMSE" in md


def test_a_fit_whose_error_blows_up_is_diverged_in_the_table_and_not_chosen():
    """Issue #37: a log-linear refit that blew up printed its LOO RMSE as 1.64e+21. Diverged means: a LOO error
    that is not finite or above DIVERGED_SPREAD times the range of the measured losses; the table says
    "diverged" (with the definition under it) and the choice passes over it while another fit is usable."""
    from cuvee.mixsearch.fit import DIVERGED_SPREAD, diverged
    from cuvee.mixsearch.report import render_markdown

    y = np.array([3.0, 3.2, 3.1, 3.4])
    assert DIVERGED_SPREAD == 10 and not diverged(3.99, y) and diverged(4.01, y)  # 10 x the range 0.4
    assert diverged(float("inf"), y) and diverged(float("nan"), y) and not diverged(0.0, y)
    scores = _scores(loglinear=(0.95, 1.64e21), ridge=(0.6, 0.2))
    scores["loglinear"]["diverged"] = True
    assert choose(scores) == "ridge"  # the best Spearman, but diverged
    scores["ridge"]["diverged"] = True
    assert choose(scores) == "loglinear"  # every fit diverged: the choice still names one (and the pick is refused)
    fits = {"docs": {"chosen": "ridge", "spearman_tol": SPEARMAN_TOL, "fits": {
        "loglinear": {"loo_spearman": 0.95, "loo_rmse": 1.64e21, "loo_mae": 4.1e20, "diverged": True},
        "ridge": {"loo_spearman": 0.6, "loo_rmse": 0.2, "loo_mae": 0.1, "diverged": False}}}}
    proxy = {"tokens": 1, "params": 1, "steps": 1, "weights": [0.5, 0.5], "wall_s": 1.0, "cpu_s": 1.0,
             "targets": {"docs": {"value": 3.0}}}
    md = render_markdown({"name": "s", "plan": {"sources": ["a", "b"], "available_tokens": [1, 1], "lo": [0] * 2,
                                                "hi": [1] * 2, "natural": [0.5] * 2, "uniform": [0.5] * 2,
                                                "kinds": ["natural"]},
                          "config": {"targets": [{"name": "docs", "weight": 1}]}, "proxies": [proxy], "fits": fits,
                          "warnings": [], "verdicts": {}, "proof": {}, "transfer": None, "decontamination": {"targets": {}},
                          "pick": {"weights": {"a": 0.5, "b": 0.5}, "predicted": 3.0, "mix_yaml": "x",
                                   "supported": True, "not_supported_because": []}})
    assert "| docs | loglinear | 0.950 | diverged | diverged |  |" in md and "e+21" not in md and "e+20" not in md
    assert "| docs | ridge | 0.600 | 0.2 | 0.1 | yes |" in md
    assert f"RMSE exceeds {DIVERGED_SPREAD:g} times the range of the proxies' measured values" in md


def test_a_real_log_linear_blow_up_is_flagged_by_loo():
    """Five proxies of the bundled demo (search_demo.yaml: three corners and two blends; their measured bits per
    byte on heldout_docs_forums): left out, a corner is extrapolated to ~1e42 by the log-linear law."""
    w = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.16, 0.04, 0.8], [0.6681, 0.0007, 0.3312],
                  [0.1587, 0.1779, 0.6634]])
    y = np.array([4.06492, 4.07799, 4.07341, 4.09767, 4.10242])
    s = loo("loglinear", w, y)
    assert s["loo_rmse"] > 1e20 and s["diverged"]
    assert not loo("ridge", w, y)["diverged"]
