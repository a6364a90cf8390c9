"""What a new user meets on the command line: "did you mean" for stages and keys, errors that name the recipe
file, `cuvee stats RUN_DIR` (the argument `cuvee card` takes), phase names that say what they run, each
phase's own time, and "already complete" for a finished run that is run again."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cuvee.cli import main
from cuvee.pipeline.compiler import Job
from cuvee.pipeline.console import PhaseProgress
from cuvee.pipeline.recipe import RecipeError, parse_recipe

REPO = Path(__file__).resolve().parents[1]
WARC = REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"


def _problems(data) -> str:
    with pytest.raises(RecipeError) as e:
        parse_recipe(data, "r.yaml")
    return str(e.value)


def _recipe(**extra):
    return {"name": "t", "input": {"paths": [str(WARC)]}, **extra}


def test_misspelt_stage_gets_the_closest_names_not_all_of_them():
    msg = _problems(_recipe(stages=[{"stage": "gopher_qualty"}]))
    assert "unknown stage 'gopher_qualty'; did you mean 'gopher_quality'" in msg, msg
    assert "c4_badwords" not in msg and "url_dedup" not in msg  # not the list of every stage
    far = _problems(_recipe(stages=[{"stage": "zzzzzzzz"}]))
    assert "`cuvee stages` lists every stage" in far and "c4_badwords" not in far


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.update(outptu={}), "outptu: unknown key; did you mean 'output'?"),
    (lambda d: d["input"].update(limt=3), "input.limt: unknown key; did you mean 'limit'?"),
    (lambda d: d.update(executor={"kind": "local", "taks": 2}), "taks: unknown key; did you mean 'tasks'?"),
    (lambda d: d.update(stages=[{"stage": "length", "min_charz": 3}]),
     "stages[0](length).min_charz: unknown key; did you mean 'min_chars'"),
])
def test_unknown_key_gets_did_you_mean(mutate, expected):
    data = _recipe()
    mutate(data)
    assert expected in _problems(data)


def test_stages_command_suggests():
    out = CliRunner().invoke(main, ["stages", "minhash_dedupe"])
    assert out.exit_code != 0 and "did you mean 'minhash_dedup'" in out.output and "c4_badwords" not in out.output


def test_missing_input_is_reported_with_the_recipe_file(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(yaml.safe_dump({"name": "t", "input": {"paths": [str(tmp_path / "nowhere.warc.gz")]}}))
    r = subprocess.run([sys.executable, "-m", "cuvee.cli", "validate", str(recipe)], capture_output=True, text=True,
                       check=False, cwd=tmp_path, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert str(recipe) in lines[0] and "nowhere.warc.gz" in lines[0] and "does not exist" in lines[0], lines


def _cuvee(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuvee.cli", *args], capture_output=True, text=True, check=False,
                          cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A small run with a whole-corpus phase, run twice: the second finds every task finished."""
    d = tmp_path_factory.mktemp("runs")
    recipe = d / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "newcomer", "input": {"paths": [str(WARC)]},
                                      "stages": [{"stage": "response_check"}, {"stage": "length", "min_chars": 50},
                                                 {"stage": "exact_dedup"}],
                                      "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2}}))
    first = _cuvee(d, "run", str(recipe), "--run-dir", "run")
    second = _cuvee(d, "run", str(recipe), "--run-dir", "run")
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    return d, recipe, first, second


def test_phase_names_say_what_they_run(two_runs):
    _, _, first, _ = two_runs
    assert "seg00 (response_check..exact_dedup): 2/2 tasks, 50 docs read" in first.stderr, first.stderr


def test_finished_run_run_again_says_already_complete(two_runs):
    _, _, first, second = two_runs
    assert "docs/s" in first.stderr and "already complete" not in first.stderr
    phases = [ln for ln in second.stderr.splitlines() if ": " in ln and "tasks" in ln]
    assert phases and all("already complete" in ln for ln in phases), second.stderr
    assert "docs/s" not in second.stderr
    assert "seg00 (response_check..exact_dedup): already complete (2/2 tasks, 50 docs read" in second.stderr


def test_stats_takes_the_run_folder_like_card(two_runs):
    d, recipe, first, _ = two_runs
    (d / "run" / "stats.json").unlink()
    by_folder = _cuvee(d, "stats", "run")
    assert by_folder.returncode == 0 and "[balanced]" in by_folder.stdout, by_folder.stderr
    assert (d / "run" / "stats.json").is_file()
    moved = d / "moved"
    (d / "run").rename(moved)  # a run folder that was moved still answers for itself
    try:
        again = _cuvee(d, "stats", str(moved))
    finally:
        moved.rename(d / "run")
    assert again.returncode != 0 or "[balanced]" in again.stdout
    by_recipe = _cuvee(d, "stats", str(recipe), "--run-dir", "run")  # the old form still works
    assert by_recipe.returncode == 0 and "[balanced]" in by_recipe.stdout, by_recipe.stderr
    not_a_run = _cuvee(d, "stats", str(d))
    assert not_a_run.returncode != 0 and "not a cuvee run folder" in not_a_run.stderr


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _wait_for(predicate, what: str) -> None:
    done = threading.Event()
    for _ in range(600):  # up to a minute: the display polls twice a second
        if predicate():
            return
        done.wait(0.1)
    raise AssertionError(what)


def test_each_phase_shows_its_own_time_not_the_pipelines(tmp_path):
    jobs = [Job("seg00", "segment", [], [("reader", "reader"), ("stage", "00.url_filter"), ("stage", "01.length")],
                1, 1, tmp_path / "a"),
            Job("01.length.phase", "phase", [], [("stage", "01.length")], 1, 1, tmp_path / "b")]
    clock, term = _Clock(), _Terminal()

    def finish(job):
        (job.logging_dir / "completions").mkdir(parents=True)
        (job.logging_dir / "completions" / "00000").write_text("")

    with PhaseProgress(jobs, True, term, clock=clock):
        _wait_for(lambda: "seg00 (url_filter, length)" in term.getvalue(), "first bar")
        clock.now = 10.0
        finish(jobs[0])
        _wait_for(lambda: "01.length.phase" in term.getvalue(), "second bar")
        clock.now = 100.0
        finish(jobs[1])
        _wait_for(lambda: "1/1 tasks, 90.0 s" in term.getvalue(), "second bar done")
        clock.now = 1000.0
    frames = [f for f in term.getvalue().replace("\r", "\n").splitlines() if f.strip()]
    first = [f for f in frames if f.startswith("seg00")][-1]
    second = [f for f in frames if f.startswith("01.length.phase")][-1]
    assert first.endswith("|##########| 1/1 tasks, 10.0 s"), frames
    assert second.endswith("|##########| 1/1 tasks, 90.0 s"), frames
