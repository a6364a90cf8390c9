"""Recipe validation, accounting and resume of the pipeline core (real datatrove executors, no mocks)."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError, load_recipe, parse_recipe
from cuvee.pipeline.runner import run_recipe
from cuvee.pipeline.stats import AccountingError

REPO = Path(__file__).resolve().parents[1]


def make_jsonl(folder: Path, n_files: int, per_file: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(n_files):
        with gzip.open(folder / f"part{f:02d}.jsonl.gz", "wt") as fh:
            for i in range(per_file):
                doc_id = f"f{f}-d{i}"
                ids.append(doc_id)
                text = ("word " * (5 + (i * 7) % 40)).strip()
                fh.write(json.dumps({"text": text, "id": doc_id, "metadata": {"language": "en"}}) + "\n")
    return ids


def recipe_dict(tmp: Path, stages, tasks=2, **extra):
    return {"name": "t", "run_dir": str(tmp / "run"), "input": {"paths": [str(tmp / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": stages, "executor": {"kind": "local", "tasks": tasks, "workers": 1}, **extra}


def write_recipe(tmp: Path, data) -> Path:
    p = tmp / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["stages"].append({"stage": "no_such_stage"}), "stages[1].stage: unknown stage 'no_such_stage'"),
        (lambda d: d["stages"][0].update(min_charz=3), "stages[0](length).min_charz: unknown key"),
        (lambda d: d["stages"][0].update(min_chars="many"), "stages[0](length).min_chars"),
        (lambda d: d["stages"][0].update(min_chars=-1), "greater than or equal to 0"),
        (lambda d: d.update(outptu={}), "outptu: unknown key"),
        (lambda d: d["executor"].update(kind="kubernetes"), "executor"),
        (lambda d: d["executor"].update(tasks=0), "executor.local.tasks"),
        (lambda d: d["input"].update(format="pdf"), "input.format"),
        (lambda d: d["stages"].append("length"), "each stage is a mapping with a 'stage' key"),
        (lambda d: d["stages"].append({"stage": "sample", "rate": 1.5}), "stages[1](sample).rate"),
    ],
)
def test_recipe_validation_names_file_and_key(tmp_path, mutate, expected):
    data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 10}])
    mutate(data)
    path = write_recipe(tmp_path, data)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(path) in str(e.value)
    assert expected in str(e.value)


def test_recipe_reports_every_problem_at_once(tmp_path):
    data = recipe_dict(tmp_path, [{"stage": "length", "bogus": 1}, {"stage": "nope"}])
    with pytest.raises(RecipeError) as e:
        parse_recipe(data, "x.yaml")
    msg = str(e.value)
    assert "stages[0](length).bogus: unknown key" in msg and "stages[1].stage: unknown stage 'nope'" in msg


def test_bad_yaml_and_missing_input_fail_before_work(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(bad)
    data = recipe_dict(tmp_path, [])
    with pytest.raises(RecipeError, match="matches no file"):
        run_recipe(write_recipe(tmp_path, data))
    assert not (tmp_path / "run").exists()


def test_run_accounting_balances_with_drop_reasons(tmp_path):
    ids = make_jsonl(tmp_path / "in", n_files=3, per_file=40)
    data = recipe_dict(tmp_path, [{"stage": "length", "min_chars": 60, "max_chars": 180}, {"stage": "sample", "rate": 0.5, "seed": 3}], tasks=3)
    stats = run_recipe(write_recipe(tmp_path, data))
    a = stats["accounting"]
    assert a["records_read"] == len(ids) == a["kept"] + a["dropped"]
    assert a["balanced"]
    kept = list(iter_documents(tmp_path / "run" / "output"))
    assert len(kept) == a["kept"] == stats["output"]["documents"]
    # the reasons are real: recompute them independently
    texts = {d_id: ("word " * (5 + (i * 7) % 40)).strip() for f in range(3) for i, d_id in enumerate(x for x in ids if x.startswith(f"f{f}-"))}
    short = sum(len(t) < 60 for t in texts.values())
    long_ = sum(len(t) > 180 for t in texts.values())
    length = next(s for s in stats["stages"] if s["name"] == "length")
    assert length["dropped"] == {"too_short": short, "too_long": long_}
    sample = next(s for s in stats["stages"] if s["name"] == "sample")
    assert sample["docs_in"] == len(ids) - short - long_
    assert sample["docs_out"] == len(kept)
    assert json.loads((tmp_path / "run" / "stats.json").read_text())["accounting"] == a


def test_silently_lost_documents_fail_loudly(tmp_path):
    make_jsonl(tmp_path / "in", n_files=1, per_file=30)
    data = recipe_dict(tmp_path, [{"stage": "datatrove", "step": "steps_for_tests.SilentDropper"}], tasks=1)
    with pytest.raises(AccountingError, match="does not balance"):
        run_recipe(write_recipe(tmp_path, data))


def test_resume_after_kill_9_no_duplicates_or_losses(tmp_path):
    ids = make_jsonl(tmp_path / "in", n_files=4, per_file=30)
    data = recipe_dict(tmp_path, [{"stage": "datatrove", "step": "steps_for_tests.SlowPassThrough", "kwargs": {"delay_s": 0.03}}], tasks=4)
    path = write_recipe(tmp_path, data)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}:{REPO}"}
    cmd = [sys.executable, "-m", "cuvee.cli", "run", str(path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    completions = tmp_path / "run" / "logs" / "seg00" / "completions"
    deadline = time.time() + 120
    while time.time() < deadline and not (completions.exists() and len(list(completions.iterdir())) >= 1):
        time.sleep(0.05)
    time.sleep(0.4)  # the next task is now mid-way
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(list(completions.iterdir()))
    assert 1 <= done_before < 4, "the kill must land mid-run"
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    out_ids = [d.id for d in iter_documents(tmp_path / "run" / "output")]
    assert sorted(out_ids) == sorted(ids)  # nothing missing, nothing twice
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["accounting"]["balanced"] and stats["accounting"]["kept"] == len(ids)
