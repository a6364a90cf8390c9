"""quality_ensemble: corpus-wide percentiles over every task, combined into an integer bucket.

The reference is computed over the whole corpus at once (no tasks, exact fractions, scipy's percentile rank);
the stage must give the same value to every document although each task sees only its own shard.
"""

import gzip
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.stats import percentileofscore

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.registry import get_stage
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three shards whose score distributions differ a lot (a per-shard percentile would be far off), with ties
    (scores rounded to 0.05), missing scores, and a score that is not a number."""
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("ens")
    docs = []
    for shard, (lo, hi) in enumerate([(0.0, 0.4), (0.3, 0.8), (0.6, 1.0)]):
        rows = []
        for i in range(120 + 40 * shard):
            meta = {"shard": shard, "a_score": round(rng.uniform(lo, hi) / 0.05) * 0.05}
            r = rng.random()
            if r < 0.1:
                pass  # no ppl_score: this document is bucketed by a_score alone
            elif r < 0.12:
                meta["ppl_score"] = "n/a"
            else:
                meta["ppl_score"] = round(rng.uniform(0.5, 3.0), 1)  # lower is better, many ties
            if shard == 2 and i < 5:
                del meta["a_score"]
                meta.pop("ppl_score", None)  # no score at all: no bucket
            rows.append({"text": f"document {shard}-{i} " + "word " * rng.randint(3, 30), "id": f"{shard}-{i}",
                         "metadata": meta})
        write_jsonl(root / "in" / f"part{shard}.jsonl.gz", rows)
        docs += rows
    return root, docs


def reference(docs, combine, buckets=20, weights=(1.0, 1.0)):
    """Per-document (percentiles, bucket) from the whole corpus at once."""
    def finite(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    a = np.array([d["metadata"]["a_score"] for d in docs if finite(d["metadata"].get("a_score"))])
    p = np.array([d["metadata"]["ppl_score"] for d in docs if finite(d["metadata"].get("ppl_score"))])
    out = {}
    for d in docs:
        m = d["metadata"]
        pcts = []  # (exact fraction, weight)
        if finite(m.get("a_score")):
            frac = Fraction(int((a < m["a_score"]).sum() + (a <= m["a_score"]).sum()), 2 * a.size)
            assert float(frac) * 100 == pytest.approx(percentileofscore(a, m["a_score"], kind="mean"))
            pcts.append((frac, weights[0]))
        if finite(m.get("ppl_score")):  # lower is better: the percentile of -score
            frac = Fraction(int((p > m["ppl_score"]).sum() + (p >= m["ppl_score"]).sum()), 2 * p.size)
            pcts.append((frac, weights[1]))
        if not pcts:
            out[d["id"]] = (None, None)
            continue
        if combine == "max":
            bucket = min(buckets - 1, math.floor(buckets * max(f for f, _ in pcts)))
        else:
            w = [1.0 if combine == "mean" else wt for _, wt in pcts]
            bucket = min(buckets - 1, math.floor(buckets * sum(float(f) * wt for (f, _), wt in zip(pcts, w)) / sum(w)))
        out[d["id"]] = ([float(f) for f, _ in pcts], bucket)
    return out


def run_ensemble(root: Path, tag: str, tasks: int = 3, **params):
    stage = {"stage": "quality_ensemble", "members": ["a_score", {"key": "ppl_score", "higher_is_better": False}], **params}
    recipe = {"name": f"ens_{tag}", "run_dir": str(root / f"run_{tag}"),
              "input": {"paths": [str(root / "in" / "*.jsonl.gz")], "format": "jsonl"},
              "stages": [stage], "output": {"format": "parquet"}, "executor": {"kind": "local", "tasks": tasks, "workers": 1}}
    stats = run_recipe(recipe, fresh=True)
    return stats, {d.id: d for d in iter_documents(str(root / f"run_{tag}" / "output"))}


@pytest.mark.parametrize("combine,weights", [("max", None), ("weighted", (3.0, 1.0))])
def test_percentiles_and_buckets_equal_a_whole_corpus_reference_on_three_tasks(corpus, combine, weights):
    root, docs = corpus
    params = {"combine": combine}
    if weights:
        params["members"] = [{"key": "a_score", "weight": weights[0]},
                             {"key": "ppl_score", "higher_is_better": False, "weight": weights[1]}]
    stats, out = run_ensemble(root, combine, **params)
    assert stats["accounting"]["balanced"]
    assert set(out) == {d["id"] for d in docs}  # the ensemble drops nothing
    ref = reference(docs, combine, weights=weights or (1.0, 1.0))
    buckets_seen = set()
    for doc_id, (pcts, bucket) in ref.items():
        meta = out[doc_id].metadata
        got = [meta[k] for k in ("a_percentile", "ppl_percentile") if k in meta]
        assert got == pcts if pcts is not None else not got, doc_id
        assert meta.get("quality_bucket") == bucket, (doc_id, meta)
        buckets_seen.add(bucket)
    assert {0, 19} <= buckets_seen and None in buckets_seen
    # a per-shard percentile would put every shard's best document in the top bucket; the corpus one does not
    best_of_shard0 = max((d for d in docs if d["metadata"]["shard"] == 0), key=lambda d: d["metadata"]["a_score"])
    assert out[best_of_shard0["id"]].metadata["a_percentile"] < 0.5
    st = next(s for s in stats["stages"] if s["name"] == "quality_ensemble")
    assert st.get("dropped", {}) in ({}, None)


def test_ties_share_one_percentile_and_one_task_equals_three(corpus):
    """Same corpus on one task: identical metadata (the rule depends on the corpus, not on how it is cut)."""
    root, _ = corpus
    _, one = run_ensemble(root, "one", tasks=1)
    _, three = run_ensemble(root, "max_again", tasks=3)
    for doc_id, d in one.items():
        keys = ("a_percentile", "ppl_percentile", "quality_bucket")
        assert {k: d.metadata.get(k) for k in keys} == {k: three[doc_id].metadata.get(k) for k in keys}
    by_score: dict = {}
    for d in one.values():
        if "a_score" in d.metadata:
            by_score.setdefault(d.metadata["a_score"], set()).add(d.metadata["a_percentile"])
    assert all(len(v) == 1 for v in by_score.values())
    assert len(by_score) < sum(1 for d in one.values() if "a_score" in d.metadata)  # there were ties


def test_real_scorer_stage_feeds_the_ensemble(tmp_path):
    """fasttext_quality (the shipped demo model) then the ensemble over its score and an input score, two tasks."""
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

    rows = []
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line)
            if r.get("main_content"):
                rows.append({"text": r["main_content"][:2000], "id": str(len(rows)),
                             "metadata": {"len_score": float(len(r["main_content"]) // 500)}})
            if len(rows) == 90:
                break
    for i in range(2):
        write_jsonl(tmp_path / "in" / f"p{i}.jsonl.gz", rows[i * 45:(i + 1) * 45])
    recipe = {"name": "ens_ft", "run_dir": str(tmp_path / "run"),
              "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
              "stages": [{"stage": "fasttext_quality", "model": "demo"},
                         {"stage": "quality_ensemble", "members": ["fasttext_quality_score", "len_score"], "buckets": 5}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2, "workers": 1}}
    run_recipe(recipe, fresh=True)
    out = {d.id: d.metadata for d in iter_documents(str(tmp_path / "run" / "output"))}
    ft = FastTextScorer(str(DEMO_FASTTEXT)).score_batch([r["text"] for r in rows]).astype(np.float64)
    ln = np.array([r["metadata"]["len_score"] for r in rows])
    for r, s, n in zip(rows, ft, ln):
        meta = out[r["id"]]
        assert meta["fasttext_quality_score"] == pytest.approx(s, abs=1e-6)
        fs = np.array([out[x["id"]]["fasttext_quality_score"] for x in rows])  # the scores the stage wrote
        p_ft = ((fs < meta["fasttext_quality_score"]).sum() + (fs <= meta["fasttext_quality_score"]).sum()) / (2 * len(fs))
        p_ln = ((ln < n).sum() + (ln <= n).sum()) / (2 * len(ln))
        assert meta["fasttext_quality_percentile"] == p_ft and meta["len_percentile"] == p_ln
        assert meta["quality_bucket"] == min(4, math.floor(5 * max(p_ft, p_ln)))


def test_a_member_no_document_has_stops_the_run_naming_the_closest_key(corpus, tmp_path):
    root, _ = corpus
    recipe = {"name": "ens_typo", "run_dir": str(tmp_path / "run"),
              "input": {"paths": [str(root / "in" / "*.jsonl.gz")], "format": "jsonl"},
              "stages": [{"stage": "quality_ensemble", "members": ["a_scor"]}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2, "workers": 1}}
    with pytest.raises(Exception) as e:
        run_recipe(recipe, fresh=True)
    assert "no document has a numeric 'a_scor'; did you mean 'a_score'" in str(e.value) + "".join(
        p.read_text() for p in (tmp_path / "run").rglob("*.log"))


@pytest.mark.parametrize("params,match", [
    ({"members": ["a_score", {"key": "b_score", "weight": 2}]}, "member weights need combine: weighted"),
    ({"members": ["a_score", "a_score"]}, r"\['a_score'\] listed twice"),
    ({"members": [{"key": "a_score", "higher_is_beter": False}]}, "higher_is_beter"),
    ({"members": ["a_score"], "buckets": 1}, "buckets"),
    ({"members": ["a_score"], "combine": "median"}, "combine"),
    ({"members": ["quality_bucket"]}, "keys this stage writes"),
])
def test_parameters_are_checked_up_front(params, match):
    spec = get_stage("quality_ensemble")
    with pytest.raises(ValidationError, match=match):
        spec.params(**params)
