"""ccNet perplexity stage: exact bits per byte, a behaviour check, corpus-wide buckets over shards, keep/accounting.

A tiny byte-level Llama is trained once per session with cuvee's own trainer on a "reference corpus" (clean
English main content from data/curated); nothing is downloaded.
"""

import gzip
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from datatrove.data import Document

from cuvee.classifiers.perplexity import (
    PercentileBuckets,
    PerplexityAnnotator,
    PerplexityFilter,
    PerplexityScorer,
    assign_bucket,
    bucket_cutoffs,
    document_windows,
)
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError, parse_recipe
from cuvee.pipeline.registry import Barrier, BuildContext, get_stage
from cuvee.pipeline.runner import run_recipe
from cuvee.train.checkpoint import load_checkpoint
from cuvee.train.config import ModelConfig, TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
from cuvee.train.model import Llama
from cuvee.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
WINDOW = 64
GERMAN = ("Die Stadtverwaltung hat am Montag bekanntgegeben, dass die Bauarbeiten an der neuen Brücke über den "
          "Fluss im kommenden Frühjahr beginnen werden. Nach Angaben der Behörde sollen die Kosten deutlich "
          "höher ausfallen als ursprünglich geplant, weil zusätzliche Prüfungen des Untergrunds nötig wurden.")


@pytest.fixture(scope="session")
def pages():
    train_rows, heldout = split_heldout(load_wcxb())

    def clean(rows):
        return [r["main_content"] for r in rows if r.get("main_content") and len(r["main_content"]) > 300]

    return clean(train_rows), clean(heldout)


@pytest.fixture(scope="session")
def ref_model(tmp_path_factory, pages):
    """A `cuvee train` output folder: byte-level model trained on the reference corpus (clean English)."""
    root = tmp_path_factory.mktemp("ppl_ref")
    train_rows, _ = split_heldout(load_wcxb())
    build_variant_mix(root / "ref", "ref", train_rows[:80], {"clean": 1.0}, max_doc_bytes=2000)
    cfg = TrainConfig(name="ref", model={"dim": 48, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": WINDOW},
                      data={"paths": [str(root / "ref")], "seq_len": WINDOW, "seed": 1},
                      optim={"lr": 5e-3, "warmup_steps": 5, "schedule": "cosine"}, steps=80, micro_batch=8,
                      log_every=40, out_dir=str(root / "run"), threads=1)
    train(cfg, quiet=True)
    return root / "run"


def _independent_bpb(model: Llama, text: str, eos: int, window: int) -> float:
    """bpb by hand: bytes + EOS, windows of `window` tokens each run alone at positions 0.., plain log-softmax."""
    ids = list(text.encode("utf-8")) + [eos]
    nats = 0.0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, window):
            inp = torch.tensor([ids[s : s + window]])
            logp = torch.log_softmax(model(inp).double()[0], dim=-1)
            targets = ids[s + 1 : s + window + 1]
            nats -= sum(float(logp[i, t]) for i, t in enumerate(targets))
    return nats / math.log(2) / len(text.encode("utf-8"))


def _load_model(run):
    state = load_checkpoint(run)
    model = Llama(ModelConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    return model.eval(), state["tokenizer"]["eos_id"]


def test_bpb_equals_an_independent_forward(ref_model, pages):
    model, eos = _load_model(ref_model)
    short = "The committee reviewed the proposal for three months."
    long = pages[1][0][:500]  # several windows: the chunking is checked too
    multibyte = "Café déjà vu — naïve façade, 東京."
    scorer = PerplexityScorer(str(ref_model), device="cpu")
    texts = [short, long, multibyte, pages[1][1][:300]]
    got = scorer.score_batch(texts)
    for text, bpb in zip(texts, got):
        assert abs(bpb - _independent_bpb(model, text, eos, WINDOW)) < 1e-4
    alone = scorer.score_batch([short])[0]  # a document's score does not depend on its batch neighbours
    assert abs(alone - got[0]) < 1e-5
    # prefixes: max_chars scores the first N characters, without EOS (the document did not end there)
    cut = PerplexityScorer(str(ref_model), device="cpu", max_chars=40).nats_batch([long])
    assert cut[1][0] == len(long[:40].encode()) and cut[2][0] == len(long[:40].encode()) - 1
    cut_tok = PerplexityScorer(str(ref_model), device="cpu", max_tokens=30).nats_batch([long])
    assert cut_tok[1][0] == 30 and cut_tok[2][0] == 29
    whole = scorer.nats_batch([short])
    assert whole[2][0] == len(short.encode())  # every byte after the first, plus EOS
    # empty text has no bytes: no score
    assert math.isnan(scorer.score_batch([""])[0])


def test_document_windows_predict_every_token_once():
    ids = np.arange(10)
    wins = document_windows(ids, 4)
    assert [list(w[0]) for w in wins] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert [list(w[1]) for w in wins] == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]
    labels = np.concatenate([w[1] for w in wins])
    assert list(labels[labels >= 0]) == list(range(1, 10))
    assert document_windows(np.arange(1), 4) == []


