"""A run folder is bound to its plan, locked while in use, and deleted only when cuvee owns it.

Each test reproduces a situation in which an earlier cuvee exited 0 with wrong output (or deleted
what it did not own); real datatrove executors throughout.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.cli import main
from cuvee.kernel.workdir import MARKER, PLAN, FolderError, FolderLock
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import restat, run_recipe
from cuvee.pipeline.stats import AccountingError, check_accounting, collect_stats
from test_pipeline_core import make_jsonl, recipe_dict, write_recipe

REPO = Path(__file__).resolve().parents[1]


def _ids(run: Path) -> list[str]:
    return sorted(d.id for d in iter_documents(run / "output"))


def test_stats_report_planned_and_read_files(tmp_path):
    make_jsonl(tmp_path / "in", n_files=3, per_file=10)
    stats = run_recipe(write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=2)))
    inp = stats["accounting"]["inputs"]
    assert inp == {"files_planned": 3, "files_read": 3, "files_failed": 0, "files_limited": 0,
                   "files_unaccounted": 0, "balanced": True}
    plan = json.loads((tmp_path / "run" / PLAN).read_text())["binding"]
    assert plan["tasks"] == 2
    assert [Path(f).name for f, _size in plan["inputs"][0]["files"]] == ["part00.jsonl.gz", "part01.jsonl.gz",
                                                                       "part02.jsonl.gz"]
    assert all(size > 0 for _f, size in plan["inputs"][0]["files"])


def test_unread_planned_files_fail_the_accounting(tmp_path):
    """Records can balance while whole files were never read; the file ledger catches it."""
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=1))
    stats = run_recipe(path)
    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import load_recipe

    recipe = load_recipe(path)
    plan = json.loads((tmp_path / "run" / PLAN).read_text())["binding"]
    plan["inputs"][0]["files"].append([str(tmp_path / "in" / "never_read.jsonl.gz"), 10])
    again = collect_stats(compile_recipe(recipe, tmp_path / "run"), recipe, tmp_path / "run", plan=plan)
    assert stats["accounting"]["balanced"]
    assert again["accounting"]["records_read"] == again["accounting"]["kept"]  # records alone look fine
    assert not again["accounting"]["balanced"] and again["accounting"]["inputs"]["files_unaccounted"] == 1
    with pytest.raises(AccountingError, match="1 planned file"):
        check_accounting(again)


@pytest.mark.parametrize("new_tasks", [2, 8])
def test_resume_with_another_task_count_is_refused(tmp_path, new_tasks):
    make_jsonl(tmp_path / "in", n_files=4, per_file=10)
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=4))
    run_recipe(path)
    before = _ids(tmp_path / "run")
    with pytest.raises(FolderError) as e:
        run_recipe(path, {"executor.tasks": new_tasks})
    msg = str(e.value)
    assert f"tasks: recorded 4, now {new_tasks}" in msg and "--fresh" in msg
    assert _ids(tmp_path / "run") == before
    # workers only change speed: resuming with other workers is allowed
    run_recipe(path, {"executor.workers": 2})
    # --fresh starts over with the new plan, and the output is complete again
    stats = run_recipe(path, {"executor.tasks": new_tasks}, fresh=True)
    assert stats["executor"]["tasks"] == new_tasks and _ids(tmp_path / "run") == before
    assert stats["accounting"]["inputs"]["files_read"] == 4


def test_resume_after_kill_with_fewer_tasks_is_refused_via_cli(tmp_path):
    """The observed case: kill -9, then the same command with --tasks 2 read most input never, exit 0."""
    make_jsonl(tmp_path / "in", n_files=4, per_file=30)
    data = recipe_dict(tmp_path, [{"stage": "datatrove", "step": "steps_for_tests.SlowPassThrough",
                                   "kwargs": {"delay_s": 0.03}}], tasks=4)
    path = write_recipe(tmp_path, data)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}:{REPO}"}
    cmd = [sys.executable, "-m", "cuvee.cli", "run", str(path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    completions = tmp_path / "run" / "logs" / "seg00" / "completions"
    deadline = time.time() + 120
    while time.time() < deadline and not (completions.exists() and any(completions.iterdir())):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = subprocess.run(cmd + ["--tasks", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "tasks: recorded 4, now 2" in res.stderr and "Traceback" not in res.stderr
    # the original command still resumes to a complete, exact output
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["accounting"]["balanced"] and stats["accounting"]["kept"] == 120
    assert stats["accounting"]["inputs"]["files_read"] == 4


def test_edited_recipe_or_other_recipe_is_refused(tmp_path):
    make_jsonl(tmp_path / "in", n_files=2, per_file=20)
    data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 60}], tasks=2)
    path = write_recipe(tmp_path, data)
    first = run_recipe(path)
    data["stages"][0]["min_chars"] = 10  # threshold edited between runs
    with pytest.raises(FolderError, match=r"stages\[0\]\.min_chars: recorded 60, now 10"):
        run_recipe(write_recipe(tmp_path, data))
    other = recipe_dict(tmp_path, [{"stage": "sample", "rate": 0.5}], tasks=2)
    other["name"] = "other"
    with pytest.raises(FolderError, match="different plan"):
        run_recipe(other)
    # the folder still holds the first recipe's stats, labelled as such
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["recipe"]["stages"][0]["min_chars"] == 60 and stats["accounting"] == first["accounting"]
    # `cuvee stats` with the edited recipe refuses too instead of relabelling
    with pytest.raises(FolderError):
        restat(write_recipe(tmp_path, data))


def test_changed_input_files_are_refused(tmp_path):
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=1))
    run_recipe(path)
    make_jsonl(tmp_path / "in", n_files=3, per_file=5)  # a new file appeared (and the old ones were rewritten)
    with pytest.raises(FolderError, match="changed since|different plan"):
        run_recipe(path)


def test_fresh_refuses_folders_cuvee_does_not_own(tmp_path, monkeypatch):
    make_jsonl(tmp_path / "in", n_files=1, per_file=5)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    data = recipe_dict(tmp_path, [], tasks=1)
    data["run_dir"] = str(precious)
    with pytest.raises(FolderError, match="did not create"):
        run_recipe(data, fresh=True)
    assert (precious / "thesis.tex").read_text() == "years of work"
    # run_dir: . in a non-empty current folder: refused, nothing deleted
    monkeypatch.chdir(precious)
    data["run_dir"] = "."
    res = CliRunner().invoke(main, ["run", str(write_recipe(tmp_path, data)), "--fresh"])
    assert res.exit_code != 0 and "did not create" in res.output and res.exception.__class__ is SystemExit
    assert (precious / "thesis.tex").exists()


def test_fresh_empties_an_owned_folder_and_keeps_it_owned(tmp_path):
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=2))
    run_recipe(path)
    (tmp_path / "run" / "leftover.txt").write_text("x")
    run_recipe(path, fresh=True)
    assert not (tmp_path / "run" / "leftover.txt").exists()
    assert json.loads((tmp_path / "run" / MARKER).read_text())["kind"] == "run"


def test_external_output_folder_is_bound_too(tmp_path):
    """Two run folders writing one output folder would overwrite each other's rank files."""
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    data = recipe_dict(tmp_path, [], tasks=2, output={"path": str(tmp_path / "shared_out"), "format": "jsonl"})
    run_recipe(data)
    data2 = {**data, "run_dir": str(tmp_path / "run2"), "executor": {"kind": "local", "tasks": 1, "workers": 1}}
    with pytest.raises(FolderError, match="output folder"):
        run_recipe(data2)


