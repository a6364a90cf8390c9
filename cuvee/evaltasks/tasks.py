"""One resolution of an evaluation task for every command: a task name or YAML path becomes a :class:`Task` (its
config constructed as lm-eval would, its local data files resolved), whether the decontaminate stage, an anneal's
``downstream:``, ``eval-downstream`` or a mix-search ``lm_eval:`` target asks, so one name means one task.

Names: the tasks shipped in ``cuvee/assets/eval_tasks`` and those under the caller's ``include_path`` (these win),
each by file stem and by its ``task:`` name. Data: offline only, so ``dataset_path`` must be a local format and
every ``dataset_kwargs.data_files`` entry a local file: ``~`` and ``$VARS`` expanded (no shell), taken relative to
the task YAML's folder (lm-eval alone would take the current directory), checked to exist. Code: a task whose
files hold a ``!function`` (outside cuvee's own shipped files), or whose constructed config names a metric lm-eval
would load through Hugging Face ``evaluate`` (a metric script is Python too), is refused by :func:`check_code`
unless allowed.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuvee.evaltasks.errors import EvalTaskError
from cuvee.evaltasks.loader import FunctionRef, construct
from cuvee.kernel.config import did_you_mean

TASKS_DIR = Path(__file__).resolve().parents[1] / "assets" / "eval_tasks"
LOCAL_FORMATS = ("json", "csv", "parquet", "text")
_VAR = re.compile(r"\$\{?(\w+)")


@dataclass(frozen=True, eq=False)
class Task:
    """A resolved task: its name, YAML, constructed config (``!function`` inert) and absolute data files, in the
    shape the YAML gave them (a path, a list, or a mapping of split to either)."""

    name: str
    yaml: Path
    config: dict
    yaml_files: tuple[Path, ...]  # the task's YAML first, then every file it includes
    data_files: Any
    refs: tuple[FunctionRef, ...]  # every !function of those files, also one a later key overrides

    @property
    def code(self) -> list[FunctionRef]:
        """The ``!function`` references lm-eval would import, less those written in cuvee's shipped task files."""
        return [r for r in self.refs if not r.yaml_file.is_relative_to(TASKS_DIR)]

    def split_files(self, split: str | None = None) -> tuple[str, ...]:
        """The data files of ``split`` (default: the task's test split, else its validation split, else the first)."""
        files = self.data_files
        if isinstance(files, dict):
            want = split or self.config.get("test_split") or self.config.get("validation_split") or next(iter(files))
            if want not in files:
                raise EvalTaskError(f"task {self.name} ({self.yaml}): split {want!r} not among its data_files "
                                    f"({', '.join(map(str, files))})")
            files = files[want]
        return tuple(files if isinstance(files, list) else [files])

    def files(self) -> list[str]:
        """Every file the task reads: its YAMLs, the Python files of its references, its data files (stamped by
        the plans that bind the task, cuvee.kernel.stamps)."""
        py = [str(r.python_file) for r in self.refs if r.python_file is not None]
        data = [f for v in (self.data_files.values() if isinstance(self.data_files, dict) else [self.data_files])
                for f in (v if isinstance(v, list) else [v])]
        return list(dict.fromkeys([*map(str, self.yaml_files), *py, *data]))


def task_index(include_path: tuple[str, ...] = ()) -> dict[str, Path]:
    """Task name -> YAML for the shipped tasks and those under ``include_path`` (later folders win)."""
    out: dict[str, Path] = {}
    for folder in (TASKS_DIR, *(Path(f).expanduser() for f in include_path)):
        if not folder.is_dir():
            raise EvalTaskError(f"include_path {folder}: not a folder of task YAMLs")
        for p in sorted(q for q in folder.rglob("*") if q.suffix in (".yaml", ".yml") and q.is_file()):
            out[p.stem] = p.resolve()
            try:
                name = construct(p)[0].get("task")
            except EvalTaskError:
                continue  # a broken file is named when someone asks for it by path
            if isinstance(name, str):
                out[name] = p.resolve()
    return out


def find_task(spec: str, include_path: tuple[str, ...] = ()) -> Path:
    """The YAML of a task name or path; one line naming what is known when there is none."""
    p = Path(spec).expanduser()
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise EvalTaskError(f"task file {spec} not found")
        return p.resolve()
    known = task_index(include_path)
    if spec not in known:
        shipped = sorted(k for k, v in known.items() if k == v.stem and v.is_relative_to(TASKS_DIR))
        raise EvalTaskError(f"unknown task {spec!r}{did_you_mean(spec, known)}: not a task YAML path nor a task "
                            f"shipped with cuvee ({', '.join(shipped)}) or under include_path")
    return known[spec]


