"""fastText quality models with any label scheme: DCLM's hq/cc, 1/0, multi-class; scores = P(positive label)."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

fasttext = pytest.importorskip("fasttext")

from cuvee.classifiers.fasttext_model import FastTextScorer, normalize

GOOD = "the committee reviewed the evidence and published a detailed report on water quality in the region".split()
BAD = "click here buy now cheap deals free shipping login cart subscribe cookie menu home".split()
MID = "recipe flour sugar butter oven bake minutes stir bowl eggs milk salt".split()


def _sentence(rng: random.Random, vocab: list[str], n: int = 12) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def train_model(tmp: Path, labels: list[str], loss: str = "softmax", n: int = 150) -> Path:
    """A tiny supervised model: one vocabulary per label (GOOD for the first, BAD for the second, MID for a third)."""
    rng = random.Random(0)
    vocabs = [GOOD, BAD, MID]
    lines = [f"__label__{lab} {_sentence(rng, vocabs[i])}" for _ in range(n) for i, lab in enumerate(labels)]
    rng.shuffle(lines)
    train = tmp / f"train_{'_'.join(labels)}_{loss}.txt"
    train.write_text("\n".join(lines) + "\n")
    path = tmp / f"model_{'_'.join(labels)}_{loss}.bin"
    # a fresh process per attempt: fastText 0.9.x now and then raises "Encountered NaN." on tiny files, and once it
    # has, further training in the same process tends to fail too
    code = ("import sys, fasttext; m = fasttext.train_supervised(input=sys.argv[1], epoch=5, lr=0.1, wordNgrams=2, dim=16, "
            "loss=sys.argv[3], minCount=1, seed=int(sys.argv[4]), thread=1, verbose=0, bucket=10_000); m.save_model(sys.argv[2])")
    for attempt in range(10):
        r = subprocess.run([sys.executable, "-c", code, str(train), str(path), loss, str(attempt)], capture_output=True, text=True)
        if r.returncode == 0:
            return path
        assert "NaN" in r.stderr, r.stderr
    raise RuntimeError(f"fastText training kept failing: {r.stderr[-500:]}")


TEXTS = [
    "The committee reviewed the evidence\nand published a detailed report.",
    "Click here! Buy now: cheap deals, free shipping.",
    "report on water quality; cookie menu login",
    "flour sugar butter and eggs, bake for 20 minutes",
    "",
]


def _reference(path: Path, label: str) -> np.ndarray:
    """P(label) from fastText's own ``predict(text, k=-1)`` (all labels)."""
    model = fasttext.load_model(str(path))
    out = []
    for t in TEXTS:
        labs, probs = model.predict(normalize(t), k=-1)
        d = dict(zip(labs, probs))
        out.append(min(float(d.get("__label__" + label, 0.0)), 1.0))
    return np.array(out)


@pytest.mark.parametrize(
    "labels, positive",
    [
        (["hq", "cc"], "hq"),  # DCLM's published model
        (["hq", "cc"], "__label__cc"),  # full form
        (["1", "0"], "1"),
        (["1", "0"], "0"),  # the positive label is the *second* label: not fastText's top-1 on good text
        (["good", "bad", "recipe"], "recipe"),  # multi-class
        (["good", "bad", "recipe"], "bad"),
    ],
)
def test_scores_equal_predict_all_labels(tmp_path, labels, positive):
    path = train_model(tmp_path, labels)
    scorer = FastTextScorer(path, positive)
    scores = scorer.score_batch(TEXTS)
    ref = _reference(path, positive.removeprefix("__label__"))
    np.testing.assert_allclose(scores, ref, rtol=1e-6, atol=1e-6)
    assert ((scores >= 0) & (scores <= 1)).all()
    # the scores discriminate: P(positive) is high on the text of its own vocabulary
    own = {"hq": 0, "good": 0, "1": 0, "cc": 1, "bad": 1, "0": 1, "recipe": 3}[positive.removeprefix("__label__")]
    assert scores[own] == scores[:4].max() and scores[own] > 0.5


def test_two_label_model_positive_not_returned_is_one_minus_other(tmp_path):
    """Hierarchical softmax prunes labels below ~1e-5 even with k=-1: P(positive) = 1 - P(other), not 0."""
    path = train_model(tmp_path, ["1", "0"], loss="hs", n=300)
    scorer = FastTextScorer(path, "0")
    model = fasttext.load_model(str(path))
    scores = scorer.score_batch(TEXTS)
    for t, s in zip(TEXTS, scores):
        labs, probs = model.predict(normalize(t), k=-1)
        d = dict(zip(labs, probs))
        expected = d["__label__0"] if "__label__0" in d else 1.0 - d["__label__1"]
        assert s == pytest.approx(min(max(expected, 0.0), 1.0), abs=1e-6)
    # P(1) + P(0) = 1 for a 2-label model, whichever label fastText left out
    scorer2 = FastTextScorer(path, "1")
    s1 = scorer2.score_batch(TEXTS)
    np.testing.assert_allclose(s1 + FastTextScorer(path, "0").score_batch(TEXTS), 1.0, atol=2e-4)


