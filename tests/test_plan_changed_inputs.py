"""An input file changed since a run folder's plan was recorded is refused on resume in one line, also when it
was rewritten in place at the same size; an untouched file (or a byte-identical copy with its time) resumes."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from cuvee.cli import main
from cuvee.kernel.workdir import FolderError
from cuvee.pipeline.runner import run_recipe


def _write_input(folder, n_docs: int, filler: int = 0, letter: str = "a") -> os.PathLike:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docs.jsonl"
    rows = [{"id": f"d{i}", "text": f"document {i} {letter * 20} " + "x" * filler} for i in range(n_docs)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _recipe(tmp_path) -> dict:
    return {"name": "stamps", "run_dir": str(tmp_path / "run"),
            "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"}, "stages": [],
            "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1}}


def _texts(tmp_path) -> list[str]:
    import gzip

    return [json.loads(line)["text"] for f in sorted((tmp_path / "run" / "output").rglob("*.jsonl*"))
            for line in gzip.open(f, "rt")]


def test_same_size_rewrite_in_place_is_refused_in_one_line(tmp_path):
    path = _write_input(tmp_path / "in", 20, letter="a")
    run_recipe(_recipe(tmp_path))
    st = os.stat(path)
    _write_input(tmp_path / "in", 20, letter="b")  # same size, other text
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old modification time
    assert os.path.getsize(path) == st.st_size
    with pytest.raises(FolderError) as e:
        run_recipe(_recipe(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "same size, other content" in msg and "--fresh" in msg
    stats = run_recipe(_recipe(tmp_path), fresh=True)  # --fresh reads the new content
    assert stats["accounting"]["kept"] == 20 and all("b" * 20 in t for t in _texts(tmp_path))


def test_a_change_between_the_hashed_ends_is_caught_by_the_modification_time(tmp_path):
    path = _write_input(tmp_path / "in", 400, filler=1000)  # ~420 KB: the middle is not hashed
    assert os.path.getsize(path) > 4 * 64 * 1024
    run_recipe(_recipe(tmp_path))
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid] = ord("y") if data[mid] != ord("y") else ord("z")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(FolderError, match="modification time differs"):
        run_recipe(_recipe(tmp_path))


def test_an_untouched_or_identically_restored_input_resumes(tmp_path):
    path = _write_input(tmp_path / "in", 20)
    first = run_recipe(_recipe(tmp_path))
    assert run_recipe(_recipe(tmp_path))["accounting"] == first["accounting"]
    st = os.stat(path)
    _write_input(tmp_path / "in", 20)  # the same bytes again, its time restored (as cp -p does)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run_recipe(_recipe(tmp_path))["accounting"] == first["accounting"]


def test_cli_refuses_a_changed_input_with_one_line(tmp_path):
    path = _write_input(tmp_path / "in", 20, letter="a")
    (tmp_path / "r.yaml").write_text(json.dumps(_recipe(tmp_path)))
    run_recipe(_recipe(tmp_path))
    _write_input(tmp_path / "in", 20, letter="c")
    res = CliRunner().invoke(main, ["run", str(tmp_path / "r.yaml")])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: run folder") and f"input {path} changed since" in lines[0], \
        res.output
