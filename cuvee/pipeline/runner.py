"""`cuvee run`: validate a recipe, compile it, run the executors, merge stats, check the accounting."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from cuvee.pipeline.compiler import check_inputs, compile_recipe
from cuvee.pipeline.executors import build_chain, job_completed_ranks
from cuvee.pipeline.recipe import LocalExecutorConfig, Recipe, SlurmExecutorConfig, load_recipe, parse_recipe
from cuvee.pipeline.stats import check_accounting, collect_stats, summary_table


def _as_recipe(recipe_or_path, overrides: dict[str, Any] | None) -> Recipe:
    if isinstance(recipe_or_path, Recipe):
        if overrides:
            data = recipe_or_path.to_dict()
            for dotted, value in overrides.items():
                node = data
                *parents, last = dotted.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                node[last] = value
            return parse_recipe(data, f"<{recipe_or_path.name}>")
        return recipe_or_path
    if isinstance(recipe_or_path, dict):
        return _as_recipe(parse_recipe(recipe_or_path), overrides)
    return load_recipe(recipe_or_path, overrides)


class _Progress:
    """A progress bar over finished tasks of every job, polled from datatrove's completion markers."""

    def __init__(self, jobs, enabled: bool):
        self.jobs = jobs
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.enabled:
            from tqdm import tqdm

            total = sum(j.tasks for j in self.jobs)
            self._bar = tqdm(total=total, desc="tasks", unit="task", leave=True)

            def poll():
                while not self._stop.wait(0.5):
                    self._bar.n = sum(job_completed_ranks(j) for j in self.jobs)
                    self._bar.refresh()

            self._thread = threading.Thread(target=poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._bar.n = sum(job_completed_ranks(j) for j in self.jobs)
            self._bar.close()


def run_recipe(recipe_or_path, overrides: dict[str, Any] | None = None, progress: bool = False,
               fresh: bool = False, wait: bool = True) -> dict:
    """Run a recipe end to end and return its stats (also written to <run_dir>/stats.json).

    A rerun resumes: finished tasks are skipped. ``fresh`` deletes the run directory first.
    On SLURM the jobs are submitted; with ``wait`` the call blocks until they finish and then merges stats.
    """
    recipe = _as_recipe(recipe_or_path, overrides)
    check_inputs(recipe)
    run_dir = recipe.resolved_run_dir()
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe.yaml").write_text(recipe.source or yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    (run_dir / "recipe.resolved.json").write_text(json.dumps(recipe.to_dict(), indent=2))

    jobs = compile_recipe(recipe, run_dir)
    executors = build_chain(jobs, recipe.executor, recipe.name)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    with _Progress(jobs, progress and isinstance(recipe.executor, LocalExecutorConfig)):
        executors[-1].run()
    if isinstance(recipe.executor, SlurmExecutorConfig):
        if not wait:
            return {"submitted": [j.name for j in jobs], "run_dir": str(run_dir)}
        wait_for_jobs(jobs)
    stats = collect_stats(jobs, recipe, run_dir, started=started, wall_time_s=round(time.perf_counter() - t0, 3))
    (run_dir / "stats.json").write_text(json.dumps(stats, indent=2))
    if stats["complete"]:
        check_accounting(stats)
    return stats


def wait_for_jobs(jobs, timeout_s: float = 24 * 3600, poll_s: float = 2.0) -> None:
    """Block until every task of every job wrote its completion marker (SLURM runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(job_completed_ranks(j) >= j.tasks for j in jobs):
            return
        time.sleep(poll_s)
    raise TimeoutError("jobs did not finish in time; rerun `cuvee stats RUN_DIR` later")


def restat(recipe_or_path, overrides: dict[str, Any] | None = None) -> dict:
    """Re-merge the stats of an existing run dir (e.g. after SLURM jobs finished)."""
    recipe = _as_recipe(recipe_or_path, overrides)
    run_dir = recipe.resolved_run_dir()
    jobs = compile_recipe(recipe, run_dir)
    stats = collect_stats(jobs, recipe, run_dir)
    (Path(run_dir) / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats


__all__ = ["run_recipe", "restat", "summary_table"]
