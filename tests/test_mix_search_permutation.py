"""The permutation test of the search's fit choice: small p on a planted law, roughly uniform p on noise, the
selection among fits counted (the null is the best of the families), deterministic, and in the warnings and
the report."""

from __future__ import annotations

import numpy as np

from cuvee.mixsearch.fit import loo
from cuvee.mixsearch.permutation import SIGNIFICANCE, family_loo, permutation_test, selection_statistic


def _weights(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(3), size=n)


def test_a_planted_linear_law_gets_a_small_p():
    w = _weights(16, 0)
    y = 3.0 + w @ np.array([0.3, -0.2, 0.1]) + np.random.default_rng(1).normal(0, 0.01, 16)
    r = permutation_test(w, y, permutations=200, seed=0)
    assert r["p_value"] < 0.02 and r["exceed"] == 0 and r["observed"] > 0.9, r
    assert r["p_value"] == 1 / 201  # never 0: (1 + exceed) / (B + 1)
    assert r["null_p95"] < r["observed"]


def test_pure_noise_gets_roughly_uniform_p():
    ps = []
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        ps.append(permutation_test(_weights(12, seed), rng.normal(3.0, 0.01, 12), permutations=200, seed=seed)["p_value"])
    ps = np.array(ps)
    assert np.mean(ps <= SIGNIFICANCE) <= 0.15, ps  # ~5 % expected under the null
    assert 0.3 < ps.mean() < 0.7 and ps.max() > 0.8 and ps.min() < 0.3, ps


def test_the_null_is_the_best_of_the_families_not_one_family():
    """On noise the max over four families sits above any single family's LOO Spearman: the selection is what
    the p accounts for (comparing the chosen fit's score with one family's null would be too optimistic)."""
    w, rng = _weights(14, 5), np.random.default_rng(7)
    ys = rng.normal(3.0, 0.01, (200, 14))
    best = selection_statistic(w, ys)
    from cuvee.mixsearch.permutation import _spearman_rows

    for name, pred in family_loo(w, ys).items():
        single = np.nan_to_num(_spearman_rows(pred, ys), nan=-1.0)
        assert np.all(best >= single - 1e-12) and np.quantile(best, 0.95) > np.quantile(single, 0.95), name


def test_ridge_in_the_null_is_the_search_fits_own_ridge():
    w = _weights(10, 2)
    y = 3.0 + np.random.default_rng(3).normal(0, 0.02, 10) + w[:, 0] * 0.1
    ours = family_loo(w, y[None, :])["ridge"][0]
    assert np.allclose(ours, loo("ridge", w, y)["loo_predictions"], atol=1e-8)


def test_the_test_is_seeded_and_deterministic():
    w, y = _weights(12, 4), np.random.default_rng(9).normal(3.0, 0.01, 12)
    a, b = permutation_test(w, y, 100, seed=3), permutation_test(w, y, 100, seed=3)
    assert a == b
    others = {permutation_test(w, y, 100, seed=s)["exceed"] for s in range(4, 9)}
    assert len(others | {a["exceed"]}) > 1  # the seed does choose the shuffles


def _fits(rho: float, p: float) -> dict:
    return {"chosen": "ridge", "spearman_tol": 0.02,
            "fits": {"ridge": {"loo_spearman": rho, "loo_rmse": 0.1, "loo_mae": 0.1}},
            "permutation": {"observed": rho, "p_value": p, "null_p95": 0.55, "permutations": 200, "seed": 0,
                            "exceed": int(p * 201) - 1}}


def test_a_choice_noise_matches_is_a_warning_even_with_a_good_looking_rho():
    from cuvee.mixsearch.search import _weak_fits

    warnings = _weak_fits({"fine": _fits(0.8, 0.005), "lucky": _fits(0.62, 0.2), "weak": _fits(0.3, 0.01),
                           "both": _fits(0.3, 0.4)})
    assert [w.split(":")[0] for w in warnings] == ["target lucky", "target weak", "target both"]
    assert "0.62, but shuffled losses score as well (permutation p 0.200 > 0.05, 200 shuffles)" in warnings[0]
    assert "0.30 < 0.5: the pick" in warnings[1]
    assert "0.30 < 0.5, and shuffled losses score as well (permutation p 0.400" in warnings[2]
    assert all("not supported" in w for w in warnings)


def test_the_report_and_the_pick_carry_the_test(tmp_path):
    from cuvee.mixsearch.report import chosen_by, render_markdown

    fits = {"docs": _fits(0.62, 0.2)}
    proxy = {"tokens": 1, "params": 1, "steps": 1, "weights": [0.5, 0.5], "wall_s": 1.0, "cpu_s": 1.0,
             "targets": {"docs": {"value": 3.0}}}
    report = {"name": "s", "plan": {"sources": ["a", "b"], "available_tokens": [1, 1], "lo": [0] * 2, "hi": [1] * 2,
                                    "natural": [0.5] * 2, "uniform": [0.5] * 2, "kinds": ["natural"]},
              "config": {"targets": [{"name": "docs", "weight": 1}]}, "proxies": [proxy], "fits": fits,
              "warnings": [], "verdicts": {}, "proof": {}, "transfer": None,
              "pick": {"weights": {"a": 0.5, "b": 0.5}, "predicted": 3.0, "mix_yaml": "x", "supported": True,
                       "not_supported_because": []},
              "decontamination": {"targets": {}}}
    md = render_markdown(report)
    assert "| docs | 0.620 | 0.620 | 0.550 | 200 (seed 0) | 0.200 |" in md
    assert md.index("Permutation test of the choice") > md.index("## Fits")
    assert chosen_by(report, tmp_path)["fits"]["docs"]["permutation_p"] == 0.2
