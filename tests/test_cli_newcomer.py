"""What a new user meets on the command line: "did you mean" for stages and keys, errors that name the recipe
file, `cuvee stats RUN_DIR` (the argument `cuvee card` takes), phase names that say what they run, each
phase's own time, and "already complete" for a finished run that is run again."""

from __future__ import annotations

import io
import json
import os
import re
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
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\| (DEBUG|INFO|WARNING)\b")  # a log line's date or level
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


def test_run_ends_with_what_it_wrote_and_what_next(two_runs):
    d, _, first, _ = two_runs
    last = first.stdout.strip().splitlines()[-1]
    assert last.startswith("wrote ") and "run/stats.json; next: cuvee card run " in last, last
    assert (d / "run" / "stats.json").is_file()


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


# ---- the frictions of issue #37: one word, one line, what takes time said once -----------------------------------

def test_misspelt_lazy_command_gets_did_you_mean():
    """`cuvee valdate` got a suggestion, `cuvee mixx` none: the lazy commands were not among click's candidates."""
    for typo, meant in (("mixx", "mix"), ("trian", "train"), ("valdate", "validate")):
        out = CliRunner().invoke(main, [typo])
        hint = out.output.partition("did you mean ")[2]  # one or two candidates, the closest first
        assert out.exit_code != 0 and hint.startswith(f"'{meant}'"), (typo, out.output)


def _walk(cmd, path=("cuvee",)):
    import click

    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _walk(cmd.get_command(ctx, name), (*path, name))


def test_one_word_for_starting_over_on_every_command():
    """`--fresh` starts a folder over on every command that has the choice; older names stay hidden aliases."""
    older = {"--no-resume", "--overwrite", "--restart", "--force", "--clean"}
    with_fresh, shown_older = [], []
    for path, cmd in _walk(main):
        opts = {o: p for p in getattr(cmd, "params", []) for o in getattr(p, "opts", [])}
        if "--fresh" in opts:
            with_fresh.append(" ".join(path))
        shown_older += [f"{' '.join(path)} {o}" for o in older & set(opts) if not opts[o].hidden]
        assert not (older & set(opts)) or "--fresh" in opts, (path, sorted(opts))
    assert shown_older == []
    assert {"cuvee train", "cuvee anneal", "cuvee run", "cuvee mix"} <= set(with_fresh), with_fresh


def test_plan_difference_lists_the_task_count_once(two_runs):
    d, recipe, _, _ = two_runs
    r = _cuvee(d, "run", str(recipe), "--run-dir", "run", "--tasks", "3")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].count("recorded 2, now 3") == 1 and "tasks: recorded 2, now 3" in lines[0], lines[0]


def _tiny_train_config(tmp_path, data: Path) -> Path:
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "t", "model": {"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
        "data": {"paths": [str(data)], "seq_len": 64}, "optim": {"lr": 3e-3, "warmup_steps": 1}, "steps": 3,
        "micro_batch": 2, "log_every": 1, "ckpt_every": 0, "out_dir": str(tmp_path / "out"), "threads": 1}))
    return cfg


@pytest.fixture(scope="module")
def variant_data(tmp_path_factory):
    from cuvee.train.demo_data import build_variant_mix, load_wcxb

    root = tmp_path_factory.mktemp("variants")
    rows = load_wcxb()
    build_variant_mix(root / "a", "a", rows[:20], {"clean": 1.0}, max_doc_bytes=600)
    build_variant_mix(root / "b", "b", rows[20:40], {"shuffled": 1.0}, max_doc_bytes=600)
    return root


def test_train_ends_with_a_summary_and_what_next_not_a_json_dump(tmp_path, variant_data):
    from cuvee.train.cli import train as train_cli

    cfg = _tiny_train_config(tmp_path, variant_data / "a")
    res = CliRunner().invoke(train_cli, [str(cfg)])
    assert res.exit_code == 0, res.output
    out = res.stdout.strip().splitlines()
    assert "{" not in res.stdout and len(out) <= 6, out  # step lines, the summary and the closing line
    assert out[-2].startswith(f"trained {tmp_path / 'out'}: ") and "step 3 of 3" in out[-2], out
    assert out[-1].startswith(f"wrote {tmp_path / 'out'}/: checkpoints/step_0000003.pt, log.jsonl") and \
        "; next: cuvee anneal --checkpoint " in out[-1], out
    again = CliRunner().invoke(train_cli, [str(cfg)])  # a finished folder: says so, and what it holds
    assert again.stdout.strip().splitlines()[-2:] == [
        f"{tmp_path / 'out'}: nothing left to train ({out[-2].split(': ', 1)[1].split(';')[0]})",
        out[-1].replace("wrote", "holds", 1)], again.stdout
    other = CliRunner().invoke(train_cli, [str(cfg), "--json", "--set", f"out_dir={tmp_path / 'json'}"])
    summary = json.loads(other.stdout[other.stdout.index("{"):])  # the whole summary stays available
    assert other.exit_code == 0 and summary["step"] == 3 and summary["checkpoint"].endswith("step_0000003.pt")


