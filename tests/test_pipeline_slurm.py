"""End-to-end runs on a real one-node SLURM cluster that the test starts and stops."""

from pathlib import Path

import pytest
import yaml

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import restat, run_recipe
from test_pipeline_core import make_jsonl

pytestmark = [pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[1]


def test_slurm_run_with_stats_and_accounting(cluster, tmp_path):
    ids = make_jsonl(tmp_path / "in", n_files=3, per_file=25)
    recipe = {
        "name": "slurm-t", "run_dir": str(tmp_path / "run"),
        "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
        "stages": [{"stage": "length", "min_chars": 60}],
        "executor": {"kind": "slurm", "tasks": 3, "partition": "debug", "time": "00:10:00", "mem_per_cpu_gb": 1},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    stats = run_recipe(path)
    assert stats["complete"]
    a = stats["accounting"]
    assert a["balanced"] and a["records_read"] == len(ids)
    kept = list(iter_documents(tmp_path / "run" / "output"))
    assert len(kept) == a["kept"] > 0
    assert all(len(d.text) >= 60 for d in kept)
    # the tasks really ran under SLURM: datatrove's slurm launch script and job ids are there
    assert (tmp_path / "run" / "logs" / "seg00" / "launch_script.slurm").exists()
    assert len(list((tmp_path / "run" / "logs" / "seg00" / "completions").iterdir())) == 3
    # re-merging stats later (as after a --no-wait submission) gives the same funnel
    again = restat(path)
    assert again["accounting"] == a


def test_rerun_while_submitted_jobs_are_queued_is_refused(cluster, tmp_path):
    """After `cuvee run --no-wait`, a rerun must not resubmit tasks that SLURM is still running."""
    from cuvee.kernel.workdir import FolderError
    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import load_recipe
    from cuvee.pipeline.runner import wait_for_jobs

    ids = make_jsonl(tmp_path / "in", n_files=2, per_file=10)
    recipe = {
        "name": "slurm-q", "run_dir": str(tmp_path / "run"),
        "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
        "stages": [{"stage": "exact_dedup"}],
        "executor": {"kind": "slurm", "tasks": 2, "partition": "debug", "time": "00:10:00", "mem_per_cpu_gb": 1},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    submitted = run_recipe(path, wait=False)
    assert submitted["submitted"]
    with pytest.raises(FolderError, match="still queued or running"):
        run_recipe(path)
    wait_for_jobs(compile_recipe(load_recipe(path)), timeout_s=600)
    stats = restat(path)
    assert stats["complete"] and stats["accounting"]["balanced"] and stats["accounting"]["records_read"] == len(ids)
    assert stats["accounting"]["inputs"]["files_read"] == 2


def test_demo_recipe_unchanged_on_slurm_matches_local(cluster, tmp_path, repo_root):
    """The same recipe file scales from local to SLURM: only the executor is overridden (and, to keep the test
    short, both runs read the first 150 records of each input file). Its dedup stages chain segments and
    whole-corpus phases through sbatch dependencies (datatrove's `depends`)."""
    from huggingface_hub import DatasetCard

    from cuvee.card.build import write_card

    recipe = repo_root / "recipes" / "demo.yaml"
    short = {"input": {**yaml.safe_load(recipe.read_text())["input"], "limit": 150}}
    local = run_recipe(recipe, {"run_dir": str(tmp_path / "local"), **short})
    slurm = run_recipe(recipe, {"run_dir": str(tmp_path / "slurm"), **short,
                                "executor": {"kind": "slurm", "tasks": 2, "partition": "debug", "time": "00:20:00",
                                             "mem_per_cpu_gb": 1}})
    assert local["accounting"]["inputs"]["files_limited"] >= 1  # the limit did cut
    assert slurm["complete"] and slurm["accounting"]["balanced"]
    assert slurm["accounting"]["by_reason"] == local["accounting"]["by_reason"]
    assert slurm["accounting"]["kept"] == local["accounting"]["kept"] > 0
    assert len(slurm["phases"]) >= 2  # exact + MinHash phases ran as their own SLURM jobs

    def ids(d):
        return sorted(x.id for x in iter_documents(Path(d) / "output"))

    assert ids(tmp_path / "slurm") == ids(tmp_path / "local")
    # a dataset card from the SLURM run's stats (merged across tasks) has the same numbers
    files = write_card(tmp_path / "slurm")
    card = DatasetCard.load(files.readme)
    assert card.data.pretty_name
    assert f"**{slurm['accounting']['records_read']}** input records" in files.readme.read_text()
