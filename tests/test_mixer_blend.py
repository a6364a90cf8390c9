"""Blending and shuffling primitives: exact prefix proportions, O(1)-memory permutations."""

import random

import pytest

from cuvee.mixer.blend import greedy_blend
from cuvee.mixer.shuffle import LCGPermutation, derive_seed, epoch_stream


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 17, 64, 65, 1000, 4097])
def test_lcg_is_a_permutation(n):
    perm = list(LCGPermutation(n, seed=derive_seed(1234, "web", 0)))
    assert sorted(perm) == list(range(n))


def test_lcg_seeded_and_actually_shuffles():
    a = list(LCGPermutation(1000, 1))
    assert a == list(LCGPermutation(1000, 1))
    b = list(LCGPermutation(1000, 2))
    assert a != b
    # far from identity and from reversal: few fixed points, many descents
    assert sum(i == x for i, x in enumerate(a)) < 20
    descents = sum(a[i] > a[i + 1] for i in range(len(a) - 1))
    assert 300 < descents < 700


def test_epoch_stream_gives_each_document_once_per_epoch():
    stream = epoch_stream(37, seed=5, name="src")
    items = [next(stream) for _ in range(37 * 3)]
    for e in range(3):
        docs = [d for ep, d in items if ep == e]
        assert sorted(docs) == list(range(37))
    # different epochs use different orders
    assert [d for ep, d in items if ep == 0] != [d for ep, d in items if ep == 1]


@pytest.mark.parametrize("weights", [[0.5, 0.25, 0.17, 0.08], [0.7, 0.3], [0.999, 0.001], [1 / 3, 1 / 3, 1 / 3]])
def test_greedy_blend_exact_at_every_prefix(weights):
    rng = random.Random(0)
    lengths = [[rng.randint(1, 400) for _ in range(20000)] for _ in weights]
    max_len = max(max(x) for x in lengths)
    pos = [0] * len(weights)

    def next_doc(i):
        n = lengths[i][pos[i]]
        pos[i] += 1
        return n

    counts = [0] * len(weights)
    total = 0
    target = 500_000
    for i, n in greedy_blend(weights, target, next_doc):
        counts[i] += n
        total += n
        for w, c in zip(weights, counts):
            # every prefix holds each source's share to within one document
            assert abs(c - w * total) <= max_len
    assert target <= total < target + max_len


def test_greedy_blend_is_deterministic_and_starts_with_heaviest_source():
    def run():
        out = []
        for i, _n in greedy_blend([0.2, 0.8], 1000, lambda i: 10 + i):
            out.append(i)
        return out

    a = run()
    assert a == run()
    assert a[0] == 1
