"""`cuvee stages`: every parameter with its type, default (or "required") and description."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cuvee.cli import main
from cuvee.pipeline.registry import all_stages


def test_every_stage_and_parameter_is_listed_readably():
    out = CliRunner().invoke(main, ["stages"])
    assert out.exit_code == 0, out.output
    assert "PydanticUndefined" not in out.output
    for name, spec in all_stages().items():
        assert f"\n{name}: " in "\n" + out.output
        for field in spec.params.model_fields:
            assert f"    {field} " in out.output, (name, field)
    # a required parameter says so; a defaulted one shows its default as YAML would write it
    lines = [" ".join(line.split()) for line in out.output.splitlines()]
    assert any(ln.startswith("languages dict[str, float] | list[str] | 'all', required") for ln in lines)
    assert "min_num_sentences int, default 5" in lines


def test_one_stage_in_full_and_unknown_stage():
    out = CliRunner().invoke(main, ["stages", "extract"])
    assert out.exit_code == 0 and out.output.startswith("extract: ") and "timeout_s" in out.output
    assert "c4_quality" not in out.output
    bad = CliRunner().invoke(main, ["stages", "nope"])
    assert bad.exit_code != 0 and "unknown stage 'nope'" in bad.output


def test_json_schema_still_available():
    out = CliRunner().invoke(main, ["stages", "--json", "language"])
    schema = json.loads(out.output)["language"]
    assert "languages" in schema["required"]


def test_listed_descriptions_are_whole_sentences():
    """`cuvee stages` shows each stage's first paragraph; two were cut where their docstring's first line wrapped."""
    out = CliRunner().invoke(main, ["stages"])
    shown = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in out.output.splitlines()
             if line and not line.startswith(" ") and ": " in line}
    for name, spec in all_stages().items():
        first = " ".join(spec.doc.strip().split("\n\n")[0].split())
        assert shown[name] == first and shown[name].endswith((".", ")")), (name, shown[name])
