"""Paired anneal verdicts (cuvee.train.verdict): t quantiles, calibration under the null, power under a
planted effect, "inconclusive" (never "no difference") when underpowered, MDE falling with more seeds."""

import itertools
import math

import numpy as np
import pytest

from cuvee.train.verdict import (
    BETTER,
    EQUIVALENT,
    INCONCLUSIVE,
    WORSE,
    compare,
    components,
    mde,
    t_ppf,
    t_sf,
)


def synthetic(rng, n_seeds, n_docs, effect=0.0, seed_sd=0.02, doc_sd=0.02, inter_sd=0.05):
    """Per-document losses of two paired arms: shared document difficulty, plus a control-minus-candidate
    difference = effect + seed noise + document-specific (mean 0) effect + seed x document noise."""
    base = rng.gamma(4.0, 1.0, (1, n_docs)) + rng.normal(0, 0.3, (n_seeds, n_docs))
    diff = (effect + rng.normal(0, seed_sd, (n_seeds, 1)) + rng.normal(0, doc_sd, (1, n_docs))
            + rng.normal(0, inter_sd, (n_seeds, n_docs)))
    return base, base + diff


def test_t_distribution_matches_tables():
    assert t_ppf(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_ppf(0.975, 3) == pytest.approx(3.1824, abs=1e-4)
    assert t_ppf(0.8, 10) == pytest.approx(0.8791, abs=1e-4)
    assert t_ppf(0.975, math.inf) == pytest.approx(1.95996, abs=1e-4)
    assert t_sf(0.0, 5) == pytest.approx(0.5) and t_sf(-2.0, 4) == pytest.approx(1 - t_sf(2.0, 4))


def test_underpowered_two_seeds_tiny_effect_is_inconclusive_with_a_plan():
    rng = np.random.default_rng(1)
    cand, ctrl = synthetic(rng, 2, 40, effect=0.002, seed_sd=0.05, inter_sd=0.2)
    v = compare(cand, ctrl, margin=0.001)
    assert v.verdict == INCONCLUSIVE  # never "no difference" from a wide interval
    assert v.ci95[0] < -0.001 or v.ci95[1] > 0.001
    assert v.mde > abs(v.effect)
    assert (v.seeds_needed or 0) > 2 or (v.docs_needed or 0) > 40
    assert "MDE" in v.reason


def test_clear_planted_effect_is_detected_both_ways():
    rng = np.random.default_rng(2)
    cand, ctrl = synthetic(rng, 3, 60, effect=0.1)
    v = compare(cand, ctrl)
    assert v.verdict == BETTER and v.ci95[0] > 0 and v.p_value < 0.05 and v.seeds_candidate_better == 3
    assert compare(ctrl, cand).verdict == WORSE


def test_four_of_four_seeds_consistent_effect_is_found():
    # the user's case: A beat B in 4 of 4 seeds by a consistent margin the old 2-seed unpaired rule missed
    rng = np.random.default_rng(3)
    cand, ctrl = synthetic(rng, 4, 100, effect=0.01, seed_sd=0.002, doc_sd=0.005, inter_sd=0.02)
    v = compare(cand, ctrl)
    assert v.seeds_candidate_better == 4 and v.verdict == BETTER


def test_equivalence_only_from_a_narrow_interval():
    rng = np.random.default_rng(4)
    cand, ctrl = synthetic(rng, 5, 400, effect=0.0, seed_sd=0.001, doc_sd=0.001, inter_sd=0.005)
    v = compare(cand, ctrl, margin=0.01)
    assert v.verdict == EQUIVALENT and -0.01 < v.ci95[0] and v.ci95[1] < 0.01
    assert compare(cand, ctrl).verdict == INCONCLUSIVE  # no margin stated: no equivalence claim


def test_null_calibration_false_verdict_rate_near_alpha():
    rng = np.random.default_rng(5)
    reps, false = 500, 0
    for _ in range(reps):
        cand, ctrl = synthetic(rng, 3, 30)
        false += compare(cand, ctrl).verdict in (BETTER, WORSE)
    assert false / reps <= 0.10  # nominal 5 %; ~4-7 % observed


def test_power_against_planted_effect():
    rng = np.random.default_rng(6)
    hits = sum(compare(*synthetic(rng, 4, 60, effect=0.08)).verdict == BETTER for _ in range(100))
    assert hits >= 75


def test_mde_decreases_with_more_seeds_and_documents():
    rng = np.random.default_rng(7)
    comp = components(np.asarray(
        compare(*synthetic(rng, 3, 50)).per_seed_effect)[:, None] + rng.normal(0, 0.05, (3, 50)))
    by_seeds = [mde(comp, n, 50) for n in (2, 3, 5, 10, 40)]
    assert all(a > b for a, b in itertools.pairwise(by_seeds))
    assert mde(comp, 3, 5000) < mde(comp, 3, 50)


def test_weights_give_the_corpus_ratio_and_bits():
    cand = np.array([[10.0, 30.0], [12.0, 28.0]])  # nats per document
    ctrl = np.array([[11.0, 33.0], [13.0, 31.0]])
    w = np.array([10.0, 30.0])  # bytes
    v = compare(cand, ctrl, weights=w, scale=1 / math.log(2))
    per_seed = [(4.0 / 40) / math.log(2), (4.0 / 40) / math.log(2)]
    assert v.per_seed_effect == pytest.approx(per_seed) and v.effect == pytest.approx(np.mean(per_seed))


def test_one_seed_is_never_a_verdict():
    v = compare(np.zeros((1, 10)), np.ones((1, 10)))
    assert v.verdict == INCONCLUSIVE and "seed" in v.reason


def test_inconclusive_plans_are_consistent():
    # the reason never claims "MDE > target" unless it is so, and a plan always asks for more than there is
    import re

    rng = np.random.default_rng(8)
    seen = 0
    for i in range(60):
        n = 2 + i % 4
        v = compare(*synthetic(rng, n, 40, effect=0.01, seed_sd=0.01), margin=0.02)
        if v.verdict != INCONCLUSIVE:
            continue
        seen += 1
        m = re.search(r"MDE\(80 % power\) = (\S+) > (\S+);", v.reason)
        if m:
            assert float(m.group(1)) > float(m.group(2))
            assert v.seeds_needed is None or v.seeds_needed > n
            assert v.docs_needed is None or v.docs_needed > 40
        else:
            assert "already below" in v.reason and v.mde <= abs(v.effect) + 1e-12
    assert seen >= 10


# ---- independent expectations: quadrature of the t density, the two-way ANOVA closed form, properties -----------
def _t_sf_by_quadrature(t: float, df: float) -> float:
    """P(T > t) integrated from Student's density written out (a second implementation, not scipy.stats.t)."""
    from scipy import integrate

    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    tail = integrate.quad(lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2), abs(t), math.inf, epsabs=1e-13,
                          epsrel=1e-11)[0]
    return tail if t >= 0 else 1 - tail


