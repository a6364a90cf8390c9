"""Hugging Face sequence-classification models in transformer_quality / topic / domain (no downloads).

Tiny random-weight models are built in a session fixture: a BERT regression head (FineWeb-Edu-shaped) and
a DeBERTa-v2 3-class head (High/Medium/Low, NVIDIA-quality-shaped), both with a WordPiece tokenizer made
from a vocabulary written here, saved with ``save_pretrained`` and loaded back through the Auto classes.
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from datatrove.data import Document

from cuvee.classifiers import hf_sequence as hf
from cuvee.pipeline.compiler import compile_recipe
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError, load_recipe, parse_recipe
from cuvee.pipeline.registry import BuildContext, get_stage
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
WORDS = ["the", "a", "of", "and", "to", "in", "is", "was", "for", "on", "with", "as", "by", "at", "from", "this", "that", "it", "are", "be", "or", "an", "students", "learn", "school", "science", "math", "history", "lesson", "teacher", "course", "study", "research", "data", "energy", "water", "cells", "music", "game", "team", "price", "buy", "sale", "shop", "cheap", "click", "here", "login", "page", "home", "news", "today", "report", "city", "market"]
MAX_POS = 64


def _texts(n=23, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 90)))) + "." for _ in range(n)]


def _spread(model, tok, mean, std):
    """Rescale the random classifier layer so that outputs differ clearly between texts (per output column)."""
    model.eval()
    with torch.no_grad():
        enc = tok(_texts(40, seed=9), padding=True, truncation=True, return_tensors="pt")
        z = model(**enc).logits
        scale = std / z.std(0).clamp(min=1e-9)
        model.classifier.weight.mul_(scale[:, None])
        model.classifier.bias.copy_(mean - (z.mean(0) - model.classifier.bias) * scale)


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
    )

    root = tmp_path_factory.mktemp("hf_models")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *WORDS, *"abcdefghijklmnopqrstuvwxyz",
             *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab_file=str(root / "vocab.txt"), model_max_length=MAX_POS)
    torch.manual_seed(0)
    reg = BertForSequenceClassification(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=2, intermediate_size=64, num_labels=1,
                                                   problem_type="regression", max_position_embeddings=MAX_POS, initializer_range=0.5))
    _spread(reg, tok, mean=2.5, std=1.5)  # random outputs spread over FineWeb-Edu's 0..5 range
    reg.save_pretrained(root / "edu")
    tok.save_pretrained(root / "edu")
    cls = DebertaV2ForSequenceClassification(DebertaV2Config(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=MAX_POS, num_labels=3, id2label={0: "High", 1: "Medium", 2: "Low"},
        label2id={"High": 0, "Medium": 1, "Low": 2}, initializer_range=0.5))
    _spread(cls, tok, mean=0.0, std=2.0)
    cls.save_pretrained(root / "quality")
    tok.save_pretrained(root / "quality")
    return {"edu": str(root / "edu"), "quality": str(root / "quality")}


def direct(path: str, texts: list[str]) -> np.ndarray:
    """The model card's way: one document at a time, plain transformers."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        return np.stack([model(**tok(t, return_tensors="pt", padding="longest", truncation=True)).logits[0].numpy()
                         for t in texts])


def ctx(tmp_path, name="stage"):
    return BuildContext(run_dir=tmp_path, work_dir=tmp_path / "work", tasks=1, stage_index=0, stage_name=name)


def run_steps(steps, docs):
    data = docs
    for s in steps:
        data = s.run(data)
    return list(data)


# ---------------------------------------------------------------- scorer == direct forward


def test_regression_scores_equal_direct_forward_in_input_order(models):
    texts = _texts()
    want = direct(models["edu"], texts)[:, 0]
    for bs in (1, 4, 64):  # length-sorted batches, order restored, padding does not change the result
        got = hf.HFSequenceScorer(models["edu"], batch_size=bs, device="cpu").score_batch(texts)
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert want.std() > 0.3  # the fixture's outputs really differ between texts


def test_int_score_rounding_and_clamping(models):
    assert [hf.int_score(s) for s in (-3.0, 0.4, 2.5, 2.51, 3.49, 3.5, 4.6, 9.0)] == [0, 0, 2, 3, 3, 4, 5, 5]
    sc = hf.HFSequenceScorer(models["edu"], int_score=True, int_key="edu_int_score", device="cpu")
    scores, extras = sc.score_with_extras(_texts())  # returned, not left on the scorer
    assert [e["edu_int_score"] for e in extras] == [int(round(max(0, min(s, 5)))) for s in scores]
    assert not hasattr(sc, "last_extras")