def test_wrong_label_lists_the_model_labels(tmp_path):
    path = train_model(tmp_path, ["hq", "cc"])
    with pytest.raises(ValueError) as e:
        FastTextScorer(path, "lq").score_batch(["x"])
    msg = str(e.value)
    assert "'lq'" in msg and "hq" in msg and "cc" in msg and "positive_label" in msg

    # at build time (recipe validation / run), not first on a worker
    from cuvee.classifiers.quality_stages import FastTextQualityParams, build_fasttext_quality

    p = FastTextQualityParams(model=str(path), positive_label="positive")
    with pytest.raises(ValueError, match=r"its labels are: (hq, cc|cc, hq)"):
        build_fasttext_quality(p, None)


def test_yaml_int_label(tmp_path):
    from cuvee.classifiers.quality_stages import FastTextQualityParams

    path = train_model(tmp_path, ["1", "0"])
    p = FastTextQualityParams(model=str(path), positive_label=1)
    assert p.positive_label == "1"
    np.testing.assert_allclose(FastTextScorer(path, p.positive_label).score_batch(TEXTS), _reference(path, "1"), atol=1e-6)


@pytest.mark.parametrize("labels, positive", [(["hq", "cc"], "hq"), (["1", "0"], "__label__0"), (["good", "bad", "recipe"], "recipe")])
def test_top_percent_any_label_scheme(tmp_path, labels, positive):
    """DCLM style: keep the corpus-wide top 10 % by P(positive) across shards, whatever the labels are called."""
    from cuvee.pipeline.runner import run_recipe

    path = train_model(tmp_path, labels)
    rng = random.Random(1)
    vocabs = [GOOD, BAD, MID]
    docs = []
    for i in range(60):
        # mixtures: the share of the positive label's vocabulary varies, so scores are spread out
        texts = [_sentence(rng, vocabs[j % len(labels)], 3) for j in range(len(labels))]
        mix = " ".join(texts[j] for j in range(len(labels)) for _ in range(1 + (i * (j + 1)) % 4))
        docs.append({"text": mix, "id": f"d{i}", "metadata": {"language": "en"}})
    inp = tmp_path / "in"
    inp.mkdir()
    for f in range(2):
        with gzip.open(inp / f"part{f:02d}.jsonl.gz", "wt") as fh:
            for d in docs[f::2]:
                fh.write(json.dumps(d) + "\n")
    run_dir = tmp_path / f"run_{'_'.join(labels)}"
    recipe = {"name": "t", "run_dir": str(run_dir), "input": {"paths": [str(inp / "*.jsonl.gz")], "format": "jsonl"},
              "stages": [{"stage": "fasttext_quality", "model": str(path), "positive_label": positive, "top_percent": 10}],
              "executor": {"kind": "local", "tasks": 2, "workers": 1}}
    run_recipe(recipe)

    scores = FastTextScorer(path, positive).score_batch([d["text"] for d in docs])
    cutoff = np.quantile(scores, 0.9, method="higher")
    expected = {d["id"] for d, s in zip(docs, scores) if s >= cutoff}
    from cuvee.pipeline.io import iter_documents

    kept = {d.id: d.metadata["fasttext_quality_score"] for d in iter_documents(run_dir / "output")}
    assert set(kept) == expected
    assert 6 <= len(kept) <= 8  # ~10 % of 60 (ties at the cutoff are kept)
    assert min(kept.values()) >= max(s for d, s in zip(docs, scores) if d["id"] not in expected)


class _StubModel:
    """What fastText hands back when it leaves labels out (hierarchical softmax prunes those below ~1e-5)."""

    def __init__(self, labels, rows):
        self._labels, self._rows = labels, rows

        class F:
            @staticmethod
            def multilinePredict(lines, k, threshold, on_unicode_error):
                assert k == -1  # every label is asked for, never fastText's default top-1
                return [r[0] for r in rows[: len(lines)]], [np.array(r[1]) for r in rows[: len(lines)]]

        self.f = F()

    def get_labels(self):
        return list(self._labels)


def test_positive_label_left_out():
    rows = [(["__label__cc"], [0.99999]), (["__label__hq", "__label__cc"], [0.25, 0.75]), ([], []), (["__label__hq"], [1.00001])]
    s = FastTextScorer("unused.bin", "hq")
    s._model, s._other = _StubModel(["__label__hq", "__label__cc"], rows), "__label__cc"
    np.testing.assert_allclose(s.score_batch(["a", "b", "c", "d"]), [1 - 0.99999, 0.25, 0.0, 1.0], atol=1e-9)
    # multi-class: a label left out has (near) zero probability
    m = FastTextScorer("unused.bin", "c")
    m._model, m._other = _StubModel(["__label__a", "__label__b", "__label__c"], [(["__label__a", "__label__b"], [0.6, 0.4])]), None
    assert m.score_batch(["x"]).tolist() == [0.0]