def load_task(spec: str, include_path: tuple[str, ...] = ()) -> Task:
    """The task named by ``spec`` (name or YAML path), its data resolved to local files; nothing imported or run."""
    path = find_task(spec, include_path)
    cfg, yaml_files, refs = construct(path)
    name = cfg["task"] if isinstance(cfg.get("task"), str) and cfg["task"] else path.stem
    where = f"task {name} ({path})"
    if cfg.get("dataset_path") not in LOCAL_FORMATS:
        raise EvalTaskError(f"{where}: dataset_path {cfg.get('dataset_path')!r} is not a local format "
                            f"({', '.join(LOCAL_FORMATS)}); cuvee reads eval data only from local files, nothing is "
                            f"downloaded")
    kwargs = cfg.get("dataset_kwargs")
    files = kwargs.get("data_files") if isinstance(kwargs, dict) else None
    if not files:
        raise EvalTaskError(f"{where}: dataset_kwargs.data_files is required (a local data file)")
    if isinstance(files, dict):
        files = {split: _files(v, path, where) for split, v in files.items()}
    else:
        files = _files(files, path, where)
    return Task(name, path, cfg, tuple(yaml_files), files, tuple(refs))


def _files(value, yaml_path: Path, where: str):
    return [data_file(v, yaml_path, where) for v in value] if isinstance(value, list) \
        else data_file(value, yaml_path, where)


def data_file(value: Any, yaml_path: Path, where: str) -> str:
    """One ``data_files`` entry as an absolute local path: ``~`` and set ``$VARS`` expanded without a shell,
    relative to the YAML's folder; a leftover ``$`` (an unset variable, a ``$(...)``) is one line."""
    if not isinstance(value, str) or not value:
        raise EvalTaskError(f"{where}: data file {value!r} is not a path")
    expanded = os.path.expandvars(os.path.expanduser(value))
    if "$" in expanded:
        unset = [v for v in _VAR.findall(value) if v not in os.environ]
        if unset:
            raise EvalTaskError(f"{where}: data file {value!r} needs ${unset[0]}, which is not set (point it at your "
                                f"local copies, docs/DOWNSTREAM_EVAL.md; nothing is downloaded)")
        raise EvalTaskError(f"{where}: data file {value!r} expands to {expanded!r}, which still holds a '$': only "
                            f"$NAME and ${{NAME}} of set variables are expanded, and no shell runs")
    p = Path(expanded)
    p = p if p.is_absolute() else yaml_path.parent / p
    if not p.is_file():
        raise EvalTaskError(f"{where}: local data file {p} not found (make a local copy, docs/DOWNSTREAM_EVAL.md; "
                            f"nothing is downloaded)")
    return str(p.resolve())


def hub_metrics(config: dict) -> list[str]:
    """Metric names lm-eval would load through Hugging Face ``evaluate`` (a metric script, i.e. Python: a local
    path runs as is) instead of its own registry; empty when lm-eval is not installed (it can run nothing)."""
    entries = [m for m in config.get("metric_list") or [] if isinstance(m, dict)]
    names = [(m.get("metric"), m.get("hf_evaluate") is True) for m in entries]
    names = [(n, forced) for n, forced in names if isinstance(n, str)]
    if not names:
        return []
    try:
        import lm_eval.api.metrics  # noqa: F401 - fills the registry
        from lm_eval.api.registry import metric_registry
    except ImportError:
        return []
    return [n for n, forced in names if forced or n not in metric_registry]


def check_code(task: Task, allow_code: bool, warn=None) -> None:
    """Refuse a task whose constructed config would run Python unless ``allow_code``; when allowed, name each
    Python file once through ``warn`` (stderr by default). cuvee's shipped task files are its own code."""
    code: dict[str, str] = {}  # one line per Python file
    for r in task.code:
        code.setdefault(str(r.python_file or r.spec), r.describe())
    for m in hub_metrics(task.config):
        code.setdefault(m, f"{task.yaml} loads metric {m!r} through Hugging Face evaluate, which runs its script")
    if code and not allow_code:
        raise EvalTaskError(f"task {task.name}: {next(iter(code.values()))}; lm-eval would import and run it. cuvee "
                            f"runs no code from task files unless you allow it (--allow-task-code, allow_task_code: "
                            f"true; only for files you trust)")
    for line in code.values():
        (warn or _stderr)(f"warning: --allow-task-code: {line}")


def checked_task(spec: str, allow_code: bool, warn=None, include_path: tuple[str, ...] = ()) -> Task:
    """:func:`load_task` and :func:`check_code`: a task lm-eval may be handed."""
    task = load_task(spec, include_path)
    check_code(task, allow_code, warn)
    return task


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
