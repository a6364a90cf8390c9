"""`cuvee run`: validate a recipe, compile it, run the executors, merge stats, check the accounting."""

from __future__ import annotations

import datetime as _dt
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from datatrove.utils.logging import logger

from cuvee.kernel import atomic, slurm
from cuvee.kernel.workdir import MARKER, FolderError, Workdir, bind_check, locked, open_workdirs, owner
from cuvee.pipeline.compiler import check_inputs, compile_recipe
from cuvee.pipeline.console import PhaseProgress, quiet_datatrove
from cuvee.pipeline.executors import build_chain, run_chain
from cuvee.pipeline.first_use import prepare_machine
from cuvee.pipeline.plan import build_plan, run_folders, split_stamps
from cuvee.pipeline.recipe import Recipe, SlurmExecutorConfig, load_recipe, parse_recipe
from cuvee.pipeline.stats import AccountingError, check_accounting, collect_stats, summary_table


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


def run_recipe(recipe_or_path, overrides: dict[str, Any] | None = None, progress: bool = False,
               fresh: bool = False, wait: bool = True, verbose: bool = False) -> dict:
    """Run a recipe end to end and return its stats (also written to <run_dir>/stats.json).

    A rerun resumes (finished tasks are skipped) only if its plan - resolved recipe, task count and
    input files - equals the one recorded in the run folder; otherwise it stops before any work
    (``FolderError``). ``fresh`` empties the run folder first, and only if cuvee created it.
    The run folder is locked for the whole run, so a second ``cuvee run`` on it is refused.
    On SLURM the jobs are submitted; with ``wait`` the call blocks until they finish and then merges stats.
    """
    recipe = _as_recipe(recipe_or_path, overrides)
    check_inputs(recipe)
    # a stage refusing its settings (e.g. one_pass with several tasks) stops here, before any folder is made;
    # the jobs that run are compiled again once the run folder is claimed (and emptied, with fresh)
    compile_recipe(recipe, recipe.resolved_run_dir())
    plan, stamped = split_stamps(build_plan(recipe))
    folders = [(folder, Workdir("run", what)) for folder, what in run_folders(recipe)]
    with ExitStack() as held:
        for opened in open_workdirs(folders, plan, held, fresh=fresh, inputs=stamped,
                                    before_fresh=check_slurm_jobs_finished):
            if opened.swept:
                logger.info(f"removed {opened.swept} stale temporary file(s) left by killed tasks in {opened.folder}")
        return _run_locked(recipe, plan, progress, wait, verbose)


def _run_locked(recipe: Recipe, plan: dict, progress: bool, wait: bool, verbose: bool = False) -> dict:
    run_dir = recipe.resolved_run_dir()
    atomic.write_text(run_dir / "recipe.yaml", recipe.source or yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    atomic.write_text(run_dir / "recipe.resolved.json", json.dumps(recipe.to_dict(), indent=2))

    jobs = compile_recipe(recipe, run_dir)
    executors = build_chain(jobs, recipe.executor, recipe.name)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    slurm = isinstance(recipe.executor, SlurmExecutorConfig)
    with quiet_datatrove(verbose, str(recipe.resolved_logging_dir())):
        prepare_machine()  # what each task would do on a new machine (compile kernels, build a cache), once, here
        # every executor's console reads alike: the phases' lines follow the completion markers its tasks write
        with PhaseProgress(jobs, progress and (wait or not slurm)):
            run_chain(executors, run_dir)
            if slurm:
                record_slurm_jobs(run_dir, executors)
                if wait:
                    wait_for_jobs(jobs)
    if slurm and not wait:
        return {"submitted": [j.name for j in jobs], "run_dir": str(run_dir)}
    stats = collect_stats(jobs, recipe, run_dir, started=started, wall_time_s=round(time.perf_counter() - t0, 3),
                          plan=plan)
    atomic.write_text(run_dir / "stats.json", json.dumps(stats, indent=2))
    if stats["complete"]:
        check_accounting(stats)
        check_some_input_read(stats, recipe.resolved_logging_dir(), run_dir)
    return stats


class InputsFailed(AccountingError):
    """Every planned input file failed: a run that read nothing must not look like one that kept nothing."""


def check_some_input_read(stats: dict, logs: Path, run_dir: Path) -> None:
    """Raise :class:`InputsFailed` when every planned input file ended as ``files_failed`` (all unreachable,
    all corrupt): the run balances, yet its output stands for none of its input. stats.json is written first."""
    inp = stats["accounting"].get("inputs") or {}
    planned, failed = inp.get("files_planned", 0), inp.get("files_failed", 0)
    if planned and failed == planned:
        raise InputsFailed(f"all {planned} input file(s) failed to read ({stats['accounting']['records_read']} "
                           f"records read); the reasons are in the logs under {logs}, the counts in "
                           f"{run_dir / 'stats.json'}")


_SLURM_JOBS = "slurm_jobs.json"


def record_slurm_jobs(run_dir: Path, executors) -> None:
    """Remember submitted SLURM job ids: a rerun must not resubmit tasks that are still queued or running."""
    ids = [str(e.job_id) for e in executors if str(getattr(e, "job_id", None) or "").isdigit()]  # -1: all done
    if ids:
        slurm.record(Path(run_dir) / _SLURM_JOBS, ids)


def check_slurm_jobs_finished(run_dir: Path) -> None:
    """Refuse to resume or start over while jobs submitted by an earlier ``cuvee run --no-wait`` still run."""
    ids = slurm.recorded(Path(run_dir) / _SLURM_JOBS)
    alive = slurm.alive(ids)
    if alive is None:
        logger.warning(f"run folder {run_dir} records SLURM job(s) {', '.join(ids)} but squeue is not here")
    elif alive:
        raise FolderError(f"run folder {run_dir}: SLURM job(s) {', '.join(alive)} submitted by an earlier run are "
                          f"still queued or running; wait for them (`cuvee stats RUN_DIR` merges their stats) "
                          f"or cancel them with scancel before rerunning")


def wait_for_jobs(jobs, timeout_s: float = 24 * 3600, poll_s: float = 2.0) -> None:
    """Block until every task of every job wrote its completion marker (SLURM runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(j.completed_ranks() >= j.tasks for j in jobs):
            return
        time.sleep(poll_s)
    raise TimeoutError("jobs did not finish in time; rerun `cuvee stats RUN_DIR` later")


def restat(recipe_or_path, overrides: dict[str, Any] | None = None) -> dict:
    """Re-merge the stats of an existing run dir (e.g. after SLURM jobs finished).

    Only for the plan the folder was run with: stats of one recipe are never labelled with another.
    """
    recipe = _as_recipe(recipe_or_path, overrides)
    run_dir = recipe.resolved_run_dir()
    if owner(run_dir) is None:
        raise FolderError(f"{run_dir} is not a cuvee run folder (no {MARKER})")
    plan, stamped = split_stamps(build_plan(recipe))
    with locked(run_dir, "run folder"):  # a run still working in the folder is refused in one line
        recorded = bind_check(run_dir, plan, what="run folder", inputs=stamped)
        jobs = compile_recipe(recipe, run_dir)
        stats = collect_stats(jobs, recipe, run_dir, plan=recorded["binding"])
        atomic.write_text(Path(run_dir) / "stats.json", json.dumps(stats, indent=2))
    return stats


__all__ = ["run_recipe", "restat", "summary_table"]
