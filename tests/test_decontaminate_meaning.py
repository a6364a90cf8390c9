"""Decontamination by meaning (issue #35): the decontaminate stage's ``by_meaning`` option, through a real run with
the shipped MiniLM. Eval items are the first sentence of each planted paraphrase group of test_semantic_dedup (the
same encoder puts a group's members at cosine 0.87-0.96 and any two sentences of different groups at most 0.34);
the corpus holds one item verbatim, the other members of the groups (paraphrases, no 13-gram in common with their
item) and unrelated sentences."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cuvee.pipeline.recipe import RecipeError
from cuvee.pipeline.runner import run_recipe
from tests._dedup_helpers import quiet
from tests.test_semantic_dedup import GROUPS, UNRELATED

quiet()


def test_paraphrased_items_are_found_by_meaning_where_13_grams_miss_them(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"i{g}", "text": m[0]}) + "\n" for g, m in enumerate(GROUPS)))
    docs = ([{"id": "verbatim", "text": GROUPS[0][0]}]
            + [{"id": f"para{g}_{j}", "text": t} for g, m in enumerate(GROUPS) for j, t in enumerate(m) if j]
            + [{"id": f"u{i}", "text": t} for i, t in enumerate(UNRELATED)])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    stats = run_recipe({
        "name": "meaning", "run_dir": str(tmp_path / "run"),
        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
        "stages": [{"stage": "embed"},
                   {"stage": "decontaminate", "eval_sets": [{"name": "planted", "path": str(items), "fields": ["text"]}],
                    "by_meaning": {"threshold": 0.8}}],
        "executor": {"kind": "local", "tasks": 1, "workers": 1}, "output": {"format": "jsonl", "exclusions": True}})
    assert stats["accounting"]["balanced"]
    dropped = {}
    for p in (tmp_path / "run" / "excluded").rglob("*.jsonl.gz"):
        for line in gzip.open(p, "rt"):
            rec = json.loads(line)
            dropped[rec["id"]] = (rec["metadata"]["filter_reason"], rec["metadata"]["contamination"])
    paraphrases = {d["id"] for d in docs if d["id"].startswith("para")}
    assert set(dropped) == paraphrases | {"verbatim"}  # every unrelated sentence kept
    assert {i: r for i, (r, _) in dropped.items()} == {"verbatim": "contaminated",
                                                      **dict.fromkeys(paraphrases, "contaminated_by_meaning")}
    for i in paraphrases:  # each names its own group's item, by cosine, with no n-gram spans
        found = json.loads(dropped[i][1])
        assert [(f["item"], "spans" in f) for f in found] == [(f"i{i[4]}", False)] and found[0]["cosine"] >= 0.8
    rep = stats["contamination"][0]
    assert rep["by_meaning"] == {"threshold": 0.8, "store": "default"}
    assert rep["benchmarks"]["planted"] == {
        "items_checked": 4, "too_short": 0, "unreadable": 0, "items_found": 1, "documents_touched": 1, "matches": 1,
        "items_found_by_meaning": 4, "documents_touched_by_meaning": len(paraphrases) + 1}
    from cuvee.card import write_card  # the card reports both tests, side by side

    md = Path(write_card(tmp_path / "run", max_token_docs=0, spot_checks=0).readme).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| `planted`"))
    assert row.split(" | ")[1:7] == ["4", "0", "1", "1", "4", str(len(paraphrases) + 1)], row


def test_by_meaning_without_an_embed_stage_is_refused_before_any_work(tmp_path):
    items = tmp_path / "items.txt"
    items.write_text("one item\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.jsonl").write_text(json.dumps({"id": "a", "text": "x"}) + "\n")
    with pytest.raises(RecipeError, match="by_meaning reads the vectors of an embed stage"):
        run_recipe({"name": "m", "run_dir": str(tmp_path / "run"),
                    "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
                    "stages": [{"stage": "decontaminate", "eval_sets": [{"path": str(items)}], "by_meaning": {}}],
                    "executor": {"kind": "local", "tasks": 1}})