def test_reference_like_text_scores_lower_than_soup_and_another_language(ref_model, pages):
    rng = random.Random(0)
    heldout = [p[:600] for p in pages[1][:20]]  # pages the model never saw
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?-"
    soup = ["".join(rng.choice(alphabet) for _ in range(600)) for _ in range(10)]
    shuffled = []
    for p in heldout[:10]:
        chars = list(p)
        rng.shuffle(chars)
        shuffled.append("".join(chars))
    scorer = PerplexityScorer(str(ref_model), device="cpu")
    en = scorer.score_batch(heldout)
    bad_soup, bad_shuf, de = scorer.score_batch(soup), scorer.score_batch(shuffled), scorer.score_batch([GERMAN])[0]
    print(f"bpb: heldout English {np.median(en):.3f}, German {de:.3f}, shuffled chars {np.median(bad_shuf):.3f}, "
          f"soup {np.median(bad_soup):.3f}")
    assert np.max(en) < np.min(bad_soup) - 1.0
    assert np.median(en) < np.median(bad_shuf) - 0.5
    assert np.median(en) < de - 0.2


def _write_shards(folder: Path, shards: list[list[dict]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, docs in enumerate(shards):
        with gzip.open(folder / f"part{i:02d}.jsonl.gz", "wt") as fh:
            for d in docs:
                fh.write(json.dumps(d) + "\n")


def _corpus(pages):
    """Shard 0 mostly clean English, shard 1 mostly degraded text: a per-shard split would put 1/3 of each in head."""
    rng = random.Random(1)
    en = [p[:400] for p in pages[1][:30]]

    def degrade(t, frac):
        chars = list(t)
        for i in rng.sample(range(len(chars)), int(frac * len(chars))):
            chars[i] = rng.choice("qxzjkv#@%&0123456789")
        return "".join(chars)

    s0 = [{"id": f"a{i}", "text": t, "metadata": {"language": "en"}} for i, t in enumerate(en[:20])]
    s0 += [{"id": f"a{20 + i}", "text": degrade(t, 0.3), "metadata": {"language": "en"}} for i, t in enumerate(en[20:25])]
    s1 = [{"id": f"b{i}", "text": degrade(t, 0.15 + 0.02 * i), "metadata": {"language": "en"}} for i, t in enumerate(en[5:25])]
    s1 += [{"id": f"b{20 + i}", "text": t, "metadata": {"language": "en"}} for i, t in enumerate(en[25:30])]
    return [s0, s1]


def _recipe(tmp_path, stage, tasks=2):
    return {"name": "ppl", "run_dir": str(tmp_path / "run"),
            "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": [stage], "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": tasks, "workers": 1}}


def test_buckets_follow_corpus_wide_percentiles_across_shards(ref_model, pages, tmp_path):
    shards = _corpus(pages)
    _write_shards(tmp_path / "in", shards)
    stats = run_recipe(_recipe(tmp_path, {"stage": "perplexity", "model": str(ref_model), "batch_size": 8,
                                          "device": "cpu"}), fresh=True)
    assert stats["accounting"]["balanced"]
    out = {d.id: d for d in iter_documents(str(tmp_path / "run" / "output"))}
    n = sum(len(s) for s in shards)
    assert len(out) == n  # no keep: nothing dropped
    scored = {i: d.metadata["perplexity_score"] for i, d in out.items() if "perplexity_score" in d.metadata}
    assert set(out) == set(scored)
    # the scores in the output are the scorer's, whatever the batch / shard they were computed in
    texts = {d["id"]: d["text"] for s in shards for d in s}
    ids = sorted(scored)
    ref = PerplexityScorer(str(ref_model), device="cpu").score_batch([texts[i] for i in ids])
    assert np.max(np.abs(np.array([scored[i] for i in ids]) - ref)) < 1e-4
    # buckets: corpus-wide percentiles over both shards (what the phase recorded), lower bpb = head
    cutoffs = bucket_cutoffs(np.array(list(scored.values())), [33.3, 66.6])
    info = json.loads(next((tmp_path / "run" / "work").glob("*perplexity/buckets.json")).read_text())
    assert info["cutoffs"] == pytest.approx(cutoffs, abs=1e-12) and info["documents"] == n and info["ranks"] == 2
    for i, s in scored.items():
        assert out[i].metadata["perplexity_bucket"] == assign_bucket(s, cutoffs)
    counts = {b: sum(d.metadata["perplexity_bucket"] == b for d in out.values()) for b in ("head", "middle", "tail")}
    assert all(abs(c - n / 3) <= 2 for c in counts.values()), counts
    head_by_shard = [sum(out[d["id"]].metadata["perplexity_bucket"] == "head" for d in s) for s in shards]
    assert head_by_shard[0] > 0.5 * len(shards[0]) and head_by_shard[1] < 0.2 * len(shards[1])  # not per shard
    st = next(s for s in stats["stages"] if s["name"] == "perplexity")
    assert st["dropped"] == {}


def test_keep_drops_by_bucket_with_reasons_and_accounting_balances(ref_model, pages, tmp_path):
    shards = _corpus(pages)
    _write_shards(tmp_path / "in", shards)
    docs = [d for s in shards for d in s]
    scores = PerplexityScorer(str(ref_model), device="cpu").score_batch([d["text"] for d in docs])
    n, max_bpb = len(docs), round(float(np.quantile(scores, 0.85)), 3)
    above = int((scores > max_bpb).sum())
    assert 0 < above < n / 3  # the threshold matters, and drops fewer than the tail
    stage = {"stage": "perplexity", "model": str(ref_model), "keep": ["head", "middle"], "max_bpb": max_bpb, "device": "cpu"}
    stats = run_recipe(_recipe(tmp_path, stage), fresh=True)
    assert stats["accounting"]["balanced"]
    kept = list(iter_documents(str(tmp_path / "run" / "output")))
    assert {d.metadata["perplexity_bucket"] for d in kept} <= {"head", "middle"}
    assert all(d.metadata["perplexity_score"] <= max_bpb for d in kept)
    st = next(s for s in stats["stages"] if s["name"] == "perplexity")
    dropped = st["dropped"]
    # max_bpb is checked first, so the tail reason counts the tail documents under the threshold
    assert dropped == {"perplexity_above_max_bpb": above, "perplexity_tail": n - above - len(kept)}
    cutoffs = bucket_cutoffs(scores, [33.3, 66.6])
    assert {d.id for d in kept} == {d["id"] for d, s in zip(docs, scores) if s <= cutoffs[1] and s <= max_bpb}


def test_unscored_document_is_tail_and_fails_max_bpb(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"cutoffs": [1.0, 2.0]}))
    f = PerplexityFilter("perplexity_score", "perplexity", cutoffs_path=str(tmp_path / "b.json"), max_bpb=3.0)
    doc = Document(text="", id="e", metadata={})
    assert f.filter(doc) == (False, "perplexity_above_max_bpb") and doc.metadata["perplexity_bucket"] == "tail"
    ok = Document(text="a", id="a", metadata={"perplexity_score": 1.5})
    assert f.filter(ok) is True and ok.metadata["perplexity_bucket"] == "middle"


