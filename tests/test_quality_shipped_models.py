"""The quality models the recipes ship (issue #36): the perplexity scorer's reference LM and the DCLM-style fastText
load offline and score deterministically; the reference LM ranks a word-shuffled page below its original on pages
it never saw; a rank-file tokenizer (bytes256) named by a manifest is found by name and fingerprint, so such a
model exports to Hugging Face and scores; `classify train` reads negatives from another text field; the rules that
choose what the recipes ship behave as written."""

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import cuvee

REPO = Path(cuvee.__file__).resolve().parents[1]  # the checkout under test (also when this file is copied elsewhere)
MODELS = REPO / "cuvee" / "assets" / "models"
REFERENCE_LM = MODELS / "reference_lm"


def _unseen_pages(n: int, chars: int = 1200) -> list[str]:
    """WCXB main content of non-article pages: the reference LM trained on the article pages only."""
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    texts = [r["main_content"][:chars] for r in rows if r["page_type"] == "forum" and len(r["main_content"] or "") >= chars]
    return texts[:n]


def _shuffled(text: str, seed: int) -> str:
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


@pytest.fixture(scope="module")
def scorer():
    from cuvee.classifiers.perplexity import PerplexityScorer

    return PerplexityScorer(str(REFERENCE_LM), device="cpu", threads=1)


def test_reference_lm_is_an_offline_hf_folder_on_the_shipped_byte_tokenizer():
    from cuvee.classifiers.perplexity import model_kind
    from cuvee.mixer import load_tokenizer

    assert model_kind(REFERENCE_LM) == "hf"
    recorded = json.loads((REFERENCE_LM / "cuvee_tokenizer.json").read_text())
    assert recorded["fingerprint"] == load_tokenizer("bytes256.tiktoken").fingerprint
    assert json.loads((REFERENCE_LM / "config.json").read_text())["vocab_size"] == 257
    assert (REFERENCE_LM / "model.safetensors").stat().st_size < 8 << 20  # small enough to ship


def test_reference_lm_ranks_every_shuffled_page_below_its_original(scorer):
    pages = _unseen_pages(8)
    assert len(pages) == 8
    orig = scorer.score_batch(pages)
    shuf = scorer.score_batch([_shuffled(p, i) for i, p in enumerate(pages)])
    assert (orig < shuf).all(), (orig, shuf)
    assert (orig < 8.0).all()  # better than a uniform guess over 256 byte values (8 bits per byte)


def test_reference_lm_scores_deterministically_whatever_the_batch(scorer):
    from cuvee.classifiers.perplexity import PerplexityScorer

    pages = _unseen_pages(6)
    again = PerplexityScorer(str(REFERENCE_LM), device="cpu", threads=1)
    assert np.array_equal(scorer.score_batch(pages), again.score_batch(pages))
    alone = np.array([scorer.score_batch([p])[0] for p in pages[:3]])
    np.testing.assert_allclose(alone, scorer.score_batch(pages)[:3], rtol=1e-5)


def test_dclm_standin_loads_offline_scores_deterministically_and_says_how_it_was_made():
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DCLM_STANDIN_FASTTEXT

    texts = _unseen_pages(5) + ["Home | About | Contact | Login | Cart (0) | Privacy Policy"]
    a = FastTextScorer(DCLM_STANDIN_FASTTEXT).score_batch(texts)
    b = FastTextScorer(DCLM_STANDIN_FASTTEXT).score_batch(texts)
    assert np.array_equal(a, b) and ((a >= 0) & (a <= 1)).all()
    assert sorted(lab.removeprefix("__label__") for lab in FastTextScorer(DCLM_STANDIN_FASTTEXT).labels()) == ["hq", "lq"]
    made = json.loads(Path(f"{DCLM_STANDIN_FASTTEXT}.json").read_text())
    assert made["kind"] == "fasttext" and DCLM_STANDIN_FASTTEXT.stat().st_size < 6 << 20


def test_a_rank_file_tokenizer_is_found_by_name_and_fingerprint(tmp_path):
    """The manifest records bytes256 by name: before, the HF export and the perplexity scorer asked tiktoken for
    an encoding called 'bytes256' and stopped."""
    from transformers import PreTrainedTokenizerFast

    from cuvee.classifiers.perplexity import _cuvee_tokenizer
    from cuvee.mixer import load_tokenizer
    from cuvee.train.hf_tokenizer import export_tokenizer

    block = load_tokenizer("bytes256.tiktoken").describe()
    assert block["name"] == "bytes256"
    text = "héllo wörld, 5 €"
    encode, count = _cuvee_tokenizer(block)
    assert encode([text])[0].tolist() == list(text.encode("utf-8"))  # byte-level: id == byte value
    assert count(encode([text])[0]) == len(text.encode("utf-8"))
    assert export_tokenizer(block, tmp_path)
    hf = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert hf(text, add_special_tokens=False)["input_ids"] == list(text.encode("utf-8"))


