"""Issue #26: adding seeds after "inconclusive" is a second look (cuvee.train.sequential: Lan-DeMets alpha
spending, family-wise error <= alpha over the looks), and "no difference" needs a margin the user stated."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from cuvee.kernel.errors import UserError
from cuvee.train.anneal import AnnealConfig, run_anneal
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
from cuvee.train.sequential import LookError, levels, spent
from cuvee.train.trainer import train
from cuvee.train.verdict import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, compare

# Lan-DeMets spending at alpha = 0.05 two-sided, as tabulated (e.g. gsDesign sfLDOF / sfLDPocock):
# O'Brien-Fleming type 2 - 2 Phi(1.96 / sqrt(t)), Pocock type alpha ln(1 + (e - 1) t)
PUBLISHED = {"obrien_fleming": {1 / 3: 0.0007, 0.5: 0.0056, 2 / 3: 0.0164, 1.0: 0.05},
             "pocock": {1 / 3: 0.0226, 0.5: 0.0310, 2 / 3: 0.0382, 1.0: 0.05}}


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
@pytest.mark.parametrize("K", [2, 3])
def test_spending_levels_sum_to_alpha_and_match_published_values(spending, K):
    lv = levels(K, 0.05, spending)
    assert len(lv) == K and all(a > 0 for a in lv) and sum(lv) <= 0.05 + 1e-15
    assert sum(lv) == pytest.approx(0.05, abs=1e-12)
    for k in range(1, K + 1):
        assert spent(k / K, 0.05, spending) == pytest.approx(PUBLISHED[spending][k / K if k < K else 1.0], abs=6e-5)
        assert sum(lv[:k]) == pytest.approx(spent(k / K, 0.05, spending), abs=1e-15)
    assert levels(1, 0.05, spending) == [0.05]  # one look: today's single test at alpha
    if spending == "obrien_fleming":
        assert lv[0] < lv[-1]  # keeps almost all of alpha for the last look


def test_null_simulation_familywise_rate_is_kept_with_the_rule_and_inflated_without():
    """20k ablations with no effect, each looked at with 3, 5 and 7 seeds (seeds added after each look)."""
    rng = np.random.default_rng(26)
    reps, ns, alpha = 20_000, (3, 5, 7), 0.05
    d = rng.normal(0.0, 1.0, (reps, max(ns)))  # per-seed paired effects under the null
    p = np.stack([2 * stats.t.sf(np.abs(d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n))), n - 1)
                  for n in ns], axis=1)
    mc = 3 * math.sqrt(alpha * (1 - alpha) / reps)
    naive = (p < alpha).any(1).mean()
    assert naive > alpha + mc  # testing again at alpha: about 0.08
    for spending in ("obrien_fleming", "pocock"):
        lv = np.array(levels(len(ns), alpha, spending))
        assert (p < lv[None, :]).any(1).mean() <= alpha + mc
    # the rule is what compare() applies: on one-document designs its p is this t test, and it calls
    # "better/worse" exactly when p < the look's level
    lv = levels(len(ns), alpha, "pocock")
    for r in range(60):
        for k, n in enumerate(ns):
            v = compare(np.zeros((n, 1)), d[r, :n, None], alpha=lv[k])
            assert v.p_value == pytest.approx(p[r, k], rel=1e-9)
            assert (v.verdict in (BETTER, WORSE)) == (p[r, k] < lv[k])


def test_no_margin_never_says_no_difference_and_says_to_state_one():
    rng = np.random.default_rng(4)
    base = rng.gamma(4.0, 1.0, (1, 400)) + rng.normal(0, 0.3, (5, 400))
    other = base + rng.normal(0, 0.001, (5, 400))
    assert compare(base, other, margin=0.01).verdict == EQUIVALENT
    v = compare(base, other)
    assert v.verdict == INCONCLUSIVE and "no equivalence margin stated" in v.reason and "state one" in v.reason
    assert AnnealConfig(checkpoint="x", candidate=["a"], control=["b"], tokens=1, eval={"e": "e"}).equivalence_margin is None
    with pytest.raises(ValueError, match="state one of them"):
        AnnealConfig(checkpoint="x", candidate=["a"], control=["b"], tokens=1, eval={"e": "e"},
                     equivalence_margin=0.005, equivalence_margin_abs=0.01)


def test_seeds_needed_target_the_observed_effect_as_well_as_the_margin():
    rng = np.random.default_rng(11)
    w = rng.integers(200, 2000, 60).astype(float)
    ctrl = rng.normal(1.0, 0.1, (3, 60)) * w
    cand = ctrl - 0.0005 * w + rng.normal(0, 0.02, (3, 60)) * w
    free = compare(cand, ctrl, weights=w)
    assert free.verdict == INCONCLUSIVE and free.mde > abs(free.effect) > 0
    small = compare(cand, ctrl, weights=w, margin=abs(free.effect) / 4)  # margin < |effect| < MDE: the effect
    assert f"below {abs(free.effect):.3g}" in small.reason and small.seeds_needed == free.seeds_needed
    wide = compare(cand, ctrl, weights=w, margin=2 * abs(free.effect))  # |effect| < margin < MDE: the margin
    assert f"below {2 * abs(free.effect):.3g}" in wide.reason and wide.seeds_needed < free.seeds_needed
    # sized at the next look's (smaller) level: more seeds; no look left: refused here, sized for a new ablation
    later = compare(cand, ctrl, weights=w, next_alpha=0.01)
    assert later.seeds_needed > free.seeds_needed and "next look's alpha 0.01" in later.reason
    spent_all = compare(cand, ctrl, weights=w, alpha=0.02, next_alpha=0.05, looks_left=False)
    assert spent_all.seeds_needed == free.seeds_needed
    assert "every planned look is spent, so more seeds are refused here" in spent_all.reason
    assert "MDE of a new ablation at alpha 0.05 below" in spent_all.reason


# ---- the anneal: looks recorded in the folder ---------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq")
    rows, heldout = split_heldout(load_wcxb())
    rows = [r for r in rows if r.get("without")]
    build_variant_mix(root / "base", "base", rows[:60], {"clean": 0.5, "boilerplate": 0.5}, max_doc_bytes=800)
    build_variant_mix(root / "cand", "cand", rows[60:120], {"clean": 1.0}, max_doc_bytes=800)
    build_variant_mix(root / "ctrl", "ctrl", rows[60:120], {"boilerplate": 1.0}, max_doc_bytes=800)
    build_variant_mix(root / "held", "held", heldout[:10], {"clean": 1.0}, max_doc_bytes=800)
    cfg = TrainConfig(name="base", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
                      data={"paths": [str(root / "base")], "seq_len": 64}, optim={"lr": 3e-3, "warmup_steps": 1},
                      steps=4, micro_batch=4, out_dir=str(root / "base_run"), threads=1, log_every=10)
    return root, train(cfg, quiet=True)["checkpoint"]


def _config(root, checkpoint, out, **kw) -> AnnealConfig:
    return AnnealConfig(**{"name": "s", "checkpoint": checkpoint, "candidate": [str(root / "cand")],
                           "control": [str(root / "ctrl")], "tokens": 64 * 4 * 2, "eval": {"clean": str(root / "held")},
                           "eval_docs": 8, "average_last": 1, "lr": 3e-3, "out_dir": str(root / out), "threads": 1,
                           "decontaminate": False} | kw)


def test_added_seeds_are_the_next_look_at_its_own_level(tiny):
    root, ckpt = tiny
    out = root / "looks"
    plan = {"looks": 2, "spending": "pocock"}
    a1, a2 = levels(2, 0.05, "pocock")
    first = run_anneal(_config(root, ckpt, "looks", seeds=[0, 1], **plan), quiet=True)
    assert first["look"]["look"] == 1 and first["look"]["alpha_tested"] == pytest.approx(a1)
    s = first["sources"]["clean"]
    assert s["alpha"] == pytest.approx(a1) and s["ci_level"] == pytest.approx(1 - a1)
    assert s["reason"].startswith(f"look 1 of 2 (pocock spending), tested at alpha_1 = {a1:.3g}; family-wise "
                                  f"false 'better/worse' rate <= {a1:.3g} (<= 0.05 over all 2 looks)")
    files = {name: (out / name).read_bytes() for name in ("report.json", "report.md", "looks.json")}
    # the same seeds (in another order) again: the same look, byte-identical record and report
    again = run_anneal(_config(root, ckpt, "looks", seeds=[1, 0], **plan), quiet=True)
    assert again["look"]["look"] == 1
    assert (out / "looks.json").read_bytes() == files["looks.json"]
    run_anneal(_config(root, ckpt, "looks", seeds=[0, 1], **plan), quiet=True)
    assert {name: (out / name).read_bytes() for name in files} == files
    # one more seed: look 2, tested at alpha_2, the family-wise bound is alpha
    second = run_anneal(_config(root, ckpt, "looks", seeds=[0, 1, 2], **plan), quiet=True)
    s = second["sources"]["clean"]
    assert second["look"]["look"] == 2 and s["alpha"] == pytest.approx(a2)
    assert f"look 2 of 2 (pocock spending), tested at alpha_2 = {a2:.3g}; family-wise false 'better/worse' " \
           f"rate <= 0.05" in s["reason"]
    assert f"- **clean**: {s['verdict']} - look 2 of 2" in (out / "report.md").read_text()
    record = json.loads((out / "looks.json").read_text())
    assert record["plan"]["looks"] == 2 and record["plan"]["spending"] == "pocock"
    assert [(x["look"], x["key"]["seeds"], x["n"]) for x in record["looks"]] == [(1, [0, 1], 2), (2, [0, 1, 2], 3)]
    assert [x["alpha_tested"] for x in record["looks"]] == pytest.approx([a1, a2])
    assert record["looks"][1]["verdicts"] == {"clean": s["verdict"]}
    # a third seed set: beyond the declared looks, refused before any training
    with pytest.raises(LookError, match="all 2 planned look"):
        run_anneal(_config(root, ckpt, "looks", seeds=[0, 1, 2, 3], **plan), quiet=True)
    assert issubclass(LookError, UserError)  # `cuvee anneal` says it in one line, not as "unexpected"
    assert not (out / "runs" / "candidate_seed3").exists()
    # re-planning after seeing data is refused: more looks, another spending, a margin stated now
    for change in ({"looks": 3}, {"spending": "obrien_fleming"}, {"equivalence_margin": 0.01}):
        with pytest.raises(LookError, match="re-plan"):
            run_anneal(_config(root, ckpt, "looks", seeds=[0, 1, 2], **(plan | change)), quiet=True)
    assert json.loads((out / "looks.json").read_text()) == record
    # starting over (--fresh) starts a new plan at look 1
    fresh = run_anneal(_config(root, ckpt, "looks", seeds=[0, 1, 2], looks=3), quiet=True, fresh=True)
    assert fresh["look"]["look"] == 1 and fresh["look"]["looks"] == 3


def test_identical_arms_are_no_difference_only_with_a_stated_margin(tiny):
    """Candidate = control: zero effect, zero noise. The old default margin (0.5 %) called it "no difference";
    without a stated margin it stays inconclusive and says to state one."""
    root, ckpt = tiny
    kw = {"control": [str(root / "cand")], "seeds": [0, 1]}
    plain = run_anneal(_config(root, ckpt, "same", **kw), quiet=True)["sources"]["clean"]
    assert plain["verdict"] == INCONCLUSIVE and "no equivalence margin stated" in plain["reason"]
    assert plain["margin"] is None
    stated = run_anneal(_config(root, ckpt, "same_abs", equivalence_margin_abs=0.01, **kw), quiet=True)
    assert stated["sources"]["clean"]["verdict"] == EQUIVALENT and stated["sources"]["clean"]["margin"] == 0.01
    assert "±0.01 in the metric's unit (stated)" in (root / "same_abs" / "report.md").read_text()


def test_mix_search_proof_seeds_added_are_the_next_look(tmp_path):
    """The same rule for `cuvee mix search`'s proof: a new proof seed set is the next look (looks.json in the
    search folder), the same seeds again are the same look, and a seed set beyond the declared looks is refused."""
    import yaml

    from cuvee.mixsearch.search import run_search
    from test_mix_search import _config, _data

    cfg = _config(_data(tmp_path), mixtures=4, proof={"seeds": [0, 1], "looks": 2, "spending": "pocock"})
    cfg["proxy"]["tokens"] = 512 * 6
    cfg["targets"][0]["max_docs"] = 20
    path, out = tmp_path / "s.yaml", tmp_path / "out"

    def search(seeds):
        cfg["proof"]["seeds"] = seeds
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return run_search(str(path), out, say=lambda m: None)

    a1, a2 = levels(2, 0.05, "pocock")
    v = search([0, 1])["verdicts"]["blend"]["natural"]
    assert v["alpha"] == pytest.approx(a1) and v["reason"].startswith(f"look 1 of 2 (pocock spending), tested at "
                                                                      f"alpha_1 = {a1:.3g}")
    assert v["verdict"] != EQUIVALENT and "no equivalence margin stated" in v["reason"]
    record = (out / "looks.json").read_bytes()
    assert search([1, 0])["verdicts"]["blend"]["natural"]["look"]["look"] == 1
    assert (out / "looks.json").read_bytes() == record
    v = search([0, 1, 2])["verdicts"]["blend"]["uniform"]
    assert v["alpha"] == pytest.approx(a2) and v["look"]["look"] == 2 and "rate <= 0.05" in v["reason"]
    assert [x["key"]["seeds"] for x in json.loads((out / "looks.json").read_text())["looks"]] == [[0, 1], [0, 1, 2]]
    with pytest.raises(LookError, match="all 2 planned look"):
        search([0, 1, 2, 3])
    assert not list((out / "proof").glob("*_seed3.json")), "a look beyond the plan is refused before its runs train"


def test_look_record_is_checked_not_trusted(tmp_path):
    """looks.json is what keeps the stated error rate: an unreadable one is refused in one line, and a changed
    plan names what changed."""
    from cuvee.train.sequential import next_look, record_look

    plan = {"looks": 2, "spending": "obrien_fleming", "alpha": 0.05}
    look = next_look(tmp_path, {"seeds": [0, 1]}, plan, fresh_hint="--fresh")
    record_look(tmp_path, look, {"seeds": [0, 1]}, plan, {"t": "inconclusive"})
    with pytest.raises(LookError, match=r"alpha 0\.05 -> 0\.1 after 1 recorded look"):
        next_look(tmp_path, {"seeds": [0, 1, 2]}, plan | {"alpha": 0.1}, fresh_hint="--fresh")
    (tmp_path / "looks.json").write_text('{"plan": ')
    with pytest.raises(LookError, match="unreadable look record") as e:
        next_look(tmp_path, {"seeds": [0, 1]}, plan, fresh_hint="--fresh")
    assert "\n" not in str(e.value)
    (tmp_path / "looks.json").write_text("[1, 2]")
    with pytest.raises(LookError, match="not a look record"):
        next_look(tmp_path, {"seeds": [0, 1]}, plan, fresh_hint="--fresh")
