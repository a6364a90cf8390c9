"""`cuvee run` keeps the console readable: one line per phase and the summary table; datatrove's logs go
to the run folder (all of them), and `-v` brings them back to the console."""

from __future__ import annotations

import json
import random
import resource
import string
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path, *extra) -> subprocess.CompletedProcess:
    recipe = {"name": "console", "input": {"paths": [str(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz")]},
              "stages": [{"stage": "response_check"}, {"stage": "exact_dedup"}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2, "workers": 2}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return subprocess.run([sys.executable, "-m", "cuvee.cli", "run", str(path), "--run-dir", str(tmp_path / "run"), *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def test_quiet_by_default_with_logs_in_the_run_folder(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    console = r.stdout + r.stderr
    assert "Launching pipeline" not in console and "| INFO " not in console and "PIPELINE" not in console
    lines = [ln for ln in console.splitlines() if ln.strip()]
    assert len(lines) < 30, console  # phases + summary table, not hundreds of log lines
    assert any(ln.startswith("seg00 (response_check, exact_dedup): 2/2 tasks, 50 docs read, 16 kept, 34 dropped")
               for ln in lines), console
    assert any(ln.startswith("02.exact_dedup") or ".exact_dedup." in ln for ln in lines)
    assert "records read 50 = kept 16 + dropped 34  [balanced]" in console
    logs = list((tmp_path / "run" / "logs").rglob("task_*.log"))
    assert logs and all("Launching pipeline" in f.read_text() for f in logs)  # everything still on disk


def test_verbose_brings_datatrove_logs_back(tmp_path):
    r = _run(tmp_path, "-v")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Launching pipeline" in r.stderr


def _no_room_run(tmp_path: Path, limit_bytes: int | None, *extra) -> subprocess.CompletedProcess:
    """``cuvee run`` whose processes (the CLI and its task workers) may not write a file past ``limit_bytes``
    (RLIMIT_FSIZE: a write past it fails with EFBIG, as one on a full disk fails with ENOSPC): the output
    files are the only ones that large, so a task fails mid-write in a datatrove worker."""
    rng = random.Random(0)
    for part in range(2 if not (tmp_path / "in0.jsonl").exists() else 0):
        with open(tmp_path / f"in{part}.jsonl", "w") as f:
            for i in range(800):
                text = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
                                for _ in range(60))
                f.write(json.dumps({"id": f"{part}-{i}", "text": text}) + "\n")
    recipe = {"name": "room", "input": {"paths": [str(tmp_path / "in*.jsonl")], "format": "jsonl"},
              "stages": [{"stage": "length", "min_chars": 10}], "output": {"format": "jsonl"},
              "executor": {"kind": "local", "tasks": 2, "workers": 2}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))

    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "cuvee.cli", *extra, "run", str(path), "--run-dir",
                           str(tmp_path / "run")], capture_output=True, text=True, cwd=REPO, timeout=600,
                          preexec_fn=limit)


def test_a_task_out_of_room_is_one_line_and_its_traceback_is_in_the_task_log(tmp_path):
    """Issue #37: a full disk ended with one Error: line, but the datatrove worker's traceback (50 lines) was
    printed first. Now the console has the phase line and the Error line; the traceback is in the task's log;
    with room again, the same command finishes the run."""
    r = _no_room_run(tmp_path, 48 * 1024)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "| ERROR" not in r.stderr and "Logging error" not in r.stderr, r.stderr
    assert len(lines) <= 3 and lines[-1] == (
        f"Error: a file reached the size limit (ulimit -f) (File too large) while the run wrote to {tmp_path / 'run'}: "
        f"raise the limit and rerun the same command; finished tasks are kept"), lines
    logs = "".join(f.read_text() for f in (tmp_path / "run" / "logs").rglob("task_*.log"))
    assert "Traceback" in logs and "File too large" in logs
    again = _no_room_run(tmp_path, None)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "records read 1600 = kept 1600 + dropped 0  [balanced]" in again.stdout + again.stderr


def test_verbose_shows_the_traceback_of_a_task_out_of_room(tmp_path):
    r = _no_room_run(tmp_path, 48 * 1024, "-v")
    assert r.returncode == 1 and "Traceback" in r.stderr and "File too large" in r.stderr
