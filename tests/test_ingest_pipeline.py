"""End to end through the lead's runner: WARC + ARC -> response_check -> cascade -> extract -> Parquet."""

from __future__ import annotations

from pathlib import Path

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]


def test_ingest_recipe_runs_and_balances(tmp_path):
    recipe = {
        "name": "ingest_e2e",
        "run_dir": str(tmp_path / "run"),
        "input": {"paths": [str(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"), str(REPO / "data/sample/small-sample-1262850551027_8.arc.gz")]},
        "stages": [
            {"stage": "response_check"},
            {"stage": "cc_language_prefilter", "languages": ["en", "ru"]},
            {"stage": "extract", "timeout_s": 5},
        ],
        "output": {"format": "parquet"},
        "executor": {"kind": "local", "tasks": 2, "workers": 1},
    }
    stats = run_recipe(recipe)
    acc = stats["accounting"]
    assert acc["balanced"] and acc["records_read"] == 50 + 9
    assert acc["by_reason"]["reader/non_response_record"] == 34 + 1
    assert acc["by_reason"]["cc_language_prefilter/prefilter_language"] >= 10  # the Chinese CC pages
    docs = list(iter_documents(stats["output"]["files"]))
    assert len(docs) == acc["kept"] > 0
    assert all(d.text.strip() and not d.text.lstrip().lower().startswith(("<html", "<!doctype")) for d in docs)
    assert all(d.metadata.get("url", "").startswith("http") for d in docs)
    cc = [d for d in docs if d.metadata.get("cc_snapshot") == "CC-MAIN-2020-34"]
    assert cc and all(d.metadata["cc_languages"] for d in cc)
