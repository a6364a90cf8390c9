"""cuvee.yaml_safe: nesting depth and expanded size in bytes are bounded, refusals are one short line, and
every YAML loader in cuvee goes through it (the card's recipe.yaml and the CLIs' key=value overrides too)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvee.yaml_safe import MAX_DEPTH, YamlLoadError, YamlTooLargeError, load_yaml

REPO = Path(__file__).resolve().parent.parent
BIG = "x" * 2_000_000
STRING_BOMB = f"a: &a {BIG}\nb: [" + ", ".join(["*a"] * 199) + "]\n"  # 199 aliases: under the alias limit


def test_deep_nesting_is_one_line_not_a_recursion_error():
    with pytest.raises(YamlTooLargeError) as ei:
        load_yaml("[" * 500 + "]" * 500, "deep.yaml")
    msg = str(ei.value)
    assert msg.startswith("deep.yaml: refused") and "nested" in msg and "\n" not in msg and len(msg) < 300


def test_deep_block_mappings_are_refused_too():
    doc = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + "  " * (MAX_DEPTH + 5) + "x: 1\n"
    with pytest.raises(YamlTooLargeError, match="nested more than"):
        load_yaml(doc, "deep.yaml")


def test_nesting_at_the_limit_still_loads():
    v = load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    for _ in range(MAX_DEPTH - 1):
        v = v[0]
    assert v == []


def test_one_long_string_aliased_many_times_is_refused_by_bytes():
    with pytest.raises(YamlTooLargeError) as ei:
        load_yaml(STRING_BOMB, "bomb.yaml")
    msg = str(ei.value)
    assert msg.startswith("bomb.yaml: refused") and "bytes" in msg and len(msg) < 300


def test_a_big_file_without_aliases_is_not_refused_for_its_own_size():
    v = load_yaml(f"a: {'y' * 20_000_000}\nb: [1, 2]\n")  # larger than the byte bound, but not expanded
    assert len(v["a"]) == 20_000_000 and v["b"] == [1, 2]
    assert len(load_yaml(f"a: &a {BIG}\nb: [*a, *a]\n")["b"]) == 2  # a few aliases of a long string are fine


def test_error_messages_are_short_even_for_huge_inputs():
    where = "w" * 10_000
    for doc in (STRING_BOMB, "a: [" + "b" * 1_000_000, "[" * 5000):
        with pytest.raises(YamlLoadError) as ei:
            load_yaml(doc, where)
        assert len(str(ei.value)) < 700 and "\n" not in str(ei.value)


def test_card_refuses_an_alias_bomb_recipe_yaml_instead_of_hanging(tmp_path):
    """The card reads recipe.yaml when stats.json carries no recipe: that read is bounded too."""
    from cuvee.card.run_data import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "stats.json").write_text('{"complete": true, "stages": []}')
    (run / "recipe.yaml").write_text(STRING_BOMB)
    data = load_run(run)  # returns promptly; the refusal is a note in the card, not a hang or a crash
    assert data.recipe == {}
    assert any("refused" in n and len(n) < 400 for n in data.notes)
    (run / "recipe.yaml").write_text("[" * 5000)
    data = load_run(run)
    assert any("nested" in n for n in data.notes)


def test_every_yaml_loader_in_cuvee_goes_through_yaml_safe():
    pattern = re.compile(r"\byaml\.(safe_)?load\(|\byaml\.(unsafe_|full_)?load(_all)?\(|yaml\.Loader\b")
    hits = []
    for p in (REPO / "cuvee").rglob("*.py"):
        if p.name == "yaml_safe.py":
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{p.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "YAML loaded outside cuvee.yaml_safe:\n" + "\n".join(hits)


def test_train_set_override_alias_bomb_is_refused():
    from cuvee.train.cli import _parse_overrides

    with pytest.raises(Exception) as ei:  # the CLI's own error type; what matters is its message
        _parse_overrides(("x=" + "[" * 500 + "]" * 500,))
    assert not isinstance(ei.value, RecursionError)
    assert "nested" in str(ei.value) and len(str(ei.value)) < 400


def test_named_tags_read_tool_files_as_data_under_the_same_limits():
    """lm-eval task YAMLs carry `!function`: built by the caller's function from its text, never run; any other
    tag is still refused, and an alias bomb in such a file is refused like any other."""
    import pytest

    from cuvee.yaml_safe import YamlSyntaxError, YamlTooLargeError, load_yaml

    text = "process_docs: !function utils.process\ndoc_to_text: '{{question}}'\n"
    inert = {"!function": lambda s: f"!function {s}"}
    assert load_yaml(text, "task.yaml", tags=inert) == {"process_docs": "!function utils.process",
                                                        "doc_to_text": "{{question}}"}
    with pytest.raises(YamlSyntaxError):
        load_yaml(text, "task.yaml")
    for other in ("x: !python/name:os.system ''\n", "x: !custom y\n", "x: !function [a.b]\n"):
        with pytest.raises(YamlSyntaxError):
            load_yaml(other, "task.yaml", tags=inert)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(YamlTooLargeError):
        load_yaml(bomb + "f: !function x.y\n", "task.yaml", tags=inert)