@pytest.mark.parametrize("t,df", [(0.5, 1), (2.0, 2), (2.5, 3.7), (-1.3, 5), (4.0, 10.5), (3.0, 30), (10.0, 2.2)])
def test_t_tail_and_quantile_agree_with_the_integrated_density(t, df):
    assert t_sf(t, df) == pytest.approx(_t_sf_by_quadrature(t, df), rel=1e-7, abs=1e-12)
    for q in (0.025, 0.8, 0.975, 0.99):
        assert t_sf(t_ppf(q, df), df) == pytest.approx(1 - q, rel=1e-9)  # the quantile inverts the tail


def test_above_a_million_degrees_of_freedom_the_tail_is_the_normal_one():
    for t in (0.3, 1.96, 3.5):
        assert t_sf(t, 1e7) == pytest.approx(0.5 * math.erfc(t / math.sqrt(2)), rel=1e-12)
        assert t_sf(t, math.inf) == t_sf(t, 1e7)


def _anova_expectation(cand, ctrl, w, scale):
    """Effect, SE, df, p and 95 % interval of the documented design, from the two-way ANOVA mean squares.

    Per seed the corpus ratio d_s = scale * (sum ctrl_s - sum cand_s) / sum w; per document the linearised
    difference z_si = (u_si - effect w_i) / mean(w) + effect. Crossed random effects (seed, document): the grand
    mean's variance is (MS_seed + MS_doc - MS_residual) / (n m) (floored at max(MS_seed, MS_doc) / (2 n m), as
    documented), with Satterthwaite's degrees of freedom for that combination of mean squares."""
    from scipy import stats

    u = scale * (ctrl - cand)
    d = u.sum(1) / w.sum()
    effect = d.mean()
    z = (u - effect * w) / w.mean() + effect
    n, m = z.shape
    grand, rows, cols = z.mean(), z.mean(1), z.mean(0)
    ms_seed = m * ((rows - grand) ** 2).sum() / (n - 1)
    ms_doc = n * ((cols - grand) ** 2).sum() / (m - 1)
    ms_res = ((z - rows[:, None] - cols[None, :] + grand) ** 2).sum() / ((n - 1) * (m - 1))
    var = (ms_seed + ms_doc - ms_res) / (n * m)
    floored = var < max(ms_seed, ms_doc) / (2 * n * m)
    var = max(var, max(ms_seed, ms_doc) / (2 * n * m))
    den = ((ms_seed / (n * m)) ** 2 / (n - 1) + (ms_doc / (n * m)) ** 2 / (m - 1)
           + (ms_res / (n * m)) ** 2 / ((n - 1) * (m - 1)))
    se, df = math.sqrt(var), max(1.0, var * var / den)
    q = stats.t.ppf(0.975, df)
    return {"effect": effect, "per_seed": d, "se": se, "df": df, "p": 2 * stats.t.sf(abs(effect) / se, df),
            "ci95": (effect - q * se, effect + q * se), "mde": (q + stats.t.ppf(0.8, df)) * se, "floored": floored}