def test_positive_label_probability_and_label_to(models):
    texts = _texts(seed=1)
    z = direct(models["quality"], texts)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    sc = hf.HFSequenceScorer(models["quality"], positive_label="Medium", label_to="quality_label", batch_size=5, device="cpu")
    np.testing.assert_allclose(sc.score_batch(texts), p[:, 1], atol=1e-5)
    scores, extras = sc.score_with_extras(texts)
    np.testing.assert_allclose(scores, p[:, 1], atol=1e-5)
    names = ["High", "Medium", "Low"]
    assert [e["quality_label"] for e in extras] == [names[i] for i in p.argmax(1)]
    assert len({e["quality_label"] for e in extras}) >= 2


def test_very_long_document_is_truncated(models):
    sc = hf.HFSequenceScorer(models["edu"], device="cpu")
    long_doc = " ".join(WORDS * 3000)  # ~180k words, far beyond 64 positions
    out = sc.score_batch(["short text.", long_doc])
    assert sc.max_length == MAX_POS and np.isfinite(out).all()
    np.testing.assert_allclose(out[1], direct(models["edu"], [long_doc[:5000]])[0, 0], atol=1e-4)
    assert hf.HFSequenceScorer(models["edu"], max_length=16, device="cpu").score_batch([long_doc]).shape == (1,)


def test_refuses_non_classifier_folder(tmp_path):
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    with pytest.raises(ValueError, match="ForSequenceClassification"):
        hf.check_options(str(tmp_path / "enc"))


# ---------------------------------------------------------------- recipe validation


def _recipe(tmp_path, stages):
    return {"name": "t", "run_dir": str(tmp_path / "run"), "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": stages, "executor": {"kind": "local", "tasks": 2, "workers": 1}}


@pytest.mark.parametrize("stage", [
    {"stage": "transformer_quality", "positive_label": "Excellent"},
    {"stage": "topic", "keep": ["High", "Excellent"]},
    {"stage": "domain", "label_thresholds": {"Excellent": 0.5}},
])
def test_wrong_label_fails_validation_listing_labels(models, tmp_path, stage):
    with pytest.raises(RecipeError) as e:
        parse_recipe(_recipe(tmp_path, [{**stage, "model": models["quality"]}]))
    assert "Excellent" in str(e.value) and "['High', 'Medium', 'Low']" in str(e.value)


def test_option_mismatches_fail_validation(models, tmp_path):
    bad = [{"model": models["edu"], "positive_label": "High"},          # regression has no labels
           {"model": models["quality"]},                               # multi-class needs positive_label or label_to
           {"model": models["quality"], "positive_label": "High", "int_score": True}]
    for extra in bad:
        with pytest.raises(RecipeError):
            parse_recipe(_recipe(tmp_path, [{"stage": "transformer_quality", **extra}]))


def test_fineweb_edu_recipe_validates_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    r = load_recipe(REPO / "recipes" / "fineweb_edu.yaml")
    tq = next(e.params for e in r.stage_entries if e.name == "transformer_quality")
    assert tq.model == "HuggingFaceFW/fineweb-edu-classifier" and tq.min_int_score == 3
    jobs = compile_recipe(r, tmp_path / "run")  # builds every stage; nothing is loaded or downloaded
    assert jobs


# ---------------------------------------------------------------- stages


def test_transformer_quality_min_int_score_and_label_to(models, tmp_path):
    texts = _texts(40, seed=2)
    spec = get_stage("transformer_quality")
    steps = spec.build(spec.params(model=models["edu"], name="edu", min_int_score=3, batch_size=8), ctx(tmp_path))
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    kept = run_steps(steps, docs)
    scores = direct(models["edu"], texts)[:, 0]
    assert {d.id for d in kept} == {str(i) for i, s in enumerate(scores) if hf.int_score(s) >= 3}
    assert 0 < len(kept) < len(texts)
    assert all(d.metadata["edu_int_score"] == hf.int_score(d.metadata["edu_score"]) for d in kept)

    steps = spec.build(spec.params(model=models["quality"], positive_label="High", label_to="quality"), ctx(tmp_path))
    out = run_steps(steps, [Document(text=t, id=str(i)) for i, t in enumerate(texts)])
    assert len(out) == len(texts) and all(d.metadata["quality"] in {"High", "Medium", "Low"} for d in out)


