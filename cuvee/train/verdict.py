"""Paired verdicts for annealing ablations, with known error rates (numpy, and scipy for Student's t).

Input: per-seed, per-document held-out losses of the candidate and the control, *paired*: row ``s`` of
both arms comes from the same seed (same start checkpoint, same data-order seed) and column ``i`` is the
same eval document in every row. Optionally per-document denominators (UTF-8 bytes for bits-per-byte,
tokens for loss), so the per-seed metric is the corpus-level ratio ``sum(nats) / sum(denominator)``
exactly as :func:`cuvee.train.evaluate.evaluate` reports it.

Effect
    ``d_s = metric(control, seed s) - metric(candidate, seed s)`` (positive: the candidate is better);
    ``effect = mean_s d_s``.

Interval: a paired t interval over seeds, widened by the eval-document noise (two-way crossed
random-effects model, method of moments; chosen over a hierarchical bootstrap because it is exact to
compute, fast enough to calibrate over thousands of synthetic repetitions, and - unlike a bootstrap over
2-4 seeds - honest about how little 2-4 seeds say: the t quantile with few degrees of freedom is wide).
Per document and seed the (linearised) difference is ``z_si = (u_si - effect * w_i) / mean(w) + effect``
with ``u_si`` the nats difference and ``w_i`` the denominator, so that ``mean_i z_si = d_s`` exactly.
Model: ``z_si = mu + a_s (seed) + b_i (document) + e_si (interaction)``. With n seeds and m documents,

* ``A = var_s(d_s) / n``            - seed noise (estimates Var(a)/n + Var(e)/(nm)),
* ``B = var_i(mean_s z_si) / m``    - eval-document noise (estimates Var(b)/m + Var(e)/(nm)),
* ``C = sigma_e^2 / (n m)``         - the interaction, counted in both A and B (two-way ANOVA residual),

``SE^2 = A + B - C`` (unbiased; floored at ``max(A, B) / 2`` against a negative estimate), degrees of freedom by Welch-Satterthwaite over the three
terms. The seed term is what the old rule (unpaired SE from 2 seeds per arm) got wrong: pairing removes
the start-checkpoint and data-order noise the arms share, and the t quantile with ``df`` (about n-1 when seed
noise dominates) - not a fixed "2 SE" - is what gives the stated 5 % error rate. The document term makes the
verdict about the eval *distribution*, not only the particular documents drawn.

Output (:func:`compare`): effect, 95 % interval, two-sided p-value, the minimum detectable effect at 80 %
power (MDE = (t_{1-alpha/2} + t_{power}) * SE, from the observed variance components), and a verdict:

* ``"candidate better"`` / ``"control better"``: the interval excludes 0 (p < alpha);
* ``"no difference (equivalent within ±margin)"``: only when the whole interval lies inside ``±margin``,
  and only with a margin the user stated: no default margin exists, because any fixed one (the old ±0.5 % of
  the control, ±0.019 bpb at 3.8 bpb) is as large as the effects people look for (+0.016 to +0.061 bpb), so
  "no difference" would hide them; without a margin the reason says to state one;
* ``"inconclusive"``: anything else - never "no difference" from a wide interval. The result then says how
  many seeds (or eval documents) would bring the MDE below the larger of |effect| and the margin that it does
  not reach yet (so the observed effect is targeted even when a margin is stated), and which variance
  component dominates (seeds: add seeds, or a longer anneal to grow the effect; documents: add eval docs).

Levels: ``alpha`` is the level this verdict is tested at; under a sequential plan (:mod:`cuvee.train.sequential`)
that is the look's alpha_k, the decision interval ``ci`` is the ``1 - alpha`` interval (``ci95`` stays the
95 % one, for reading), and seeds/documents needed are sized for ``next_alpha``, the level the next look
will be tested at (``looks_left=False``: the plan's looks are spent, so the numbers are for a new ablation
at ``next_alpha`` and the reason says that more seeds are refused here).

Calibration is tested on synthetic data in tests/test_train_verdict.py (null: false better/worse rate near
alpha over 500 repetitions; planted effect: detected).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = (
    "candidate better", "control better", "no difference (equivalent within ±margin)", "inconclusive")


# ---- Student t (scipy) --------------------------------------------------------------------------------
def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (df may be fractional; inf = normal).

    Above a million degrees of freedom the normal tail is used, as the verdicts always have (t and normal
    differ there by < 1e-6 relative), so p-values and "seeds/documents needed" stay what they were."""
    if not math.isfinite(df) or df > 1e6:
        return float(stats.norm.sf(t))
    return float(stats.t.sf(t, df))


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom."""
    return float(stats.t.ppf(q, df))


# ---- variance components -----------------------------------------------------------------------------
@dataclass
class Components:
    """Per-unit variances (divide by seeds / documents to get the variance of the effect)."""

    seed_var: float  # var over seeds of d_s (includes the interaction / m)
    doc_var: float   # var over documents of the seed-averaged difference (includes the interaction / n)
    inter_var: float  # residual (seed x document interaction) variance
    n_seeds: int
    n_docs: int

    def terms(self, n: int | None = None, m: int | None = None) -> tuple[float, float, float]:
        """(A, B, C) for n seeds and m documents, scaled from the observed design."""
        n, m = n or self.n_seeds, m or self.n_docs
        n0, m0 = self.n_seeds, self.n_docs
        if (n, m) == (n0, m0):  # the observed design: the unbiased moment estimates, unclamped
            return self.seed_var / n, self.doc_var / m, self.inter_var / (n * m)
        # seed_var estimates Var(a) + Var(e)/m0: keep Var(a) and rescale the interaction part to m
        va = max(self.seed_var - self.inter_var / m0, 0.0)
        vb = max(self.doc_var - self.inter_var / n0, 0.0)
        a = (va + self.inter_var / m) / n
        b = (vb + self.inter_var / n) / m
        c = self.inter_var / (n * m)
        return a, b, c

    def se_df(self, n: int | None = None, m: int | None = None) -> tuple[float, float]:
        n, m = n or self.n_seeds, m or self.n_docs
        a, b, c = self.terms(n, m)
        var = max(a + b - c, 0.5 * max(a, b))
        if var <= 0:
            return 0.0, math.inf
        den = 0.0
        for term, df in ((a, n - 1), (b, m - 1), (c, (n - 1) * (m - 1))):
            if term > 0:
                den += term * term / df if df > 0 else math.inf
        df = var * var / den if den > 0 else math.inf
        return math.sqrt(var), max(1.0, df)


def components(z: np.ndarray) -> Components:
    """Method-of-moments variance components of an (n_seeds, n_docs) matrix of per-document differences."""
    n, m = z.shape
    d_s = z.mean(1)
    zi = z.mean(0)
    seed_var = float(d_s.var(ddof=1)) if n > 1 else math.nan
    doc_var = float(zi.var(ddof=1)) if m > 1 else 0.0
    if n > 1 and m > 1:
        r = z - zi[None, :] - d_s[:, None] + z.mean()
        inter = float((r * r).sum() / ((n - 1) * (m - 1)))
    else:
        inter = 0.0
    return Components(seed_var, doc_var, inter, n, m)


def paired_differences(candidate: np.ndarray, control: np.ndarray, weights: np.ndarray | None = None,
                       scale: float = 1.0) -> tuple[np.ndarray, float]:
    """Linearised per-(seed, document) differences ``z`` (mean over documents = d_s) and the effect.

    ``candidate``/``control``: (n_seeds, n_docs) summed losses per document (nats), or per-document values
    when ``weights`` is None; ``weights``: per-document denominators (bytes or tokens), shared by the arms;
    ``scale``: unit conversion applied to the metric (1/ln 2 for bits)."""
    cand = np.atleast_2d(np.asarray(candidate, dtype=np.float64))
    ctrl = np.atleast_2d(np.asarray(control, dtype=np.float64))
    if cand.shape != ctrl.shape:
        raise ValueError(f"candidate {cand.shape} and control {ctrl.shape} are not paired (same seeds x documents)")
    w = np.ones(cand.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (cand.shape[1],) or w.sum() <= 0:
        raise ValueError("weights must be one positive denominator per document")
    u = scale * (ctrl - cand)
    d_s = u.sum(1) / w.sum()
    effect = float(d_s.mean())
    z = (u - effect * w[None, :]) / w.mean() + effect
    return z, effect


@dataclass
class Verdict:
    effect: float
    ci95: tuple[float, float]  # the 95 % interval (for reading)
    ci: tuple[float, float]    # the 1 - alpha interval the verdict is drawn from (= ci95 at alpha 0.05)
    ci_level: float
    p_value: float
    se: float
    df: float
    mde: float
    verdict: str
    reason: str
    n_seeds: int
    n_docs: int
    per_seed_effect: list[float]
    seeds_candidate_better: int
    seed_se: float       # sqrt(A): the seed part of the SE
    document_se: float   # sqrt(B): the eval-document part
    dominant_noise: str  # "seeds" or "documents"
    margin: float | None
    alpha: float
    power: float
    seeds_needed: int | None = None  # total seeds for MDE < target (same documents); None: not reachable
    docs_needed: int | None = None   # total eval documents for MDE < target (same seeds); None: not reachable

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci95"] = list(d["ci95"])
        d["ci"] = list(d["ci"])
        return d


def mde(comp: Components, n: int | None = None, m: int | None = None, alpha: float = 0.05,
        power: float = 0.8) -> float:
    """Minimum detectable effect (two-sided alpha, given power) for n seeds and m documents."""
    se, df = comp.se_df(n, m)
    return (t_ppf(1 - alpha / 2, df) + t_ppf(power, df)) * se


def _needed(f, start: int, target: float, limit: int) -> int | None:
    """Smallest k in (start, limit] with f(k) < target (f decreasing), by doubling then bisection."""
    if f(limit) >= target:
        return None
    lo, hi = start, start + 1
    while f(hi) >= target:
        lo, hi = hi, min(limit, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if f(mid) < target:
            hi = mid
        else:
            lo = mid
    return hi


def compare(candidate: np.ndarray, control: np.ndarray, weights: np.ndarray | None = None, scale: float = 1.0,
            margin: float | None = None, alpha: float = 0.05, power: float = 0.8,
            max_seeds: int = 1000, max_docs: int = 10_000_000, next_alpha: float | None = None,
            looks_left: bool = True) -> Verdict:
    """Paired comparison of candidate vs control; see the module docstring for the design."""
    z, effect = paired_differences(candidate, control, weights, scale)
    n, m = z.shape
    d_s = z.mean(1)
    better = int((d_s > 0).sum())
    next_alpha = alpha if next_alpha is None else next_alpha
    common = {"effect": effect, "n_seeds": n, "n_docs": m, "per_seed_effect": d_s.tolist(), "seeds_candidate_better": better,
              "margin": margin, "alpha": alpha, "power": power, "ci_level": 1 - alpha}
    if n < 2:
        return Verdict(ci95=(-math.inf, math.inf), ci=(-math.inf, math.inf), p_value=math.nan, se=math.nan,
                       df=math.nan, mde=math.inf, verdict=INCONCLUSIVE,
                       reason="one seed: seed-to-seed noise cannot be estimated; run >= 3 seeds" + _no_margin(margin),
                       seed_se=math.nan, document_se=math.nan, dominant_noise="seeds", seeds_needed=None,
                       docs_needed=None, **common)
    comp = components(z)
    se, df = comp.se_df()
    a, b, _ = comp.terms()
    tq = t_ppf(1 - alpha / 2, df)
    t95 = t_ppf(0.975, df)
    if se > 0:
        lo, hi = effect - tq * se, effect + tq * se
        p = min(1.0, 2 * t_sf(abs(effect) / se, df))
    else:  # identical arms (or noise-free synthetic data)
        lo = hi = effect
        p = 1.0 if effect == 0 else 0.0
    the_mde = (tq + t_ppf(power, df)) * se
    dominant = "seeds" if a >= b else "documents"
    out = Verdict(ci95=(effect - t95 * se, effect + t95 * se), ci=(lo, hi), p_value=p, se=se, df=df, mde=the_mde,
                  verdict=INCONCLUSIVE, reason="", seed_se=math.sqrt(a), document_se=math.sqrt(b),
                  dominant_noise=dominant, **common)
    ci = f"{_pct(1 - alpha)} % CI [{lo:+.4g}, {hi:+.4g}]"
    if lo > 0 or hi < 0:
        out.verdict = BETTER if effect > 0 else WORSE
        out.reason = f"{ci} excludes 0 (p = {p:.2g} < {alpha:.3g}, {better}/{n} seeds favour the candidate)"
        if margin is not None and max(abs(lo), abs(hi)) < margin:
            out.reason += f"; the difference is real but inside the ±{margin:.3g} margin"
        return out
    if margin is not None and -margin < lo and hi < margin:
        out.verdict = EQUIVALENT
        out.reason = f"{ci} lies inside ±{margin:.3g}"
        return out
    if se == 0:  # every seed and document gave the same difference, 0 (with a nonzero one, the CI excluded 0)
        out.reason = ("the arms gave the same metric on every seed and document: effect 0 with no noise to test "
                      "against" + ("" if margin is None else f", not tested against ±{margin:.3g}") + _no_margin(margin))
        return out
    # the target: the observed |effect| or the margin, whichever the MDE does not reach yet (larger first)
    target = next((t for t in sorted({abs(effect), margin or 0.0}, reverse=True) if 0 < t < the_mde), None)
    out.reason = (f"effect {effect:+.3g} ({better}/{n} seeds favour the candidate) is not significant: {ci} includes 0 "
                  f"(p = {p:.2g} >= {alpha:.3g}; SE {se:.3g} on {df:.3g} degrees of freedom)"
                  + ("" if margin is None else f" and is not inside ±{margin:.3g}"))
    out.reason += _no_margin(margin)
    if target is None:
        out.reason += (f"; MDE(80 % power) = {the_mde:.3g} is already below |effect| = {abs(effect):.3g}: a miss "
                       f"that happens 20 % of the time at this power, or the effect is smaller - add seeds")
        return out
    out.reason += f"; MDE(80 % power) = {the_mde:.3g} > {target:.3g}; noise dominated by {dominant}"
    out.seeds_needed = _needed(lambda k: mde(comp, k, m, next_alpha, power), n, target, max_seeds)
    out.docs_needed = _needed(lambda k: mde(comp, n, k, next_alpha, power), m, target, max_docs)
    need = []
    if out.seeds_needed:
        need.append(f"{out.seeds_needed} seeds (+{out.seeds_needed - n})")
    if out.docs_needed:
        need.append(f"{out.docs_needed} eval documents (+{out.docs_needed - m})")
    at = "" if next_alpha == alpha else f" at the next look's alpha {next_alpha:.3g}"
    if not looks_left:
        out.reason += "; every planned look is spent, so more seeds are refused here"
        at = f" of a new ablation at alpha {next_alpha:.3g}"
    out.reason += (f"; to bring the MDE{at} below {target:.3g}: " + " or ".join(need) if need
                   else _both_needed(comp, n, m, target, next_alpha, power, max_seeds, max_docs, at))
    if dominant == "seeds":
        out.reason += " (or a longer anneal, more tokens, if that grows the effect)"
    return out


def _both_needed(comp: Components, n: int, m: int, target: float, alpha: float, power: float, max_seeds: int,
                 max_docs: int, at: str) -> str:
    """Why neither more seeds alone nor more documents alone reaches ``target`` (each leaves the other's noise),
    and the smallest design growing both by one factor that does, if an affordable one exists."""
    text = (f"; neither more seeds alone (with {max_seeds:,} seeds the eval-document noise keeps the MDE at "
            f"{mde(comp, max_seeds, m, alpha, power):.3g}) nor more eval documents alone (with {max_docs:,} the seed "
            f"noise keeps it at {mde(comp, n, max_docs, alpha, power):.3g}) brings the MDE{at} below {target:.3g}")
    factor = _needed(lambda k: mde(comp, n * k, m * k, alpha, power), 1, target, min(max_seeds // n, max_docs // m)) \
        if min(max_seeds // n, max_docs // m) > 1 else None
    if factor is None:
        return text + f": no design within {max_seeds:,} seeds and {max_docs:,} eval documents gets there"
    return text + f": both are needed, e.g. {n * factor} seeds and {m * factor} eval documents"


def _pct(level: float) -> str:
    return f"{100 * level:.4g}"


def _no_margin(margin: float | None) -> str:
    return ("" if margin is not None else
            "; no equivalence margin stated, so never \"no difference\" - state one (the smallest effect that "
            "matters) to allow it")