def test_second_process_on_a_locked_run_folder_is_refused(tmp_path):
    make_jsonl(tmp_path / "in", n_files=1, per_file=5)
    path = write_recipe(tmp_path, recipe_dict(tmp_path, [], tasks=1))
    run_recipe(path)
    with FolderLock(tmp_path / "run", "run folder"):
        res = subprocess.run([sys.executable, "-m", "cuvee.cli", "run", str(path)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode != 0
        assert "in use by another cuvee process" in res.stderr and f"pid {os.getpid()}" in res.stderr
        assert "Traceback" not in res.stderr
    run_recipe(path)  # released: runs again


def test_stale_tmp_files_are_cleaned_on_resume(tmp_path):
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    # a filter before the dedup: the segment cannot be replayed cheaply, so it writes an intermediate copy
    data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 1}, {"stage": "exact_dedup"}], tasks=2)
    path = write_recipe(tmp_path, data)
    run_recipe(path)
    assert (tmp_path / "run" / "work" / "seg00" / "00001.jsonl").exists()
    stale = tmp_path / "run" / "work" / "seg00" / ".00001.jsonl.tmp"
    stale.write_bytes(b'{"text": "half a rec')
    run_recipe(path)
    assert not stale.exists()


def test_validate_says_whether_the_run_folder_resumes_or_refuses(tmp_path):
    make_jsonl(tmp_path / "in", n_files=2, per_file=5)
    data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 10}], tasks=2)
    path = write_recipe(tmp_path, data)
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 0 and "run folder" in res.output and ": new" in res.output
    run_recipe(path)
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 0 and "same plan" in res.output
    data["stages"][0]["min_chars"] = 20
    res = CliRunner().invoke(main, ["validate", str(write_recipe(tmp_path, data))])
    assert res.exit_code != 0 and "min_chars: recorded 10, now 20" in res.output