def test_a_rank_file_of_another_vocabulary_or_unpinned_is_refused():
    from cuvee.mixer import load_tokenizer
    from cuvee.mixer.tokenizers import TokenizerMismatchError, manifest_tokenizer

    block = load_tokenizer("bytes256.tiktoken").describe()
    with pytest.raises(TokenizerMismatchError, match="fingerprint"):
        manifest_tokenizer({**block, "fingerprint": "0" * 64})
    with pytest.raises(ValueError, match="no fingerprint"):
        manifest_tokenizer({k: v for k, v in block.items() if k != "fingerprint"})


def test_classify_train_reads_the_negatives_text_from_its_own_field(tmp_path):
    from cuvee.cli import main as cuvee_main

    pos, neg = tmp_path / "pos.jsonl", tmp_path / "neg.jsonl"
    pages = _unseen_pages(10, chars=300)
    pos.write_text("".join(json.dumps({"main_content": p, "page_type": "forum"}) + "\n" for p in pages))
    neg.write_text("".join(json.dumps({"text": f"cheap deals {i} buy now click here free shipping"}) + "\n"
                           for i in range(10)))
    out = tmp_path / "m.bin"
    res = CliRunner().invoke(cuvee_main, ["classify", "train", "--positive", str(pos), "--text-key", "main_content",
                                          "--negative", str(neg), "--negative-text-key", "text", "-o", str(out),
                                          "--valid-fraction", "0", "--threads", "1", "--bucket", "10000"])
    assert res.exit_code == 0, res.output
    report = json.loads(Path(f"{out}.metrics.json").read_text())
    assert report["train_examples"] == 20 and report["skipped"] == {}


def _results(diffs_per_set: list[dict]) -> list[dict]:
    return [{"dataset": f"set{i}", "config_diffs": d} for i, d in enumerate(diffs_per_set)]


def _d(lo: float, hi: float) -> dict:
    return {"diff": (lo + hi) / 2, "ci95": [lo, hi]}


@pytest.mark.parametrize("max_ci, expected", [([(0.01, 0.05), (0.02, 0.04)], "max"),
                                              ([(0.01, 0.05), (-0.01, 0.04)], "mean"),
                                              ([(-0.05, -0.01), (-0.04, -0.02)], "mean")])
def test_r1_keeps_mean_unless_max_is_better_on_every_set(max_ci, expected, monkeypatch):
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _quality_recipes as qr

    pair = {}
    for a in qr.candidates():
        for b in qr.candidates():
            if a.recipe == b.recipe and a != b:
                pair[(a.name, b.name)] = _d(-0.01, 0.01)  # no change helps anywhere
    sets = [dict(pair), dict(pair)]
    for s, (lo, hi) in zip(sets, max_ci):
        for a in qr.candidates():
            if a.recipe == "nemotron_cc" and a.combine == "max":
                from dataclasses import replace

                s[(a.name, replace(a, combine="mean").name)] = _d(lo, hi)
    picked = qr.pick(_results(sets))
    assert picked["nemotron_cc"]["chosen"].combine == expected
    assert picked["nemotron_cc"]["chosen"].score == ("demo_fasttext", "language")  # nothing else helped
    assert picked["dclm"]["chosen"] == qr.SHIPPED_BEFORE["dclm"] and picked["fineweb"]["chosen"] == qr.SHIPPED_BEFORE["fineweb"]


def test_r2_adopts_a_change_above_zero_somewhere_and_below_zero_nowhere():
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _quality_recipes as qr

    before = qr.SHIPPED_BEFORE["dclm"]
    swap = qr.Config("dclm", ("dclm_standin",))
    base = {(a.name, b.name): _d(-0.01, 0.01) for a in qr.candidates() for b in qr.candidates()
            if a.recipe == b.recipe and a != b}
    helps = [base | {(swap.name, before.name): _d(0.01, 0.05)}, base]
    hurts = [base | {(swap.name, before.name): _d(0.01, 0.05)}, base | {(swap.name, before.name): _d(-0.05, -0.01)}]
    assert qr.pick(_results(helps))["dclm"]["chosen"] == swap
    assert qr.pick(_results(hurts))["dclm"]["chosen"] == before


def test_final_ranking_puts_every_dropped_document_below_every_kept_one():
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _quality_recipes as qr

    rng = np.random.default_rng(0)
    passes = rng.random(50) < 0.6
    members = {"dclm_standin": rng.random(50), "perplexity": rng.random(50) * 3}
    for cfg in (qr.Config("dclm", ("dclm_standin",)), qr.Config("dclm", ("dclm_standin",), tail_drop=True)):
        final = qr.final_ranking(cfg, passes, members, ensemble=None)
        kept = final >= 2
        assert kept.sum() <= passes.sum() and not (kept & ~passes).any()
        assert final[kept].min() > final[~kept].max()
        # within the kept documents the order is the classifier's
        k = np.flatnonzero(kept)
        assert (np.argsort(final[k], kind="stable") == np.argsort(members["dclm_standin"][k], kind="stable")).all()
    tail = qr.final_ranking(qr.Config("fineweb", tail_drop=True), passes, members, ensemble=None) >= 2
    bpb = members["perplexity"]
    assert tail.sum() == round(passes.sum() * 0.666) or abs(tail.sum() - passes.sum() * 0.666) <= 1
    assert bpb[tail].max() <= bpb[passes & ~tail].min()
