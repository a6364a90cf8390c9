"""quality_ensemble ``combine: weighted`` depends on the weights' ratios only: w and c*w give the same buckets for
c from 1e-300 to 1e300, and equal weights of any size give exactly ``mean``'s buckets (issue #37: two weights of
1e308 summed to inf, 35 of 60 documents moved bucket or the run stopped on a NaN; 5e-324 moved 33 of 60)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from datatrove.data import Document

from cuvee.classifiers.ensemble import EnsembleBucketer, EnsembleMember

BUCKETS = 20
KEYS = ("a_score", "b_score", "c_score")


def _corpus(every_member: bool) -> list[dict]:
    rng = random.Random(3)
    docs = []
    for i in range(60):
        meta = {k: rng.uniform(0, 1) for k in KEYS}
        if not every_member and i % 5 == 0:
            meta.pop(KEYS[i % 3])
        docs.append(meta)
    return docs


def _buckets(tmp_path, docs: list[dict], combine: str, weights=(1.0, 1.0, 1.0)) -> list[int]:
    for i, k in enumerate(KEYS):
        np.save(tmp_path / f"{i}.npy", np.sort([d[k] for d in docs if k in d]))
    members = [EnsembleMember(key=k, weight=w) for k, w in zip(KEYS, weights)]
    step = EnsembleBucketer(members, str(tmp_path), BUCKETS, combine, "quality_bucket")
    out = step.run([Document(text="x", id=str(j), metadata=dict(d)) for j, d in enumerate(docs)])
    return [d.metadata["quality_bucket"] for d in out]


def _mean_reference(docs: list[dict]) -> list[int]:
    """Exact fractions: the percentile rank of each present score, their plain mean, floor(buckets * mean)."""
    ref = []
    for d in docs:
        pcts = []
        for k in KEYS:
            if k in d:
                xs = [e[k] for e in docs if k in e]
                pcts.append(Fraction(sum(x < d[k] for x in xs) + sum(x <= d[k] for x in xs), 2 * len(xs)))
        ref.append(min(BUCKETS - 1, math.floor(BUCKETS * sum(pcts) / len(pcts))))
    return ref


# 5e307: each weight finite, their sum not
SCALES = [1e-300, 1e-200, 1e-100, 1e-20, 1e-5, 0.37, 1.0, 3.0, 1e5, 1e20, 1e100, 1e200, 1e300, 5e307]


@pytest.mark.parametrize("every_member", [True, False])
def test_weights_and_their_multiples_give_the_same_buckets(tmp_path, every_member):
    docs = _corpus(every_member)
    weights = (0.5, 2.0, 1.25)
    base = _buckets(tmp_path, docs, "weighted", weights)
    assert len(set(base)) > 5
    for c in SCALES:
        assert _buckets(tmp_path, docs, "weighted", tuple(c * w for w in weights)) == base, c


@pytest.mark.parametrize("every_member", [True, False])
@pytest.mark.parametrize("w", [5e-324, 1e-300, 1e-5, 1.0, 7.0, 1e300, 1e308, 1.7976931348623157e308])
def test_equal_weights_of_any_size_are_exactly_mean(tmp_path, every_member, w):
    docs = _corpus(every_member)
    mean = _buckets(tmp_path, docs, "mean")
    assert mean == _mean_reference(docs)
    assert _buckets(tmp_path, docs, "weighted", (w, w, w)) == mean


def test_a_weight_far_below_the_others_counts_only_where_it_is_alone(tmp_path):
    """Weights 5e-324, 1, 1: where b or c is present, a's percentile moves nothing (its share is below any
    rounding); where a is the only member a document has, its bucket is a's own."""
    docs = _corpus(every_member=True)
    for d in docs[:6]:
        d.pop("b_score"), d.pop("c_score")
    got = _buckets(tmp_path, docs, "weighted", (5e-324, 1.0, 1.0))
    without_a = _buckets(tmp_path, [{k: v for k, v in d.items() if k != "a_score"} for d in docs[6:]], "mean")
    assert got[6:] == without_a
    xs = sorted(d["a_score"] for d in docs)
    for d, b in zip(docs[:6], got[:6]):
        frac = Fraction(sum(x < d["a_score"] for x in xs) + sum(x <= d["a_score"] for x in xs), 2 * len(xs))
        assert b == min(BUCKETS - 1, math.floor(BUCKETS * frac))


def test_a_mean_on_a_bucket_boundary_lands_in_that_bucket(tmp_path):
    """Ten documents; the first is ranked 1st, 7th and 10th by the three members: percentiles 1/20, 13/20, 19/20,
    mean 11/20, bucket 11 exactly. Summed in floats the mean came out just below 0.55 and the bucket was 10."""
    docs = [{k: float(i) for k in KEYS} for i in range(10)]
    docs[0] = {"a_score": -1.0, "b_score": 6.5, "c_score": 99.0}
    ref = _mean_reference(docs)
    assert ref[0] == 11
    assert _buckets(tmp_path, docs, "mean") == ref
    assert _buckets(tmp_path, docs, "weighted", (2.0, 2.0, 2.0)) == ref
