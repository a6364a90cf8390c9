"""Compiled jobs -> datatrove executors (local, SLURM, Ray), chained with ``depends``.

Resumability comes from datatrove: each task marks ``<logging_dir>/completions/<rank>`` when done and a
rerun skips completed ranks; writers overwrite their per-rank files, so a task killed mid-way reruns
without duplicates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cuvee.pipeline.compiler import Job
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
            ray.init(address=cfg.address, num_cpus=cfg.num_cpus if cfg.address is None else None,
                     include_dashboard=False, log_to_driver=False)
        from datatrove.executor.ray import RayPipelineExecutor

        return RayPipelineExecutor(
            pipeline=job.pipeline, tasks=tasks, workers=job.workers if job.workers is not None else cfg.workers,
            logging_dir=str(job.logging_dir), depends=depends, skip_completed=True,
            cpus_per_task=cfg.cpus_per_task, mem_per_cpu_gb=cfg.mem_per_cpu_gb,
        )
    raise TypeError(f"unknown executor config {cfg!r}")


def build_chain(jobs: list[Job], cfg, recipe_name: str = "cuvee") -> list:
    """One executor per job, each depending on the previous one; run the last to run them all."""
    executors = []
    prev = None
    for job in jobs:
        prev = build_executor(job, cfg, depends=prev, recipe_name=recipe_name)
        executors.append(prev)
    return executors


def job_completed_ranks(job: Job) -> int:
    comp = Path(job.logging_dir) / "completions"
    return sum(1 for _ in comp.iterdir()) if comp.exists() else 0
