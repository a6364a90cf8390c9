"""The MinHash stage's second-stage check: sketch estimates against exact set arithmetic, and the stage run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from datatrove.data import Document
from pydantic import ValidationError

from cuvee.dedup import local_run
from cuvee.dedup.minhash import MinHashConfig, MinHasher
from cuvee.dedup.sketch_verify import VerifyParams, bottom_k, estimate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages() -> list[str]:
    with gzip.open(REPO / "data/curated/wcxb_dev_main_content.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["main_content"] or "" for line in f]
    return [t for t in texts if 2000 < len(t) < 6000][:40]


def exact(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    sa = set((a >> np.uint64(32)).tolist())
    sb = set((b >> np.uint64(32)).tolist())
    i = len(sa & sb)
    return i / len(sa | sb), i / min(len(sa), len(sb))


def pair_estimate(a: np.ndarray, b: np.ndarray, k: int) -> tuple[float, float]:
    (ska, na), (skb, nb_) = bottom_k(a, k), bottom_k(b, k)
    j, c = estimate(ska[None], np.array([na]), skb[None], np.array([nb_]))
    return float(j[0]), float(c[0])


def test_estimate_is_exact_when_the_sketch_holds_the_whole_set(pages):
    hasher = MinHasher(MinHashConfig())
    for a, b in zip(pages[0::2], pages[1::2]):
        half = a[: len(a) // 2]
        for x, y in ((a, half), (a + b, b), (a, b)):
            sx, sy = hasher.shingles(x), hasher.shingles(y)
            assert pair_estimate(sx, sy, 4096) == pytest.approx(exact(sx, sy), abs=1e-12)


def test_estimate_tracks_exact_values_with_a_small_sketch(pages):
    hasher = MinHasher(MinHashConfig())
    errors = []
    for i, a in enumerate(pages[:20]):
        b = pages[i + 20]
        # a page inside a longer page, and a lightly cut copy
        for x, y in ((a, a + "\n" + b), (a, a[len(a) // 5:])):
            sx, sy = hasher.shingles(x), hasher.shingles(y)
            errors.append(np.subtract(pair_estimate(sx, sy, 128), exact(sx, sy)))
    errors = np.abs(np.array(errors))
    # bottom-128 sampling: a standard error of ~0.04 at these similarities
    assert errors.max() < 0.2 and errors.mean() < 0.06


def clusters(params: dict, docs: list[str], tmp: Path) -> set[int]:
    """Positions of the documents the stage dropped as copies."""
    kept, _ = local_run.run_stage("minhash_dedup", params, [[Document(text=t, id=str(i)) for i, t in enumerate(docs)]],
                                  tmp)
    return set(range(len(docs))) - {int(d.id) for d in kept[0]}


def test_the_check_finds_a_page_inside_another_and_rejects_weak_edges(pages, tmp_path):
    inner, other = pages[0], pages[1]
    container = other + "\n" + inner  # holds all of `inner`: containment 1, Jaccard ~1/2
    docs = [inner, container, pages[3], pages[4]]
    low = {"num_bands": 128, "rows_per_band": 2}  # misses a pair at Jaccard 0.35 with P ~1e-8
    jac, con = exact(MinHasher(MinHashConfig()).shingles(inner), MinHasher(MinHashConfig()).shingles(container))
    assert con == 1.0 and 0.3 < jac < 0.6
    # FineWeb's 14x8 needs Jaccard ~0.75: the page inside another stays
    assert clusters({}, docs, tmp_path / "fineweb") == set()
    # low-threshold bands + containment check: the shorter page is dropped, the container kept
    assert clusters({**low, "verify": {"containment": 0.8}}, docs, tmp_path / "checked") == {0}
    # a container missing the first 200 characters: the bands alone still pair it; asked for near-identity, the
    # check rejects that edge, so nothing is dropped
    cut = docs[:1] + [container.replace(inner[:200], "")] + docs[2:]
    assert clusters(low, cut, tmp_path / "unchecked") == {0}
    assert clusters({**low, "verify": {"jaccard": 0.9, "containment": 0.999, "sketch_size": 4096}},
                    cut, tmp_path / "strict") == set()


def test_verify_needs_a_threshold():
    with pytest.raises(ValidationError, match="jaccard and/or containment"):
        VerifyParams()
    with pytest.raises(ValidationError):
        VerifyParams(containment=1.5)
