"""Dedup from recipe YAML: the Llama 3 recipe validates; spilling under a tiny budget changes nothing."""

from pathlib import Path

import pytest

from cuvee.dedup.local_run import run_stage
from cuvee.pipeline.recipe import RecipeError, load_recipe
from tests._dedup_helpers import counters, doc, quiet, real_texts

quiet()
REPO = Path(__file__).resolve().parents[1]


def test_llama3_recipe_has_all_four_dedups():
    r = load_recipe(REPO / "recipes/llama3.yaml")
    names = [e.name for e in r.stage_entries]
    for s in ("url_dedup", "exact_dedup", "minhash_dedup", "line_dedup"):
        assert s in names
    assert names.index("url_dedup") < names.index("minhash_dedup") < names.index("line_dedup")


def test_bad_dedup_parameter_is_a_recipe_error(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("name: x\ninput: {paths: [data]}\nstages:\n  - stage: minhash_dedup\n    bands: 3\n")
    with pytest.raises(RecipeError, match="bands: unknown key"):
        load_recipe(p)


def test_line_dedup_spilling_gives_the_same_result(tmp_path):
    t = real_texts()
    lines = [ln for x in t[:300] for ln in x.split("\n") if ln.strip()]
    # 1200 documents of 60 lines drawn from a shared pool: many lines repeat across documents
    docs = [doc("\n".join(lines[(i * 37 + j * 11) % len(lines)] for j in range(60)), f"d{i}") for i in range(1200)]
    ranks = [docs[:600], docs[600:]]
    big, cb = run_stage("line_dedup", {"memory_budget_mb": 512, "min_occurrences": 3}, ranks, tmp_path / "big")
    small, cs = run_stage("line_dedup", {"memory_budget_mb": 1, "min_occurrences": 3}, ranks, tmp_path / "small")
    assert counters(cs, "line_counts", "count lines").get("spill_partitions", 0) >= 2
    assert "spill_partitions" not in counters(cb, "line_counts", "count lines")
    assert [[d.text for d in r] for r in big] == [[d.text for d in r] for r in small]
    assert counters(cb, "seg01", "line dedup")["lines_removed"] > 0


@pytest.mark.parametrize("stage", ["exact_dedup", "line_dedup"])
def test_exclusions_take_the_same_decisions_one_document_at_a_time(tmp_path, stage):
    """``output.exclusions: true`` sends a barrier filter through BaseFilter's per-document ``filter``: the same
    documents and texts are kept as through the per-batch path, and every dropped one is written for inspection."""
    import gzip
    import json

    from cuvee.pipeline.runner import run_recipe

    t = real_texts()[:120]
    rows = [{"id": f"d{i}", "text": t[i % 100]} for i in range(120)]  # 20 exact copies; shared lines
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "x.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    params = {"stage": stage} | ({"min_occurrences": 2} if stage == "line_dedup" else {})
    out = {}
    for exclusions in (False, True):
        run_dir = tmp_path / f"run_{exclusions}"
        stats = run_recipe({"name": "x", "run_dir": str(run_dir), "input": {"paths": [str(tmp_path / "in")],
                            "format": "jsonl"}, "stages": [params], "executor": {"kind": "local", "tasks": 2},
                            "output": {"format": "jsonl", "exclusions": exclusions}})
        kept = [json.loads(line) for p in sorted((run_dir / "output").rglob("*.jsonl.gz")) for line in gzip.open(p, "rt")]
        out[exclusions] = (sorted((r["id"], r["text"]) for r in kept), stats["accounting"]["by_reason"])
    assert out[True] == out[False] and sum(out[True][1].values()) >= 20
    excluded = [line for p in (tmp_path / "run_True" / "excluded").rglob("*.jsonl.gz") for line in gzip.open(p, "rt")]
    assert len(excluded) == sum(out[True][1].values())