def _paired(seed, n_seeds, n_docs, shift, noise, seed_noise=0.0):
    """Summed nats per document of two paired arms: the candidate ``shift`` nats per byte better, with
    per-document and per-seed noise; ``w`` the documents' bytes."""
    rng = np.random.default_rng(seed)
    w = rng.integers(200, 2000, n_docs).astype(float)
    ctrl = rng.normal(1.0, 0.1, (n_seeds, n_docs)) * w
    cand = ctrl - shift * w + rng.normal(0, noise, (n_seeds, n_docs)) * w + rng.normal(0, seed_noise, (n_seeds, 1)) * w
    return cand, ctrl, w


# detected (floored or not), inconclusive (floored or not): see the next test
CASES = [(22, 2, 40, 0.004, 0.01), (24, 2, 40, 0.004, 0.01), (26, 3, 40, 0.004, 0.01, 0.001),
         (32, 3, 60, 0.0005, 0.02, 0.0005)]


@pytest.mark.parametrize("case", CASES)
def test_compare_is_the_two_way_anova_closed_form(case):
    cand, ctrl, w = _paired(*case)
    scale = 1 / math.log(2)
    want = _anova_expectation(cand, ctrl, w, scale)
    v = compare(cand, ctrl, weights=w, scale=scale)
    assert v.effect == pytest.approx(want["effect"], rel=1e-12)
    assert v.per_seed_effect == pytest.approx(list(want["per_seed"]), rel=1e-12)
    assert v.se == pytest.approx(want["se"], rel=1e-10) and v.df == pytest.approx(want["df"], rel=1e-10)
    assert v.p_value == pytest.approx(want["p"], rel=1e-8)
    assert v.ci95 == pytest.approx(want["ci95"], rel=1e-9) and v.ci == pytest.approx(want["ci95"], rel=1e-9)
    assert v.mde == pytest.approx(want["mde"], rel=1e-9)
    lo, hi = want["ci95"]
    assert v.verdict == (BETTER if lo > 0 else WORSE if hi < 0 else INCONCLUSIVE)
    assert v.seeds_candidate_better == int((want["per_seed"] > 0).sum())


