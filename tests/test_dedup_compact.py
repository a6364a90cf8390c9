"""Dedup without corpus copies: consecutive dedup stages re-read the input and replay the earlier dedup
filters instead of writing an intermediate copy per stage. The output, the accounting and every counter
of the funnel must equal the copying implementation's; only the work folder shrinks."""

from __future__ import annotations

import gzip
import json
import random

import pytest

import cuvee.pipeline.compiler as compiler
from _dedup_helpers import real_texts
from cuvee.pipeline.compiler import compile_recipe
from cuvee.pipeline.recipe import parse_recipe
from cuvee.pipeline.runner import run_recipe

STAGES = [
    {"stage": "url_dedup"},
    {"stage": "exact_dedup"},
    {"stage": "line_dedup", "min_occurrences": 3, "min_words": 5},
    {"stage": "minhash_dedup", "write_index": False},
]


def _corpus(folder, n_files=3, per_file=60, seed=3):
    """Real texts with exact copies, near copies, shared boilerplate lines and repeated URLs."""
    rng = random.Random(seed)
    texts = list(real_texts()[:120])
    boiler = ["Subscribe to our newsletter for weekly updates", "All rights reserved by the publisher 2024",
              "Share this article on social media today"]
    folder.mkdir(parents=True)
    i = 0
    for f in range(n_files):
        with gzip.open(folder / f"part{f}.jsonl.gz", "wt") as out:
            for _ in range(per_file):
                t = rng.choice(texts)
                roll = rng.random()
                if roll < 0.15:
                    t = t.replace(".", ". Indeed", 1)  # near copy
                lines = t.split("\n")
                if rng.random() < 0.5:
                    lines.insert(rng.randrange(len(lines) + 1), rng.choice(boiler))
                url = f"https://example.org/{rng.randrange(150)}"
                out.write(json.dumps({"text": "\n".join(lines), "id": f"d{i}", "metadata": {"url": url}}) + "\n")
                i += 1


def _run(tmp_path, name, copy_free, monkeypatch):
    monkeypatch.setattr(compiler, "COPY_FREE", copy_free)
    return _run_stages(tmp_path, name, STAGES, tasks=2)


def test_same_output_and_funnel_without_copies(tmp_path, monkeypatch):
    _corpus(tmp_path / "in")
    s_copy, d_copy = _run(tmp_path, "copying", False, monkeypatch)
    s_free, d_free = _run(tmp_path, "copy_free", True, monkeypatch)
    assert d_free == d_copy and 0 < len(d_free) < 180  # same documents, same texts, same order
    assert s_free["accounting"]["by_reason"] == s_copy["accounting"]["by_reason"]
    assert s_free["accounting"]["balanced"] and s_free["accounting"]["inputs"]["balanced"]
    for a, b in zip(s_free["stages"], s_copy["stages"]):
        assert (a["name"], a["docs_in"], a["docs_out"], a["dropped"]) == (b["name"], b["docs_in"], b["docs_out"], b["dropped"])
    assert {r.split("/")[0] for r in s_free["accounting"]["by_reason"]} >= {"url_dedup", "exact_dedup", "minhash_dedup"}

    def copies(run):
        return list((tmp_path / run / "work").glob("seg*/*.jsonl"))

    assert len(copies("copying")) == 2 * 4 and copies("copy_free") == []


def test_a_document_changing_stage_before_a_barrier_still_gets_a_copy(tmp_path):
    recipe = parse_recipe({"name": "x", "run_dir": str(tmp_path / "r"), "input": {"paths": ["data/sample"]},
                           "stages": [{"stage": "exact_dedup"}, {"stage": "response_check"}, {"stage": "exact_dedup"},
                                      {"stage": "minhash_dedup"}]})
    jobs = compile_recipe(recipe)
    segs = [j for j in jobs if j.kind == "segment"]
    written = [any(label.endswith(".writer") for _, label in j.labels) for j in segs]
    # seg00 reader -> recorder: replayable; seg01 runs response_check (changes text): the next barrier copies;
    # seg02 (copy reader + filter + recorder) is replayable again
    assert written == [False, True, False, False]
    # seg03 re-reads seg01's copy and replays stage 2's filter (internal), then applies minhash's filter
    assert [lbl for _, lbl in segs[3].labels][:3] == ["seg03.replay", "seg03.replay", "03.minhash_dedup"]


