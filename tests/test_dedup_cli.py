"""`cuvee dedup run`: the work folder is claimed, locked and bound to stage, parameters, tasks and inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from _dedup_helpers import quiet
from cuvee.cli import main
from cuvee.kernel.workdir import MARKER, PLAN, locked


def _write(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"{path.stem}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.fixture
def inputs(tmp_path):
    quiet()
    a = _write(tmp_path / "a.jsonl", ["alpha one two three", "alpha one two three", "beta four five"])
    b = _write(tmp_path / "b.jsonl", ["gamma six seven", "delta eight nine", "delta eight nine"])
    return a, b


def _dedup(*args: str):
    res = CliRunner().invoke(main, ["dedup", "run", *args])
    quiet()
    return res


def _kept(work: Path) -> list[str]:
    return [json.loads(line)["id"] for f in sorted((work / "output").glob("*.jsonl")) for line in open(f)]


def test_tasks_share_the_input_files(tmp_path, inputs):
    """--tasks 2 over several files: both ranks read documents (rank r reads files[r::2]), the kept documents
    are those of --tasks 1. A reader per file gave every file to rank 0 ("No files found ... for rank=1")."""
    a, b = inputs
    sub = tmp_path / "sub"
    sub.mkdir()
    c = _write(sub / "c.jsonl", ["epsilon ten", "zeta eleven twelve", "epsilon ten"])
    one, two = tmp_path / "w1", tmp_path / "w2"
    res = _dedup("exact_dedup", str(a), str(b), str(c), "-w", str(one))
    assert res.exit_code == 0, res.output
    res = _dedup("exact_dedup", str(a), str(b), str(c), "-w", str(two), "--tasks", "2")
    assert res.exit_code == 0, res.output
    per_rank = [[json.loads(line)["id"] for line in open(two / "output" / f"{r:05d}.jsonl")] for r in range(2)]
    assert all(per_rank), per_rank
    assert sorted(per_rank[0] + per_rank[1]) == sorted(_kept(one)) == ["a-0", "a-2", "b-0", "b-1", "c-0", "c-1"]


def test_line_break_in_an_input_name_is_one_line(tmp_path):
    odd = _write(tmp_path / "odd\nname.jsonl", ["alpha"])
    res = _dedup("exact_dedup", str(odd), "-w", str(tmp_path / "w"))
    assert res.exit_code != 0 and "line break" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "w").exists()


def test_other_input_in_same_folder_is_refused(tmp_path, inputs):
    a, b = inputs
    work = tmp_path / "w"
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    assert _kept(work) == ["a-0", "a-2"]
    assert (work / MARKER).exists() and (work / PLAN).exists()
    res = _dedup("exact_dedup", str(b), "-w", str(work))
    assert res.exit_code != 0
    assert "different plan" in res.output and "b.jsonl" in res.output and "Traceback" not in res.output
    assert _kept(work) == ["a-0", "a-2"]  # nothing rewritten


def test_same_plan_resumes_and_fresh_replaces(tmp_path, inputs):
    a, b = inputs
    work = tmp_path / "w"
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    assert _kept(work) == ["a-0", "a-2"]
    res = _dedup("exact_dedup", str(b), "-w", str(work), "--fresh")
    assert res.exit_code == 0, res.output
    assert _kept(work) == ["b-0", "b-1"]
    assert _dedup("exact_dedup", str(b), "-w", str(work)).exit_code == 0  # the new plan is the bound one


@pytest.mark.parametrize("change", [["-p", "min_words=2"], ["--tasks", "2"]], ids=["params", "tasks"])
def test_changed_params_or_tasks_are_refused(tmp_path, inputs, change):
    a, _ = inputs
    work = tmp_path / "w"
    assert _dedup("line_dedup", str(a), "-w", str(work)).exit_code == 0
    res = _dedup("line_dedup", str(a), "-w", str(work), *change)
    assert res.exit_code != 0
    assert ("params.min_words" if change[0] == "-p" else "tasks") in res.output


def test_input_rewritten_at_same_size_is_refused(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "w"
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    st = a.stat()
    _write(a, ["ALPHA one two three", "alpha one two three", "beta four five"])  # same size
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert a.stat().st_size == st.st_size
    res = _dedup("exact_dedup", str(a), "-w", str(work))
    assert res.exit_code == 1 and f"input {a.resolve()} changed since" in res.output and "same size" in res.output


def test_input_rewritten_at_same_size_and_mtime_is_refused(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "w"
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    st = a.stat()
    _write(a, ["alpha one two three", "alpha one two three", "BETA four five"])  # same size, other bytes
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same modification time
    assert (a.stat().st_size, a.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    res = _dedup("exact_dedup", str(a), "-w", str(work))
    assert res.exit_code == 1 and f"input {a.resolve()} changed since" in res.output, res.output
    assert "same size, other content" in res.output, res.output


def test_yaml_syntax_error_in_a_param_is_one_line_naming_it(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "w"
    res = _dedup("minhash_dedup", str(a), "-w", str(work), "-p", "num_bands=[unclosed")
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("Error: Invalid value for '--param num_bands': not valid YAML")
    assert "unexpected" not in lines[0]
    assert not work.exists()


def test_user_folder_is_never_written(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "mine"
    (work / "output").mkdir(parents=True)
    (work / "output" / "00000.jsonl").write_text("my own file\n")
    res = _dedup("exact_dedup", str(a), "-w", str(work))
    assert res.exit_code != 0 and "did not create" in res.output
    assert (work / "output" / "00000.jsonl").read_text() == "my own file\n"
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["output", "output/00000.jsonl"]
    user_file = tmp_path / "file"
    user_file.write_text("x")
    assert _dedup("exact_dedup", str(a), "-w", str(user_file)).exit_code != 0
    assert user_file.read_text() == "x"


def test_busy_folder_is_refused(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "w"
    assert _dedup("exact_dedup", str(a), "-w", str(work)).exit_code == 0
    with locked(work):
        res = _dedup("exact_dedup", str(a), "-w", str(work))
    assert res.exit_code != 0 and "in use" in res.output


def test_bad_parameter_is_one_line_before_any_folder(tmp_path, inputs):
    a, _ = inputs
    work = tmp_path / "w"
    res = _dedup("minhash_dedup", str(a), "-w", str(work), "-p", "num_band=4")
    assert res.exit_code != 0
    want = "Error: minhash_dedup: num_band: unknown key; did you mean 'num_bands'?"
    assert res.output.strip().splitlines() == [want]
    res = _dedup("exact_dedup", str(tmp_path / "missing.jsonl"), "-w", str(work))
    assert res.exit_code != 0 and len(res.output.strip().splitlines()) == 1
    assert not work.exists()
