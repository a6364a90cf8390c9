"""Mixture sampling (cuvee/mixsearch/sampling.py) finishes or refuses in bounded time, never with near-duplicate
rows, and keeps the plans the draw-by-draw sampler made before (a search's recorded plan.json must be computed
again bit for bit). The reference below is that earlier sampler, kept verbatim as a second implementation."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import yaml

from cuvee.cli import main
from cuvee.mixsearch import sampling


def _old_project(v, lo, hi):
    v = np.asarray(v, dtype=np.float64)
    a, b = float((v - hi).min()) - 1.0, float((v - lo).max()) + 1.0
    for _ in range(200):
        tau = 0.5 * (a + b)
        if np.clip(v - tau, lo, hi).sum() > 1:
            a = tau
        else:
            b = tau
    w = np.clip(v - 0.5 * (a + b), lo, hi)
    r = 1.0 - w.sum()
    room = (hi - w) if r > 0 else (w - lo)
    w[int(np.argmax(room))] += r
    return w


def _old_sample(n_mixtures, available, lo, hi, seed, concentration=1.0):
    nat = sampling.natural(available, lo, hi)
    rows, kinds = [nat], ["natural"]
    for i in range(lo.size):
        rows.append(sampling.corner(i, nat, lo, hi))
        kinds.append(f"corner:{i}")
    rng = np.random.default_rng(seed)
    alpha = concentration * lo.size * np.maximum(nat, 0.05)
    tries = 0
    flat = np.ones(lo.size)
    while len(rows) < n_mixtures:
        w = _old_project(rng.dirichlet(alpha if (len(rows) - lo.size - 1) % 2 == 0 else flat), lo, hi)
        tries += 1
        if min(np.abs(np.asarray(rows) - w).sum(1)) < 1e-3 and tries < 100 * n_mixtures:
            continue
        kinds.append("dirichlet" if (len(rows) - lo.size - 1) % 2 == 0 else "flat")
        rows.append(w)
    return np.asarray(rows[:n_mixtures]), kinds[:n_mixtures]


def _min_gap(rows: np.ndarray) -> float:
    """The smallest L1 distance from a drawn row to any row before it (the natural mix and the corners are
    placed, not drawn, and may coincide when the natural mix sits on a bound)."""
    d = np.abs(rows[:, None, :] - rows[None, :, :]).sum(2)
    first_draw = rows.shape[1] + 1
    return float(min((d[i, :i].min() for i in range(first_draw, len(rows))), default=np.inf))


CASES = [  # (n, available, lo, hi, seed, concentration)
    (12, [5, 3, 2], [0, 0, 0], [1, 1, 1], 0, 1.0),
    (30, [9, 1], [0.05, 0.05], [0.9, 0.95], 3, 1.0),
    (25, [4, 3, 2, 1, 1], [0.02] * 5, [0.6, 0.5, 0.5, 0.4, 0.4], 7, 0.2),
    (20, [7, 3, 5], [0, 0.1, 0], [0.8, 0.5, 0.6], 11, 50.0),  # concentrated: draws near the natural mix retried
    (60, [1, 1], [0.45, 0.45], [0.55, 0.55], 0, 1.0),  # narrow: a third of the room, many draws refused
    (10, [2, 5, 1, 1, 3, 2, 8, 1, 1, 4], [0.0] * 10, [0.3] * 10, 5, 1.0),  # 10 sources: the pairwise sums
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_the_plan_is_the_draw_by_draw_samplers_bit_for_bit(case):
    n, available, lo, hi, seed, conc = case
    lo, hi = np.array(lo, float), np.array(hi, float)
    old_rows, old_kinds = _old_sample(n, available, lo, hi, seed, conc)
    assert _min_gap(old_rows) >= 1e-3  # the old sampler found its mixtures here: the plan must not change
    rows, kinds = sampling.sample_mixtures(n, available, lo, hi, seed, conc)
    assert kinds == old_kinds and np.array_equal(rows, old_rows)


def test_batch_projection_equals_the_one_by_one_bisection():
    rng = np.random.default_rng(1)
    for s in (2, 3, 5, 9, 16):
        lo = rng.uniform(0, 0.5 / s, s) * (rng.random(s) < 0.5)
        hi = np.maximum(lo + rng.uniform(0.05, 1, s), 1.5 / s).clip(max=1)
        v = np.vstack([rng.dirichlet(np.full(s, 0.3), size=40), rng.normal(size=(40, s))])
        got = sampling.project_rows(v, lo, hi)
        for row, w in zip(v, got):
            assert np.array_equal(w, _old_project(row, lo, hi))
            assert np.array_equal(sampling.project(row, lo, hi), w)
        assert np.all(got >= lo) and np.all(got <= hi) and np.allclose(got.sum(1), 1, atol=1e-12)


@pytest.mark.parametrize("lo,hi", [([0, 0], [1, 1]), ([0.45, 0.3], [0.7, 0.55]), ([0.1, 0], [0.2, 1])])
def test_most_mixtures_is_the_closest_packing_for_two_sources(lo, hi):
    """Two sources: the mixtures lie on a segment where L1 is twice the gap in w_0, so the closest packing at
    1e-3 is floor(width / 5e-4) + 1 points (a closed form)."""
    w0_range = min(hi[0], 1 - lo[1]) - max(lo[0], 1 - hi[1])
    assert sampling.most_mixtures(lo, hi) == int(np.floor(round(w0_range / 5e-4, 6))) + 1


def test_most_mixtures_bounds_a_greedy_packing_in_three_sources():
    """A greedy packing at a coarse spacing over a fine grid of the bounded simplex never exceeds the bound."""
    lo, hi, spacing = np.array([0.2, 0.1, 0.0]), np.array([0.5, 0.4, 0.6]), 0.05
    grid = [np.array([a, b, 1 - a - b]) for a, b in itertools.product(np.arange(0, 1.0001, 0.01), repeat=2)]
    points: list[np.ndarray] = []
    for w in grid:
        if np.all(w >= lo - 1e-12) and np.all(w <= hi + 1e-12) and all(np.abs(w - p).sum() >= spacing for p in points):
            points.append(w)
    assert 10 < len(points) <= sampling.most_mixtures(lo, hi, spacing)


def test_two_sources_and_2000_mixtures_are_refused_in_one_line_at_validation(tmp_path, capsys):
    """Issue #37: 2 sources x 2000 drew for ever (each draw compared with every earlier one, 100 N retries);
    no more than 2001 mixtures fit 1e-3 apart on that segment and random draws place ~3/4 of them."""
    cfg = {"name": "two", "tokenizer": "bytes256.tiktoken", "mixtures": 2000,
           "sources": [{"name": n, "paths": str(tmp_path / f"{n}.jsonl")} for n in ("a", "b")],
           "targets": [{"name": "t", "paths": str(tmp_path / "t.jsonl")}],
           "proxy": {"tokens": 1000, "train": {"model": {"dim": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 64},
                                               "data": {"seq_len": 64}}}}
    for name in ("a", "b", "t"):  # real files, so the old code reached its sampling (and never left it)
        (tmp_path / f"{name}.jsonl").write_text("".join(f'{{"text": "{name} document {i} ' + 'word ' * 40 + '"}\n'
                                                        for i in range(20)))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as e:
        main(["mix", "search", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and len(err.strip().splitlines()) == 1, err
    assert "mixtures: 2000 is more than random draws can place" in err and "at most 2,001 mixtures fit" in err
    assert time.monotonic() - t0 < 60
    with pytest.raises(sampling.BoundsError, match="ask for at most 1,498"):  # the sampler, with the epoch caps
        sampling.sample_mixtures(2000, [1, 1], np.zeros(2), np.ones(2), 0)


def test_what_validation_lets_through_finishes_with_distinct_rows_or_is_refused_in_bounded_draws():
    # draws pinned near the natural mix (concentration 1e4) find no room for their half of 100 rows: refused
    # after 100 N draws, where the old sampler drew for ~30 s and then took rows 6e-6 apart
    with pytest.raises(sampling.BoundsError, match=r"only \d+ of 100 found 0.001 apart \(L1\) in 10,000 draws"):
        sampling.sample_mixtures(100, [1, 1], np.zeros(2), np.ones(2), 0, 1e4)
    lo, hi = np.array([0.45, 0.45]), np.array([0.55, 0.55])
    assert sampling.room_error(150, lo, hi) is None  # within what random draws could place on this segment
    rows, _ = sampling.sample_mixtures(100, [1, 1], lo, hi, 0)
    assert len(rows) == 100 and _min_gap(rows) >= 1e-3
