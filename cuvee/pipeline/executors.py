"""Compiled jobs -> datatrove executors (local, SLURM, Ray), chained with ``depends``.

Resumability comes from datatrove: each task marks ``<logging_dir>/completions/<rank>`` when done and a
rerun skips completed ranks; writers overwrite their per-rank files, so a task killed mid-way reruns
without duplicates.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

from cuvee.kernel.errors import UserError
from cuvee.pipeline.compiler import Job
from cuvee.pipeline.console import timed
from cuvee.pipeline.recipe import LocalExecutorConfig, RayExecutorConfig, SlurmExecutorConfig


def build_executor(job: Job, cfg, depends=None, recipe_name: str = "cuvee"):
    tasks = job.tasks
    if isinstance(cfg, LocalExecutorConfig):
        from datatrove.executor import LocalPipelineExecutor

        workers = job.workers if job.workers is not None else cfg.workers
        workers = min(workers if workers > 0 else tasks, tasks)
        return LocalPipelineExecutor(
            pipeline=job.pipeline, tasks=tasks, workers=workers, logging_dir=str(job.logging_dir),
            depends=depends, skip_completed=True,
        )
    if isinstance(cfg, SlurmExecutorConfig):
        from datatrove.executor import SlurmPipelineExecutor

        env_command = cfg.env_command
        if env_command is None:
            # run tasks with the same interpreter that launched them (venv / pyenv alike)
            env_command = f"export PATH={Path(sys.executable).parent}:$PATH"
        return SlurmPipelineExecutor(
            pipeline=job.pipeline, tasks=tasks, time=cfg.time, partition=cfg.partition,
            cpus_per_task=cfg.cpus_per_task, mem_per_cpu_gb=cfg.mem_per_cpu_gb,
            workers=job.workers if job.workers is not None else cfg.workers,
            job_name=f"{cfg.job_name or recipe_name}-{job.name}", qos=cfg.qos or "normal",
            logging_dir=str(job.logging_dir), depends=depends, sbatch_args=dict(cfg.sbatch_args) or None,
            env_command=env_command, skip_completed=True, requeue=False, mail_type="NONE",
            srun_args={"cpu-bind": "none"},
        )
    if isinstance(cfg, RayExecutorConfig):
        try:
            import ray
        except ImportError:
            raise RuntimeError("executor.kind=ray needs the 'ray' package: pip install 'cuvee[ray]'") from None
        if not ray.is_initialized():
            _start_ray(ray, cfg, Path(job.logging_dir).parent / "ray.log")
        from datatrove.executor.ray import RayPipelineExecutor
        from loguru import logger

        _say_shared_logs_once(cfg, Path(job.logging_dir).parent)
        logger.disable("datatrove.executor.ray")  # its local-filesystem notice, once per job: said above, once
        try:
            return RayPipelineExecutor(
                pipeline=job.pipeline, tasks=tasks, workers=job.workers if job.workers is not None else cfg.workers,
                logging_dir=str(job.logging_dir), depends=depends, skip_completed=True,
                cpus_per_task=cfg.cpus_per_task, mem_per_cpu_gb=cfg.mem_per_cpu_gb,
            )
        finally:
            logger.enable("datatrove.executor.ray")
    raise TypeError(f"unknown executor config {cfg!r}")


def _start_ray(ray, cfg: RayExecutorConfig, log_file: Path) -> None:
    """Start (or join) Ray with its driver's start-up lines (token authentication, "Started a local Ray
    instance") in the run's logs folder, not on the console: a Ray run's console reads like a local run's."""
    import logging

    ray_log = logging.getLogger("ray")
    saved = ray_log.handlers[:]
    if "://" in str(log_file):
        to_file: logging.Handler = logging.NullHandler()  # logs on a remote store: Ray's own session logs keep them
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file)
    ray_log.handlers = [to_file]
    try:
        timed("ray: starting a local Ray instance" if cfg.address is None else f"ray: connecting to {cfg.address}",
              lambda: ray.init(address=cfg.address, num_cpus=cfg.num_cpus if cfg.address is None else None,
                               include_dashboard=False, log_to_driver=False))
    finally:
        ray_log.handlers = saved
        to_file.close()


_said_shared: set[str] = set()


def _say_shared_logs_once(cfg: RayExecutorConfig, logs: Path) -> None:
    """On a Ray cluster, a logs folder on this machine's disk must be shared with the workers (they mark finished
    tasks there): said once per run, not once per job as datatrove does; a local Ray shares this machine's disk."""
    if cfg.address is None or "://" in str(logs) or str(logs) in _said_shared:
        return
    _said_shared.add(str(logs))
    print(f"ray: the logs folder {logs} must be on a filesystem the cluster's workers share (they record finished "
          f"tasks there), or resuming will redo them", file=sys.stderr, flush=True)


def build_chain(jobs: list[Job], cfg, recipe_name: str = "cuvee") -> list:
    """One executor per job, each depending on the previous one; run the last to run them all."""
    executors = []
    prev = None
    for job in jobs:
        prev = build_executor(job, cfg, depends=prev, recipe_name=recipe_name)
        executors.append(prev)
    return executors


NO_ROOM = {errno.ENOSPC: ("the disk is full", "free space"), errno.EDQUOT: ("the disk quota is used up", "free space"),
           errno.EFBIG: ("a file reached the size limit (ulimit -f)", "raise the limit")}


class NoRoom(UserError):
    """A task could not write for want of space: the user's to fix, and the finished tasks are kept."""


def run_chain(executors: list, run_dir: Path) -> None:
    """Runs the chain (the last executor runs the ones it depends on). Out of space is one line saying what
    to do; the traceback is in the failed task's log file (when there was room to write it)."""
    try:
        executors[-1].run()
    except OSError as e:
        if e.errno not in NO_ROOM:
            raise
        what, fix = NO_ROOM[e.errno]
        raise NoRoom(f"{what} ({e.strerror}) while the run wrote to {run_dir}: {fix} and rerun the same command; "
                     f"finished tasks are kept") from None