def test_the_closed_form_cases_cover_the_floor_and_both_verdicts():
    """The cases above are not all alike: one is floored, one detected, one inconclusive."""
    got = [(v.verdict, want["floored"]) for v, want in
           ((compare(c, k, weights=w), _anova_expectation(c, k, w, 1.0)) for c, k, w in map(lambda x: _paired(*x), CASES))]
    assert got == [(BETTER, False), (BETTER, True), (INCONCLUSIVE, False), (INCONCLUSIVE, True)]


def test_seeds_and_documents_needed_are_the_smallest_that_reach_the_target():
    from cuvee.train.verdict import paired_differences

    cand, ctrl, w = _paired(*CASES[2])
    v = compare(cand, ctrl, weights=w, margin=0.001)
    assert v.verdict == INCONCLUSIVE and v.seeds_needed and v.docs_needed
    comp = components(paired_differences(cand, ctrl, w)[0])
    target = max(t for t in (abs(v.effect), 0.001) if t < v.mde)  # the larger of effect and margin not reached
    assert mde(comp, v.seeds_needed, 40) < target <= mde(comp, v.seeds_needed - 1, 40)
    assert mde(comp, 3, v.docs_needed) < target <= mde(comp, 3, v.docs_needed - 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_swapping_the_arms_mirrors_the_verdict(seed):
    cand, ctrl, w = _paired(seed, 3, 50, 0.01 * seed, 0.02)
    a, b = compare(cand, ctrl, weights=w), compare(ctrl, cand, weights=w)
    assert b.effect == pytest.approx(-a.effect) and b.ci95 == pytest.approx((-a.ci95[1], -a.ci95[0]))
    assert b.p_value == pytest.approx(a.p_value) and b.se == pytest.approx(a.se) and b.df == pytest.approx(a.df)
    assert b.verdict == {BETTER: WORSE, WORSE: BETTER, INCONCLUSIVE: INCONCLUSIVE}[a.verdict]
    assert b.seeds_candidate_better == 3 - a.seeds_candidate_better


def test_what_both_arms_share_changes_nothing():
    """Document difficulty and seed-level offsets common to both arms cancel in a paired comparison."""
    rng = np.random.default_rng(4)
    cand, ctrl, w = _paired(4, 4, 30, 0.01, 0.03)
    per_doc = rng.normal(0, 50, (1, 30))
    per_seed = rng.normal(0, 80, (4, 1))
    base = compare(cand, ctrl, weights=w)
    for extra in (per_doc, per_seed, per_doc + per_seed):
        v = compare(cand + extra, ctrl + extra, weights=w)
        assert v.effect == pytest.approx(base.effect, rel=1e-8) and v.ci95 == pytest.approx(base.ci95, rel=1e-8)
        assert v.p_value == pytest.approx(base.p_value, rel=1e-8) and v.se == pytest.approx(base.se, rel=1e-8)
        assert compare(cand + extra, ctrl + extra, weights=w).verdict == base.verdict


def test_scaling_both_arms_scales_the_effect_and_keeps_the_p_value():
    cand, ctrl, w = _paired(5, 3, 40, 0.01, 0.02)
    a, b = compare(cand, ctrl, weights=w), compare(7.0 * cand, 7.0 * ctrl, weights=w)
    assert b.effect == pytest.approx(7 * a.effect) and b.se == pytest.approx(7 * a.se)
    assert b.ci95 == pytest.approx((7 * a.ci95[0], 7 * a.ci95[1])) and b.mde == pytest.approx(7 * a.mde)
    assert b.p_value == pytest.approx(a.p_value) and b.df == pytest.approx(a.df) and b.verdict == a.verdict


def test_a_larger_effect_on_the_same_noise_is_never_less_significant():
    """A planted shift delta (per byte) moves the effect by exactly delta and leaves the noise as it was, so p
    falls monotonically as the effect grows away from 0 and the verdict turns "better" once and stays."""
    cand, ctrl, w = _paired(6, 3, 40, 0.0, 0.02)
    base = compare(cand, ctrl, weights=w)
    ps, verdicts = [], []
    for delta in np.linspace(0, 0.05, 11):
        v = compare(cand - delta * w, ctrl, weights=w)
        assert v.effect == pytest.approx(base.effect + delta, abs=1e-12)
        assert v.se == pytest.approx(base.se, rel=1e-9) and v.df == pytest.approx(base.df, rel=1e-9)
        if v.effect > 0:
            ps.append(v.p_value)
        verdicts.append(v.verdict)
    assert all(a >= b for a, b in itertools.pairwise(ps)) and ps[-1] < ps[0]
    first = verdicts.index(BETTER)
    assert set(verdicts[first:]) == {BETTER} and BETTER not in verdicts[:first]


def test_an_inconclusive_reason_says_what_was_measured_not_that_the_effect_is_zero():
    """Issue #37: +0.098 with 4 of 4 seeds favouring the candidate was explained as "the effect is ~0". The
    reason now gives the effect, the seeds, the interval and the p-value, and when neither more seeds alone nor
    more documents alone would reach the MDE it says so with the MDE each leaves, and a design growing both."""
    import re

    rng = np.random.default_rng(2)
    base = rng.gamma(4, 1, (1, 30)) + rng.normal(0, 0.3, (4, 30))
    ctrl = base + 0.1 + rng.normal(0, 0.05, (4, 1)) + rng.normal(0, 0.4, (1, 30)) + rng.normal(0, 0.05, (4, 30))
    v = compare(base, ctrl)
    assert v.verdict == INCONCLUSIVE and v.seeds_candidate_better == 4 and 0.09 < v.effect < 0.11
    assert v.seeds_needed is None and v.docs_needed is None  # the case the old text called "~0"
    assert "~0" not in v.reason
    assert v.reason.startswith(f"effect {v.effect:+.3g} (4/4 seeds favour the candidate) is not significant: "
                               f"95 % CI [{v.ci[0]:+.4g}, {v.ci[1]:+.4g}] includes 0 (p = {v.p_value:.2g} >= 0.05")
    from cuvee.train.verdict import paired_differences

    comp = components(paired_differences(base, ctrl)[0])
    m = re.search(r"with 1,000 seeds the eval-document noise keeps the MDE at (\S+)\) nor more eval documents alone "
                  r"\(with 10,000,000 the seed noise keeps it at (\S+)\) brings the MDE below (\S+): both are needed, "
                  r"e\.g\. (\d+) seeds and (\d+) eval documents", v.reason)
    assert m, v.reason
    at_seeds, at_docs, target = float(m.group(1)), float(m.group(2)), float(m.group(3))
    assert target == pytest.approx(abs(v.effect), rel=1e-2)
    assert at_seeds == pytest.approx(mde(comp, 1000, 30), rel=1e-2) and at_seeds >= target
    assert at_docs == pytest.approx(mde(comp, 4, 10_000_000), rel=1e-2) and at_docs >= target
    seeds, docs = int(m.group(4)), int(m.group(5))
    assert mde(comp, seeds, docs) < abs(v.effect) and docs / 30 == seeds / 4
    assert mde(comp, seeds - 4, docs - 30) >= abs(v.effect)  # the smallest such factor
