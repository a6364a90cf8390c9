"""The FineWeb and multilingual recipes validate, and the filter stages run end to end through the
compiler with balanced accounting."""

import gzip
import json
from pathlib import Path

from cuvee.pipeline.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]


def test_fineweb_recipe_validates_in_fineweb_order():
    r = load_recipe(REPO / "recipes" / "fineweb.yaml")
    names = [s.name for s in r.stage_entries]
    assert names == ["url_filter", "response_check", "extract", "language", "gopher_repetition",
                     "gopher_quality", "c4_quality", "fineweb_quality", "minhash_dedup"]
    params = {s.name: s.params for s in r.stage_entries}
    assert params["language"].languages == {"en": 0.65}
    assert params["c4_quality"].filter_no_terminal_punct is False
    assert params["gopher_quality"].word_tokenizer == "fast"
    assert r.output.format == "parquet"


def test_multilingual_recipe_routes_by_language():
    r = load_recipe(REPO / "recipes" / "multilingual.yaml")
    lang = next(s.params for s in r.stage_entries if s.name == "language")
    assert len(lang.languages) >= 5 and len(set(lang.languages.values())) > 1
    assert r.output.route_by == "language"


def test_filter_stages_run_end_to_end(tmp_path):
    from cuvee.pipeline.io import iter_documents
    from cuvee.pipeline.runner import run_recipe

    src = tmp_path / "pages.jsonl"
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f, open(src, "w") as out:
        for i, line in enumerate(f):
            if i >= 40:
                break
            row = json.loads(line)
            out.write(json.dumps({"text": row["main_content"], "id": row["file_id"], "metadata": {"url": row["url"]}}) + "\n")
    recipe = {
        "name": "filters_e2e", "run_dir": str(tmp_path / "run"),
        "input": {"paths": [str(src)], "format": "jsonl"},
        "stages": [
            {"stage": "url_filter", "use_datatrove_blocklist": False},
            {"stage": "language", "languages": {"en": 0.65, "de": 0.65}},
            {"stage": "gopher_repetition"}, {"stage": "gopher_quality"},
            {"stage": "c4_quality"}, {"stage": "fineweb_quality"}, {"stage": "c4_badwords"},
        ],
        "output": {"format": "jsonl", "route_by": "language"},
        "executor": {"kind": "local", "tasks": 1},
    }
    path = tmp_path / "r.yaml"
    import yaml

    path.write_text(yaml.safe_dump(recipe))
    stats = run_recipe(path)
    assert stats["complete"] and stats["accounting"]["balanced"]
    assert stats["accounting"]["records_read"] == 40
    kept = list(iter_documents(str(tmp_path / "run" / "output")))
    assert 0 < len(kept) < 40
    assert all(d.metadata["language"] in ("en", "de") and "language_score" in d.metadata for d in kept)
    by_reason = stats["accounting"]["by_reason"]
    assert any(k.startswith("gopher") or k.startswith("fineweb") or k.startswith("c4") for k in by_reason), by_reason
    lang_stage = next(s for s in stats["stages"] if s["name"].endswith("language"))
    assert sum(v for k, v in lang_stage["counters"].items() if k.startswith("lang_")) == lang_stage["docs_in"]