def test_train_refusal_is_one_line_with_its_sentences_apart(tmp_path, variant_data):
    from cuvee.train.cli import train as train_cli

    cfg = _tiny_train_config(tmp_path, variant_data / "a")
    assert CliRunner().invoke(train_cli, [str(cfg), "--set", "steps=1"]).exit_code == 0
    res = CliRunner().invoke(train_cli, [str(cfg), "--set", "steps=2"])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
    assert "config.steps: recorded 1, now 2; Rerun with the original settings" in res.output, res.output
    assert "use --fresh to start over" in res.output


@pytest.mark.parametrize("order, blended", [("pieces", True), ("window", False), ("mix", False)])
def test_the_several_mixes_message_is_true_for_each_order(variant_data, caplog, order, blended):
    """Two mix outputs under order pieces are blended at every step (piece_blend.ArmBlend); mix and window read
    them one after another. The message said "one after another, not blended" for every order."""
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    shards = open_shards([str(variant_data / "a"), str(variant_data / "b")])
    with caplog.at_level("INFO", logger="cuvee.train.loader"):
        loader = PackedLoader(shards, 64, 2, seed=0, world_size=1, order=order, window=4)
    said = [r.getMessage() for r in caplog.records if "2 mixes" in r.getMessage()]
    assert len(said) == 1, said
    assert ("one after another" in said[0]) is not blended and ("blended together" in said[0]) is blended
    # what the message claims, checked against what the loader reads: the first rows' documents come from both
    # mixes (blended) or only from the first one (one after another)
    docs_a = open_shards([str(variant_data / "a")]).num_documents
    first = [int(d) for _ in range(4) for d in next(loader)["doc_index"].flatten().tolist() if d >= 0]
    assert (max(first) >= docs_a) is blended, (order, first[:20], docs_a)


def test_first_run_says_what_takes_time_once_and_a_second_run_says_nothing(tmp_path):
    """A new machine (empty numba and blocklist caches): the parent builds the URL blocklist cache and compiles
    the repetition kernels before the tasks start, each said on one line in the console's style, with no log
    line and no machine path; every kernel is compiled once, not once per task; a second run says none of it."""
    from test_pipeline_core import make_jsonl

    make_jsonl(tmp_path / "in", n_files=2, per_file=10)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "first", "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
                                      "stages": [{"stage": "url_filter"}, {"stage": "gopher_repetition"}],
                                      "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2}}))
    env = {**os.environ, "CUVEE_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "NUMBA_DEBUG_CACHE": "1"}
    runs = [subprocess.run([sys.executable, "-m", "cuvee.cli", "run", str(recipe), "--run-dir", f"run{i}"],
                           capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=600)
            for i in (1, 2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-3000:] + runs[1].stderr[-3000:]
    first = runs[0].stderr.splitlines()
    said = {"url_filter": r"url_filter: building the URL blocklist cache \(4\.5M domains\), once per machine \.\.\. "
                          r"[\d.]+ s",
            "gopher_repetition": r"gopher_repetition: compiling its numba kernels, once per machine \.\.\. [\d.]+ s"}
    seg = next(i for i, ln in enumerate(first) if ln.startswith("seg00"))
    for stage, pattern in said.items():
        at = [i for i, ln in enumerate(first) if re.fullmatch(pattern, ln)]
        assert len(at) == 1 and at[0] < seg, (stage, first)
    assert not [ln for ln in first if STAMP.search(ln) or str(tmp_path / "cache") in ln or "site-packages" in ln]
    saved = [ln.split(" to ", 1)[1] for ln in runs[0].stdout.splitlines() if ln.startswith("[cache] data saved to")]
    assert saved and len(saved) == len(set(saved)), saved  # each kernel compiled once (in the parent), not per task
    assert "once per machine" not in runs[1].stderr and "[cache] data saved" not in runs[1].stdout, runs[1].stderr
