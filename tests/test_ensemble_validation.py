"""quality_ensemble members are checked when the recipe is validated (crawl input: an earlier stage must declare
each key, numeric), and a member no document has at run time is one line, not the CLI's "(unexpected...)"."""

import gzip
import json

import pytest
from click.testing import CliRunner

from cuvee.cli import main as cuvee_main
from cuvee.pipeline.compiler import compile_recipe
from cuvee.pipeline.recipe import RecipeError, parse_recipe

SCORER = {"stage": "fasttext_quality", "model": "demo"}


def _recipe(stages, fmt="warc", path="data/sample/CC-MAIN-2020-34-sample.warc.gz"):
    return parse_recipe({"name": "ens", "input": {"paths": [path], "format": fmt}, "stages": stages,
                         "output": {"format": "jsonl"}})


def _ensemble(*members):
    return {"stage": "quality_ensemble", "members": list(members)}


def test_declared_members_compile():
    compile_recipe(_recipe([{"stage": "language", "languages": "all"}, SCORER, _ensemble("fasttext_quality_score", "language_score")]))


@pytest.mark.parametrize("stages,message", [
    ([SCORER, _ensemble("fasttext_quality_scor")],
     r"stages\[1\]\(quality_ensemble\): metadata 'fasttext_quality_scor' is written by no earlier stage; "
     r"did you mean 'fasttext_quality_score'\?"),
    ([_ensemble("fasttext_quality_score"), SCORER],  # written, but only after the ensemble
     r"'fasttext_quality_score' is written by no earlier stage \(earlier stages write: nothing\)"),
    ([{"stage": "language", "languages": "all"}, _ensemble("language")], r"metadata 'language' is string, this stage needs double or int64"),
    ([SCORER, _ensemble("zzz")], r"'zzz' is written by no earlier stage \(earlier stages write: fasttext_quality_score\)"),
])
def test_undeclared_or_non_numeric_members_fail_validation(stages, message):
    with pytest.raises(RecipeError, match=message):
        compile_recipe(_recipe(stages))


def test_json_input_and_the_escape_hatch_are_left_to_the_run():
    """JSON lines documents may carry the key, and a datatrove step may write any: nothing to check up front."""
    compile_recipe(_recipe([_ensemble("a_score")], fmt="jsonl", path="in/*.jsonl"))
    hatch = {"stage": "datatrove", "step": "datatrove.pipeline.filters.SamplerFilter", "kwargs": {"rate": 1.0}}
    compile_recipe(_recipe([hatch, _ensemble("a_score")]))


def test_cli_validate_is_one_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "ens", "input": {"paths": ["data/sample"]},
                                  "stages": [SCORER, _ensemble("fasttext_quality_scor")]}))
    res = CliRunner().invoke(cuvee_main, ["validate", str(recipe)])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [f"Error: invalid recipe {recipe}: stages[1](quality_ensemble): metadata "
                                               f"'fasttext_quality_scor' is written by no earlier stage; did you mean "
                                               f"'fasttext_quality_score'?"]


def test_member_missing_from_the_documents_is_one_line_at_run_time(tmp_path):
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.jsonl.gz", "wt") as f:
        for i in range(20):
            f.write(json.dumps({"text": f"document {i}", "id": str(i), "metadata": {"a_score": i / 10}}) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "ens", "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
                                  "stages": [_ensemble("a_scor")], "output": {"format": "jsonl"},
                                  "executor": {"kind": "local", "tasks": 2}}))
    res = CliRunner().invoke(cuvee_main, ["run", str(recipe), "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == 1
    errors = [line for line in res.output.splitlines() if "a_scor" in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"Error: invalid recipe {recipe}: quality_ensemble: no document has a numeric 'a_scor'; did you mean 'a_score'")
    assert "Traceback" not in res.output and "unexpected" not in res.output