@pytest.mark.parametrize("stage", [{"stage": "fasttext_quality", "top_percent": 50}])
def test_a_barrier_whose_before_step_annotates_is_never_replayed(tmp_path, stage):
    recipe = parse_recipe({"name": "x", "run_dir": str(tmp_path / "r"), "input": {"paths": ["data/sample"]},
                           "stages": [stage, {"stage": "exact_dedup"}]})
    segs = [j for j in compile_recipe(recipe) if j.kind == "segment"]
    assert any(label.endswith(".writer") for _, label in segs[0].labels)  # scores must survive the cut


def _run_stages(tmp_path, name, stages, tasks=1):
    recipe = {"name": name, "run_dir": str(tmp_path / name),
              "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
              "stages": stages, "output": {"format": "jsonl"},
              "executor": {"kind": "local", "tasks": tasks, "workers": 1}}
    stats = run_recipe(recipe)
    docs = []
    for f in stats["output"]["files"]:
        with gzip.open(f, "rt") as fh:
            docs += [json.loads(line) for line in fh]
    return stats, docs


def test_one_pass_exact_dedup_equals_the_barrier_on_one_task(tmp_path):
    """One task: deciding while reading keeps the same documents as recording, sorting and re-reading, with
    the same funnel; a later barrier replays it instead of copying the corpus."""
    _corpus(tmp_path / "in")
    one = [dict(s, one_pass=True) if s["stage"] == "exact_dedup" else s for s in STAGES]
    s_bar, d_bar = _run_stages(tmp_path, "barrier", STAGES)
    s_one, d_one = _run_stages(tmp_path, "one_pass", one)
    # only the barrier has read every copy when it keeps one: its documents alone carry their cluster's size
    assert all(d["metadata"].pop("exact_cluster_size") >= 1 for d in d_bar)
    assert d_one == d_bar and 0 < len(d_one) < 180
    assert s_one["accounting"]["by_reason"] == s_bar["accounting"]["by_reason"]
    assert s_one["accounting"]["by_reason"]["exact_dedup/exact_duplicate"] > 0
    assert s_one["accounting"]["balanced"] and s_one["accounting"]["inputs"]["balanced"]
    for a, b in zip(s_one["stages"], s_bar["stages"]):
        assert (a["name"], a["docs_in"], a["docs_out"], a["dropped"]) == (b["name"], b["docs_in"], b["docs_out"], b["dropped"])
    assert list((tmp_path / "one_pass" / "work").glob("seg*/*.jsonl")) == []  # replayed, not copied
    assert not (tmp_path / "one_pass" / "work" / "01_exact_dedup").exists()  # no key files


@pytest.mark.parametrize("stage", ["exact_dedup", "line_dedup"])
def test_one_pass_dedup_refuses_several_tasks_before_any_work(tmp_path, stage):
    from cuvee.pipeline.recipe import RecipeError

    recipe = parse_recipe({"name": "x", "run_dir": str(tmp_path / "r"), "input": {"paths": ["data/sample"]},
                           "stages": [{"stage": stage, "one_pass": True}],
                           "executor": {"kind": "local", "tasks": 2}})
    with pytest.raises(RecipeError, match="one_pass needs executor.tasks: 1"):
        compile_recipe(recipe)
    assert not (tmp_path / "r").exists()


def test_one_pass_exact_dedup_stops_past_its_memory_budget():
    from datatrove.data import Document

    from cuvee.dedup.exact_dedup import OnePassExactDedup

    step = OnePassExactDedup(memory_budget_mb=1)
    assert step.max_keys == 2**20 // OnePassExactDedup.BYTES_PER_KEY
    step.max_keys = 3  # the limit a 1 MB budget gives at ~10k keys, made small enough to reach here
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(["a", "b", "A ", "c", "d"])]
    with pytest.raises(RuntimeError, match="do not fit memory_budget_mb=1"):
        list(step.run(iter(docs)))
    step.max_keys = 4
    assert [d.id for d in step.run(iter(docs))] == ["0", "1", "3", "4"]  # "A " is "a" normalised


def test_a_run_refused_by_a_stage_makes_no_run_folder(tmp_path):
    from cuvee.pipeline.recipe import RecipeError

    _corpus(tmp_path / "in", n_files=1, per_file=3)
    with pytest.raises(RecipeError, match="one_pass needs executor.tasks: 1"):
        _run_stages(tmp_path, "refused", [{"stage": "exact_dedup", "one_pass": True}], tasks=2)
    assert not (tmp_path / "refused").exists()
