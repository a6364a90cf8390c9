"""`cuvee run` keeps the console readable: one line per phase and the summary table; datatrove's logs go
to the run folder (all of them), and `-v` brings them back to the console."""

from __future__ import annotations

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