def test_percentiles_per_group(tmp_path):
    class Fixed:
        def score_batch(self, texts):
            return np.array([float(len(t)) for t in texts])

    ann = PerplexityAnnotator(Fixed(), "perplexity_score", batch_size=4, scores_dir=str(tmp_path / "s"), group_by="language")
    docs = [Document(text="x" * k, id=f"en{k}", metadata={"language": "en"}) for k in range(1, 10)]
    docs += [Document(text="x" * (100 + k), id=f"de{k}", metadata={"language": "de"}) for k in range(1, 10)]
    list(ann.run(iter(docs), 0, 1))
    info = PercentileBuckets(str(tmp_path / "s"), str(tmp_path / "b.json"), [33.3, 66.6], 1, "language").compute()
    assert info["groups"]["en"]["cutoffs"] == pytest.approx(list(np.percentile(np.arange(1, 10), [33.3, 66.6])))
    assert info["groups"]["de"]["cutoffs"] == pytest.approx(list(np.percentile(np.arange(101, 110), [33.3, 66.6])))
    assert assign_bucket(101.0, info["groups"]["de"]["cutoffs"]) == "head"
    assert assign_bucket(9.0, info["groups"]["en"]["cutoffs"]) == "tail"
    allv = np.r_[np.arange(1, 10), np.arange(101, 110)]
    assert info["cutoffs"] == pytest.approx(list(np.percentile(allv, [33.3, 66.6])))  # corpus-wide: all groups
    assert assign_bucket(101.0, info["cutoffs"]) == "middle" and assign_bucket(109.0, info["cutoffs"]) == "tail"