def test_topic_and_domain_with_hf_model(models, tmp_path):
    texts = _texts(30, seed=3)
    z = direct(models["quality"], texts)
    names = np.array(["High", "Medium", "Low"])
    best = names[z.argmax(1)]
    spec = get_stage("topic")
    out = run_steps(spec.build(spec.params(model=models["quality"], keep=["High", "Medium"], batch_size=7), ctx(tmp_path)),
                    [Document(text=t, id=str(i)) for i, t in enumerate(texts)])
    assert [d.id for d in out] == [str(i) for i in range(len(texts)) if best[i] in ("High", "Medium")]
    assert all(d.metadata["topic"] == best[int(d.id)] for d in out)

    spec = get_stage("domain")
    (tagger,) = spec.build(spec.params(model=models["quality"], label_thresholds={lab: 1.01 for lab in names}), ctx(tmp_path))
    out = run_steps([tagger], [Document(text=t, id=str(i)) for i, t in enumerate(texts)])
    assert len(out) == len(texts) and {d.metadata["domain"] for d in out} == {"general"}  # no label reaches 1.01
    (rules,) = spec.build(spec.params(), ctx(tmp_path))  # the rule-based mode is untouched
    assert rules.filter(Document(text="def f(x):\n    return x\n", id="c")) is True


def test_run_recipe_threshold_keeps_what_scores_say(models, tmp_path):
    texts = _texts(36, seed=4)
    (tmp_path / "in").mkdir()
    for f in range(2):
        with gzip.open(tmp_path / "in" / f"part{f}.jsonl.gz", "wt") as fh:
            for i in range(f, len(texts), 2):
                fh.write(json.dumps({"text": texts[i], "id": f"d{i}"}) + "\n")
    scores = direct(models["edu"], texts)[:, 0]
    threshold = float(np.median(scores))
    stats = run_recipe(_recipe(tmp_path, [{"stage": "transformer_quality", "model": models["edu"], "threshold": threshold,
                                           "int_score": True, "batch_size": 8}]))
    a = stats["accounting"]
    assert a["balanced"] and a["records_read"] == len(texts) == a["kept"] + a["dropped"]
    kept = {d.id: d for d in iter_documents(tmp_path / "run" / "output")}
    assert set(kept) == {f"d{i}" for i, s in enumerate(scores) if s >= threshold}
    for d in kept.values():
        i = int(d.id[1:])
        assert d.metadata["transformer_quality_score"] == pytest.approx(scores[i], abs=1e-4)
        assert d.metadata["transformer_quality_int_score"] == hf.int_score(scores[i])


# ---------------------------------------------------------------- zero-shot topic: sensitive labels need a minimum similarity


def test_guarded_argmax_gives_runner_up_below_the_minimum():
    from cuvee.classifiers.topic import SENSITIVE_MIN_SIMILARITY, guarded_argmax

    labels = ["adult", "shopping_products", "sports"]
    sims = np.array([[0.14, 0.12, 0.05],   # weak "adult" (a mattress review): runner-up wins
                     [0.45, 0.20, 0.10],   # clearly adult
                     [0.05, 0.30, 0.40]])
    assert guarded_argmax(sims, labels, {}).tolist() == [0, 0, 2]
    assert guarded_argmax(sims, labels, SENSITIVE_MIN_SIMILARITY).tolist() == [1, 0, 2]
    assert SENSITIVE_MIN_SIMILARITY["adult"] == pytest.approx(0.30)


def test_topic_params_modes(models, tmp_path):
    spec = get_stage("topic")
    with pytest.raises(ValueError, match="unknown topics"):
        spec.params(keep=["no_such_topic"])
    with pytest.raises(ValueError, match="not both"):
        spec.params(head=str(tmp_path), model=models["quality"])
    steps = spec.build(spec.params(keep=["sports"], min_similarity={}), ctx(tmp_path))
    assert len(steps) == 2 and steps[0].min_similarity == {} and steps[1].keep == {"sports"}
    assert spec.build(spec.params(), ctx(tmp_path))[0].min_similarity == {"adult": 0.30}


def test_tagging_with_a_regression_model_fails_validation(models, tmp_path):
    for stage in ("topic", "domain"):
        with pytest.raises(RecipeError, match="no labels"):
            parse_recipe(_recipe(tmp_path, [{"stage": stage, "model": models["edu"]}]))


def test_top_percent_barrier_keeps_the_extras_annotator(models, tmp_path):
    from cuvee.pipeline.registry import Barrier

    spec = get_stage("transformer_quality")
    built = spec.build(spec.params(model=models["edu"], top_percent=10, int_score=True), ctx(tmp_path))
    assert isinstance(built, Barrier) and isinstance(built.before[0], hf.HFScoreAnnotator)
    assert built.before[0].scores_dir is not None
