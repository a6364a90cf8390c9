"""Pre-flight checks: a bad recipe fails fast, before any work, with one clear line; outputs are deterministic."""

import gzip
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cuvee.cli import main
from cuvee.pipeline.compiler import check_inputs
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError, load_recipe, parse_recipe
from cuvee.pipeline.runner import run_recipe
from cuvee.yaml_safe import YamlLoadError, load_yaml


def make_jsonl(folder: Path, docs: list[dict], name: str = "part00.jsonl.gz") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / name, "wt") as fh:
        for d in docs:
            fh.write(json.dumps(d) + "\n")


def simple_docs(n: int = 20) -> list[dict]:
    return [{"text": ("word " * (5 + i)).strip(), "id": f"d{i}", "metadata": {"language": "en"}} for i in range(n)]


def recipe_dict(tmp: Path, stages=(), tasks=1, **extra):
    return {"name": "t", "run_dir": str(tmp / "run"),
            "input": {"paths": [str(tmp / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": list(stages), "executor": {"kind": "local", "tasks": tasks, "workers": 1}, **extra}


def write_recipe(tmp: Path, data, name="recipe.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(data))
    return p


def assert_clean_refusal(result, *needles):
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    for n in needles:
        assert n in result.output, result.output
    assert len(result.output.splitlines()) <= 6, result.output


# ------------------------------------------------------------------ 1. YAML alias bomb, bounded messages

BOMB = "\n".join(
    ['name: demo', 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f'{c}: &{c} [{",".join([f"*{p}"] * 9)}]' for p, c in zip("abcdefgh", "bcdefghi")]
    + ["input: {paths: *i}"]
) + "\n"


@pytest.mark.timeout(20)
def test_alias_bomb_is_rejected_quickly_with_a_short_message(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    msg = str(e.value)
    assert str(path) in msg and "alias" in msg
    assert len(msg) < 2000
    with pytest.raises(YamlLoadError):
        load_yaml(BOMB, "x.yaml")


@pytest.mark.timeout(20)
def test_alias_bomb_through_cli_validate(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert_clean_refusal(result, "alias")
    assert len(result.output) < 2000


def test_recursive_alias_rejected_and_small_anchors_allowed():
    with pytest.raises(YamlLoadError):
        load_yaml("a: &a [*a]\n", "r.yaml")
    data = load_yaml("base: &b {x: 1}\nc: *b\nd: {<<: *b, y: 2}\n", "ok.yaml")
    assert data == {"base": {"x": 1}, "c": {"x": 1}, "d": {"x": 1, "y": 2}}


def test_error_messages_are_capped(tmp_path):
    data = recipe_dict(tmp_path)
    data["name"] = ["y" * 500] * 20_000  # a huge offending value, no aliases
    data["stages"] = ["length"] * 5_000  # thousands of problems
    with pytest.raises(RecipeError) as e:
        parse_recipe(data, "big.yaml")
    assert len(str(e.value)) < 5000
    data = recipe_dict(tmp_path, stages=["x" * 100_000] + [{"stage": "nope"}] * 5_000)
    with pytest.raises(RecipeError) as e:
        parse_recipe(data, "big.yaml")
    msg = str(e.value)
    assert len(msg) < 5000 and "more problem" in msg


# ------------------------------------------------------------------ 2. inputs that match no readable file


def test_folder_without_archives_fails_validate_and_run(tmp_path):
    folder = tmp_path / "crawl"
    folder.mkdir()
    (folder / "README.txt").write_text("not an archive")
    data = recipe_dict(tmp_path)
    data["input"] = {"paths": [str(folder)], "format": "auto"}
    path = write_recipe(tmp_path, data)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert_clean_refusal(result, str(folder), ".warc")
    result = CliRunner().invoke(main, ["run", str(path)])
    assert_clean_refusal(result, str(folder))
    assert not (tmp_path / "run").exists()


def test_jsonl_folder_without_files_fails(tmp_path):
    (tmp_path / "empty").mkdir()
    data = recipe_dict(tmp_path)
    data["input"] = {"paths": [str(tmp_path / "empty")], "format": "jsonl"}
    with pytest.raises(RecipeError, match="empty"):
        check_inputs(parse_recipe(data))


def test_folder_with_archives_passes(tmp_path, repo_root):
    data = recipe_dict(tmp_path)
    data["input"] = {"paths": [str(repo_root / "data" / "sample")], "format": "auto"}
    check_inputs(parse_recipe(data))


# ------------------------------------------------------------------ 3. outputs under a regular file


def test_output_under_a_regular_file_fails_before_work(tmp_path):
    make_jsonl(tmp_path / "in", simple_docs())
    blocker = tmp_path / "some_file.txt"
    blocker.write_text("x")
    data = recipe_dict(tmp_path, output={"path": str(blocker / "out"), "format": "jsonl"})
    path = write_recipe(tmp_path, data)
    result = CliRunner().invoke(main, ["run", str(path)])
    assert_clean_refusal(result, str(blocker), "not a folder")
    assert not (tmp_path / "run").exists()
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert_clean_refusal(result, str(blocker))


def test_run_dir_under_a_regular_file_fails(tmp_path):
    make_jsonl(tmp_path / "in", simple_docs())
    blocker = tmp_path / "f"
    blocker.write_text("x")
    data = recipe_dict(tmp_path)
    data["run_dir"] = str(blocker / "a" / "b")
    with pytest.raises(RecipeError, match="run_dir"):
        run_recipe(data)


def test_output_path_that_is_a_file_fails(tmp_path):
    make_jsonl(tmp_path / "in", simple_docs())
    blocker = tmp_path / "f"
    blocker.write_text("x")
    data = recipe_dict(tmp_path, output={"path": str(blocker)})
    with pytest.raises(RecipeError, match="output.path"):
        check_inputs(parse_recipe(data))


# ------------------------------------------------------------------ 4. route_by with documents lacking the key


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_route_by_missing_key_goes_to_missing_folder(tmp_path, fmt):
    docs = simple_docs(30)
    for i, d in enumerate(docs):
        if i % 3 == 0:
            d["metadata"]["topic"] = "news" if i % 2 else "blog"
        elif i % 3 == 1:
            d["metadata"]["topic"] = None
    make_jsonl(tmp_path / "in", docs)
    data = recipe_dict(tmp_path, output={"format": fmt, "route_by": "topic"})
    stats = run_recipe(data)
    assert stats["accounting"]["balanced"] and stats["accounting"]["kept"] == 30
    out = tmp_path / "run" / "output"
    missing = list(iter_documents(out / "_missing"))
    assert len(missing) == 20
    assert {d.id for d in missing} == {f"d{i}" for i in range(30) if i % 3 != 0}
    assert len(list(iter_documents(out / "news"))) + len(list(iter_documents(out / "blog"))) == 10


# ------------------------------------------------------------------ 5. min > max


@pytest.mark.parametrize("stage, expected", [
    ({"stage": "length", "min_chars": 100, "max_chars": 10}, "stages[0](length).max_chars"),
    ({"stage": "gopher_quality", "min_doc_words": 500, "max_doc_words": 50}, "stages[0](gopher_quality).max_doc_words"),
    ({"stage": "gopher_quality", "min_avg_word_length": 8, "max_avg_word_length": 4},
     "stages[0](gopher_quality).max_avg_word_length"),
])
def test_min_above_max_is_rejected(tmp_path, stage, expected):
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [stage]))
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert expected in str(e.value) and str(path) in str(e.value)


def test_min_equal_max_and_open_max_are_fine(tmp_path):
    parse_recipe(recipe_dict(tmp_path, [{"stage": "length", "min_chars": 10, "max_chars": 10},
                                        {"stage": "length", "min_chars": 10},
                                        {"stage": "gopher_quality", "min_doc_words": 10, "max_doc_words": None}]))


# ------------------------------------------------------------------ 6. byte-identical compressed output


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.gz"))}


def test_jsonl_gz_output_is_byte_identical_across_runs(tmp_path):
    make_jsonl(tmp_path / "in", simple_docs(40))
    outs = []
    for k in ("a", "b"):
        data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 40}], tasks=1,
                           output={"format": "jsonl", "exclusions": True, "path": str(tmp_path / k / "output")})
        data["run_dir"] = str(tmp_path / k)
        stats = run_recipe(data)
        assert stats["accounting"]["balanced"]
        outs.append((_files(tmp_path / k / "output"), _files(tmp_path / k / "excluded")))
    (out_a, exc_a), (out_b, exc_b) = outs
    assert out_a and exc_a
    assert out_a == out_b
    assert exc_a == exc_b
    # still plain gzip that any reader opens
    for blob in [*out_a.values(), *exc_a.values()]:
        assert blob[4:8] == b"\0\0\0\0"  # gzip header mtime: fixed, not the clock
        assert gzip.decompress(blob).count(b"\n") > 0