def test_validation_never_loads_the_model(ref_model, tmp_path):
    spec = get_stage("perplexity")
    ctx = BuildContext(run_dir=tmp_path, work_dir=tmp_path / "w", tasks=2, stage_index=0, stage_name="perplexity")
    built = spec.build(spec.params(model=str(ref_model)), ctx)
    assert isinstance(built, Barrier) and built.before[0].scorer._lm is None
    streaming = spec.build(spec.params(model=str(ref_model), buckets=None, max_bpb=3.0), ctx)
    assert isinstance(streaming, list) and len(streaming) == 2
    with pytest.raises(RecipeError, match=r"stages\[0\]\(perplexity\).model: .* is not a folder; give `model: reference`"):
        spec.build(spec.params(model=str(tmp_path / "nope")), ctx)
    reference = spec.build(spec.params(model="reference"), ctx)  # the shipped reference LM, found wherever cuvee runs
    assert Path(reference.before[0].scorer.model_path) == REPO / "cuvee" / "assets" / "models" / "reference_lm"
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecipeError, match="neither a `cuvee train` output folder"):
        spec.build(spec.params(model=str(tmp_path / "empty")), ctx)
    for bad in ({"keep": ["top"]}, {"buckets": [60, 30]}, {"buckets": None, "keep": ["head"]}, {"device": "tpu"}):
        with pytest.raises(ValueError):
            spec.params(model="x", **bad)


def test_example_recipe_validates_with_a_model(ref_model, tmp_path):
    """recipes/ccnet_perplexity.yaml points at runs/train/tiny (built by `cuvee train`): validate it with ours."""
    from cuvee.pipeline.compiler import compile_recipe

    data = yaml.safe_load((REPO / "recipes" / "ccnet_perplexity.yaml").read_text())
    stage = next(s for s in data["stages"] if s["stage"] == "perplexity")
    assert stage["model"] == "runs/train/tiny"
    stage["model"] = str(ref_model)
    data["input"]["paths"] = [str(REPO / p) for p in data["input"]["paths"]]
    data["run_dir"] = str(tmp_path / "run")
    jobs = compile_recipe(parse_recipe(data, "ccnet_perplexity.yaml"))
    assert any(j.name.endswith("perplexity_buckets") for j in jobs)


def test_hf_export_scores_like_the_run_folder(ref_model, tmp_path):
    pytest.importorskip("transformers")
    from cuvee.train.hf_export import export_checkpoint

    hf = export_checkpoint(ref_model, tmp_path / "hf")
    texts = ["The committee reviewed the proposal for three months.", "Café déjà vu " * 12, "x"]
    a = PerplexityScorer(str(ref_model), device="cpu").score_batch(texts)
    b = PerplexityScorer(str(hf), device="cpu").score_batch(texts)
    assert np.max(np.abs(a - b)) < 1e-4
