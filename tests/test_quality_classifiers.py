"""Classifier train / evaluate / apply round trips, corpus-wide percentile thresholds, topics and domains.

Training data: WCXB DEV ground truth shipped in data/curated (main content = "hq"; the human-marked
boilerplate snippets of the same pages = "lq"). No mocks: real fastText, real MiniLM (offline).
"""

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from datatrove.data import Document

from cuvee.classifiers.cli import classify
from cuvee.classifiers.metrics import binary_metrics, roc_auc
from cuvee.classifiers.quality_stages import DEMO_FASTTEXT
from cuvee.classifiers.scoring import PercentileCutoff, ScoreAnnotator, corpus_cutoff
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.registry import Barrier, BuildContext, get_stage

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows():
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def labelled(rows):
    out = []
    for i, r in enumerate(rows):
        if r.get("main_content"):
            out.append({"text": r["main_content"], "label": "hq", "id": f"{i}-hq"})
        without = [s for s in (r.get("without") or []) if s]
        if without:
            out.append({"text": "\n".join(without), "label": "lq", "id": f"{i}-lq"})
    return out


def write_jsonl(path: Path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def ctx(tmp_path, tasks=1, name="stage"):
    return BuildContext(run_dir=tmp_path, work_dir=tmp_path / "work", tasks=tasks, stage_index=0, stage_name=name)


# ---------------------------------------------------------------- metrics


def test_roc_auc_matches_pair_counting():
    rng = np.random.default_rng(1)
    labels = rng.random(60) < 0.4
    scores = np.round(rng.random(60) + labels * 0.3, 1)  # rounded: plenty of ties
    pairs = [(p, n) for p, n in itertools.product(scores[labels], scores[~labels])]
    brute = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert roc_auc(labels, scores) == pytest.approx(brute)
    m = binary_metrics([1, 1, 0, 0], [0.9, 0.4, 0.6, 0.1])
    assert (m["precision"], m["recall"], m["roc_auc"]) == (0.5, 0.5, 0.75)


# ---------------------------------------------------------------- fastText round trip


def test_fasttext_train_eval_apply_round_trip(rows, tmp_path):
    data = labelled(rows)
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", data[:1600])
    test_file = write_jsonl(tmp_path / "test.jsonl.gz", data[1600:2200])
    model = tmp_path / "model.bin"
    runner = CliRunner()
    res = runner.invoke(classify, ["train", "--data", str(train_file), "-o", str(model), "--bucket", "100000"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("{"):])
    assert report["valid_metrics"]["roc_auc"] > 0.95  # held-out split of the training file
    assert json.loads(Path(str(model) + ".metrics.json").read_text())["valid_examples"] == report["valid_examples"]

    res = runner.invoke(classify, ["eval", "-m", str(model), "--data", str(test_file)])
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.stdout)["metrics"]
    assert metrics["n"] == 600 and metrics["roc_auc"] > 0.95 and metrics["precision"] > 0.85 and metrics["recall"] > 0.85

    out = tmp_path / "kept.jsonl.gz"
    res = runner.invoke(classify, ["apply", "-m", str(model), "-i", str(test_file), "-o", str(out), "--top-percent", "25"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    kept = list(iter_documents(str(out)))
    assert summary["kept"] == len(kept) and 0.24 * 600 <= len(kept) <= 0.27 * 600
    assert sum(d.metadata["label"] == "hq" for d in kept) >= 0.95 * len(kept)
    assert min(d.metadata["quality_score"] for d in kept) >= summary["cutoff"]


def test_fasttext_train_from_positive_and_negative_sources(rows, tmp_path):
    data = labelled(rows)[:800]
    pos = write_jsonl(tmp_path / "pos" / "a.jsonl.gz", [d for d in data if d["label"] == "hq"])
    neg = write_jsonl(tmp_path / "neg" / "a.jsonl.gz", [{"text": d["text"]} for d in data if d["label"] == "lq"] + [{"text": "  "}])
    model = tmp_path / "m.bin"
    res = CliRunner().invoke(classify, ["train", "--positive", str(pos.parent), "--negative", str(neg.parent), "-o", str(model),
                                        "--bucket", "50000", "--valid-fraction", "0.2"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("{"):])
    assert report["skipped"] == {"empty_text_lq": 1}  # counted, not silently lost
    assert report["valid_metrics"]["roc_auc"] > 0.9


def test_cli_rejects_ambiguous_sources(tmp_path):
    res = CliRunner().invoke(classify, ["train", "--data", "x", "--positive", "y", "-o", str(tmp_path / "m")])
    assert res.exit_code != 0 and "not both" in res.output


# ---------------------------------------------------------------- corpus-wide percentile over several shards


def test_top_percent_is_computed_over_all_shards_not_per_shard(rows, tmp_path):
    """Shards of very different quality: a per-shard top-p % would keep p % of each; the corpus cutoff does not."""
    from cuvee.pipeline.runner import run_recipe

    data = labelled(rows)[:600]
    good = [d for d in data if d["label"] == "hq"]
    bad = [d for d in data if d["label"] == "lq"]
    shards = [good[:150], good[150:200] + bad[:100], bad[100:250]]
    for i, shard in enumerate(shards):
        write_jsonl(tmp_path / "in" / f"part{i}.jsonl.gz", [{**d, "metadata": {"shard": i}} for d in shard])
    recipe = {"name": "pct", "run_dir": str(tmp_path / "run"),
              "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
              "stages": [{"stage": "fasttext_quality", "model": "demo", "top_percent": 30}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 3, "workers": 1}}
    stats = run_recipe(recipe, fresh=True)
    assert stats["accounting"]["balanced"]
    kept = list(iter_documents(str(tmp_path / "run" / "output")))
    n = sum(len(s) for s in shards)

    from cuvee.classifiers.fasttext_model import FastTextScorer

    all_docs = [d for s in shards for d in s]
    scores = FastTextScorer(DEMO_FASTTEXT).score_batch([d["text"] for d in all_docs])
    cutoff = corpus_cutoff(scores, 30)
    expected = {d["id"] for d, s in zip(all_docs, scores) if s >= cutoff}
    assert {d.id for d in kept} == expected
    assert abs(len(kept) - 0.3 * n) <= 3
    per_shard = [sum(d.metadata["shard"] == i for d in kept) for i in range(3)]
    assert per_shard[0] > 0.3 * len(shards[0]) and per_shard[2] < 0.3 * len(shards[2])
    st = next(s for s in stats["stages"] if s["name"] == "fasttext_quality")
    assert st["dropped"] == {"fasttext_quality_below_top_percent": n - len(kept)}


def test_percentile_phase_needs_every_rank(tmp_path):
    scorer_stage = ScoreAnnotator(scorer=type("S", (), {"score_batch": lambda self, t: np.ones(len(t))})(), key="k_score",
                                  scores_dir=str(tmp_path / "s"))
    list(scorer_stage.run(iter([Document(text="a", id="1")]), 0, 2))
    with pytest.raises(RuntimeError, match="expected scores from 2 ranks"):
        PercentileCutoff(str(tmp_path / "s"), str(tmp_path / "c.json"), 10, expected_ranks=2).compute()


def test_threshold_mode_and_barrier_mode(tmp_path):
    spec = get_stage("fasttext_quality")
    steps = spec.build(spec.params(threshold=0.5), ctx(tmp_path))
    docs = [Document(text="Home\nLogin\nCart\nMenu\nSign up", id="nav"),
            Document(text="The committee reviewed the proposal for three months before publishing a detailed report "
                          "that explains how the city will fund the new library and what residents can expect.", id="prose")]
    out = list(steps[1].run(steps[0].run(iter(docs))))
    assert [d.id for d in out] == ["prose"]
    assert isinstance(spec.build(spec.params(top_percent=10), ctx(tmp_path, 2)), Barrier)
    with pytest.raises(ValueError, match="not both"):
        spec.params(threshold=0.5, top_percent=10)


def test_demo_model_is_small_and_separates_content_from_boilerplate(rows):
    from cuvee.classifiers.fasttext_model import FastTextScorer

    assert DEMO_FASTTEXT.exists() and DEMO_FASTTEXT.stat().st_size < 5 * 2**20
    data = labelled(rows)
    scores = FastTextScorer(DEMO_FASTTEXT).score_batch([d["text"] for d in data])
    labels = np.array([d["label"] == "hq" for d in data])
    assert roc_auc(labels, scores) > 0.95


# ---------------------------------------------------------------- transformer scorer (frozen MiniLM + head)


@pytest.fixture(scope="module")
def small_split(rows):
    data = labelled(rows)
    hq = [d for d in data if d["label"] == "hq"]
    lq = [d for d in data if d["label"] == "lq" and len(d["text"].split()) >= 8]
    # texts cut to ~80 words: the head must judge the kind of text, not its length

    def cut(d):
        return {**d, "text": " ".join(d["text"].split()[:80])}

    return [cut(d) for d in hq[:40] + lq[:40]], [cut(d) for d in hq[200:230] + lq[200:230]]


def test_transformer_train_eval_apply(small_split, tmp_path):
    train, test = small_split
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", train)
    test_file = write_jsonl(tmp_path / "test.jsonl.gz", test)
    head = tmp_path / "head"
    res = CliRunner().invoke(classify, ["train", "--kind", "transformer", "--data", str(train_file), "-o", str(head),
                                        "--max-length", "96", "--valid-fraction", "0"])
    assert res.exit_code == 0, res.output
    assert (head / "head.pt").exists() and json.loads((head / "head.json").read_text())["labels"] == ["hq", "lq"]
    res = CliRunner().invoke(classify, ["eval", "-m", str(head), "--data", str(test_file)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["roc_auc"] > 0.85

    spec = get_stage("transformer_quality")
    steps = spec.build(spec.params(model=str(head), threshold=0.5, batch_size=16), ctx(tmp_path))
    docs = [Document(text=d["text"], id=d["id"], metadata={"label": d["label"]}) for d in test]
    kept = list(steps[1].run(steps[0].run(iter(docs))))
    assert all("transformer_quality_score" in d.metadata for d in docs)
    assert sum(d.metadata["label"] == "hq" for d in kept) >= 0.8 * len(kept) and len(kept) >= 20


def test_transformer_regression_head(small_split, tmp_path):
    """FineWeb-Edu style: numeric labels, regression head, score = predicted value."""
    from cuvee.classifiers.examples import Examples
    from cuvee.classifiers.transformer_model import TransformerScorer, evaluate_transformer, train_transformer

    train, test = small_split
    ex = Examples([d["text"] for d in train], [4.0 if d["label"] == "hq" else 1.0 for d in train])
    train_transformer(ex, tmp_path / "reg", task="regression", max_length=96)
    valid = Examples([d["text"] for d in test], [4.0 if d["label"] == "hq" else 1.0 for d in test])
    m = evaluate_transformer(tmp_path / "reg", valid, positive_at=3)
    assert m["pearson"] > 0.5 and m["binary"]["roc_auc"] > 0.85
    preds = TransformerScorer(tmp_path / "reg").score_batch([test[0]["text"]])
    assert preds.shape == (1,) and np.isfinite(preds).all()


# ---------------------------------------------------------------- topics


def test_zero_shot_topics_on_real_pages(rows, tmp_path):
    by_id = {r["file_id"]: r for r in rows}
    cases = {"2918": "sports", "2919": "sports", "2973": "food_cooking", "2974": "food_cooking",
             "2857": "computing_software", "2858": "computing_software", "0401": "arts_entertainment", "0141": "travel_places"}
    spec = get_stage("topic")
    (tagger,) = spec.build(spec.params(max_length=128), ctx(tmp_path))
    docs = [Document(text=by_id[k]["main_content"], id=k) for k in cases]
    out = list(tagger.run(iter(docs)))
    right = sum(d.metadata["topic"] == cases[d.id] for d in out)
    assert right >= 7, [(d.id, d.metadata["topic"]) for d in out]
    assert all(-1 <= d.metadata["topic_score"] <= 1 for d in out)


def test_topic_sampler_keeps_each_topic_at_its_rate(tmp_path):
    spec = get_stage("topic_sampler")
    (sampler,) = spec.build(spec.params(rates={"arts_entertainment": 0.25, "adult": 0.0}, seed=3), ctx(tmp_path))
    docs = [Document(text="x", id=f"d{i}", metadata={"topic": t}) for i in range(4000)
            for t in ["arts_entertainment", "science_technology", "adult"][i % 3:i % 3 + 1]]
    kept = list(sampler.run(iter(docs)))
    by = {t: sum(d.metadata["topic"] == t for d in kept) for t in ["arts_entertainment", "science_technology", "adult"]}
    n = {t: sum(d.metadata["topic"] == t for d in docs) for t in by}
    assert abs(by["arts_entertainment"] / n["arts_entertainment"] - 0.25) < 0.04
    assert by["science_technology"] == n["science_technology"] and by["adult"] == 0
    again = list(spec.build(spec.params(rates={"arts_entertainment": 0.25, "adult": 0.0}, seed=3), ctx(tmp_path))[0].run(iter(docs)))
    assert [d.id for d in again] == [d.id for d in kept]  # reproducible
    st = {k: v.total for k, v in sampler.stats.stats.items()}
    assert st["dropped_downsampled_adult"] == n["adult"]


# ---------------------------------------------------------------- math / code domains


def test_domain_stage_routes_code_math_and_general(rows, tmp_path):
    by_id = {r["file_id"]: r for r in rows}
    math_text = ("Let $f(x) = x^2 + 3x$. The derivative is $f'(x) = 2x + 3$, and by the fundamental theorem "
                 "\\int_0^1 f(x)\\,dx = \\frac{1}{3} + \\frac{3}{2}. Proof: integrate the polynomial term by term; "
                 "the integral of x^2 is x^3/3, so the equation holds for every coefficient.")
    docs = [Document(text=by_id["2858"]["main_content"], id="python-docs"),  # docs.python.org data structures
            Document(text=by_id["0027"]["main_content"], id="article"),  # meditation article
            Document(text=math_text, id="math")]
    spec = get_stage("domain")
    (step,) = spec.build(spec.params(keep=["math", "code"]), ctx(tmp_path))
    kept = list(step.run(iter(docs)))
    assert {d.id: d.metadata["domain"] for d in docs} == {"python-docs": "code", "article": "general", "math": "math"}
    assert [d.id for d in kept] == ["python-docs", "math"]
    articles = [Document(text=r["main_content"], id=r["file_id"]) for r in rows if r["page_type"] == "article" and r["main_content"]][:200]
    (tagger,) = spec.build(spec.params(), ctx(tmp_path))
    tagged = list(tagger.run(iter(articles)))
    assert sum(d.metadata["domain"] == "general" for d in tagged) >= 0.95 * len(articles)


@pytest.mark.parametrize("cmd", [[], ["train"], ["eval"], ["apply"]])
def test_cli_help(cmd):
    res = CliRunner().invoke(classify, cmd + ["--help"])
    assert res.exit_code == 0 and "Usage" in res.output


def test_apply_with_the_demo_model_and_a_threshold(rows, tmp_path):
    data = labelled(rows)[:60]
    src = write_jsonl(tmp_path / "in.jsonl.gz", data)
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(classify, ["apply", "-m", "demo", "-i", str(src), "-o", str(out), "--threshold", "0.5", "--name", "demo"])
    assert res.exit_code == 0, res.output
    kept = list(iter_documents(str(out)))
    assert kept and all(d.metadata["demo_score"] >= 0.5 for d in kept)
    assert json.loads(res.stdout)["dropped"] == len(data) - len(kept)


def test_fine_tuned_topic_head(rows, tmp_path):
    """`topic` with a head trained by `cuvee classify train --kind transformer` on topic labels (multi-class)."""
    def pick(keyword, label, n=8):
        texts = [r["main_content"] for r in rows if r.get("main_content") and keyword in (r.get("url") or "")][: n + 2]
        return [{"text": " ".join(t.split()[:60]), "label": label} for t in texts]

    data = pick("docs.", "code") + pick("recipe", "food") + pick("travel", "travel")
    train = [d for i, d in enumerate(data) if i % 5]
    test = [d for i, d in enumerate(data) if not i % 5]
    src = write_jsonl(tmp_path / "topics.jsonl.gz", train)
    res = CliRunner().invoke(classify, ["train", "--kind", "transformer", "--data", str(src), "-o", str(tmp_path / "topic_head"),
                                        "--max-length", "64", "--valid-fraction", "0", "--positive-label", "code"])
    assert res.exit_code == 0, res.output
    spec = get_stage("topic")
    (tagger,) = spec.build(spec.params(head=str(tmp_path / "topic_head")), ctx(tmp_path))
    out = list(tagger.run(iter([Document(text=d["text"], id=str(i)) for i, d in enumerate(test)])))
    assert {d.metadata["topic"] for d in out} <= {"code", "food", "travel"}
    assert sum(d.metadata["topic"] == t["label"] for d, t in zip(out, test)) >= len(test) - 1
