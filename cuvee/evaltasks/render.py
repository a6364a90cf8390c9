"""Handing a task to lm-evaluation-harness: the checked, constructed config as a dict, never the YAML path, so
what :func:`cuvee.evaltasks.tasks.check_code` judged is exactly what runs.

lm-eval builds a task given as a dict from that dict alone (``TaskManager._load_spec`` -> ``TaskIndex.
entry_from_config`` -> ``TaskFactory._load_full_config`` deep-copies ``entry.cfg``; ``load_yaml`` is called only
for entries with a ``yaml_path``), and no ``include`` is left in it (the loader consumed them all). References
are imported with lm-eval's own ``_import_func_in_yml`` and only after the check, when code is allowed. Also
here: the offline environment and quiet loggers of every lm-eval call, and rendering a task's items as text (a
mix-search ``lm_eval:`` target: each item's context, target delimiter and gold continuation is one document).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
from typing import Any

from cuvee.evaltasks.errors import EvalTaskError
from cuvee.evaltasks.loader import resolve_functions
from cuvee.evaltasks.tasks import Task, check_code, checked_task, load_task

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1"}


def _importer():
    try:
        from lm_eval.tasks._yaml_loader import _import_func_in_yml
    except ImportError as e:
        raise EvalTaskError(f"lm-evaluation-harness is not usable ({e}): pip install 'cuvee[eval]' "
                            "(lm-eval[hf] 0.4.13+)") from None
    return _import_func_in_yml


def lm_eval_config(task: Task, allow_code: bool = False, warn=None) -> dict[str, Any]:
    """The dict lm-eval is handed for ``task``: checked first, then its references imported (only if allowed and
    present), its data files absolute."""
    check_code(task, allow_code, warn)
    importer = _importer()
    try:
        cfg = resolve_functions(task.config, importer)
    except Exception as e:  # noqa: BLE001 - the task's own (allowed) code failed to import: one line
        raise EvalTaskError(f"task {task.name} ({task.yaml}): {type(e).__name__}: {' '.join(str(e).split())[:300]}") \
            from None
    cfg["dataset_kwargs"] = {**cfg["dataset_kwargs"], "data_files": task.data_files}
    cfg["task"] = task.name
    return cfg


def load_task_config(spec: str, allow_code: bool = False, warn=None, include_path: tuple[str, ...] = ()) -> dict:
    """:func:`lm_eval_config` of a task name or YAML path."""
    return lm_eval_config(load_task(spec, include_path), allow_code, warn)


@contextlib.contextmanager
def offline_env():
    saved = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def quiet_loggers(quiet: bool = True):
    import logging

    loggers = [logging.getLogger(n) for n in ("lm_eval", "transformers", "datasets", "accelerate")] if quiet else []
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


# ---- mix-search targets: a task's items as text ------------------------------------------------------------------
def resolve_target(spec: str, split: str | None, allow_code: bool) -> dict:
    """The task of an ``lm_eval:`` target checked before any work: name, YAML, split and every file it reads."""
    task = checked_task(spec, allow_code, warn=lambda _line: None)
    task.split_files(split)  # an unknown split is refused now
    if importlib.util.find_spec("lm_eval") is None:  # found, not imported: that takes seconds
        raise EvalTaskError(f"task {task.name}: lm-evaluation-harness is not installed (pip install 'cuvee[eval]'); "
                            f"it renders the task's items")
    return {"task": task.name, "yaml": str(task.yaml), "files": task.files(), "split": split}


def item_text(task, doc) -> str | None:
    """Context + target delimiter + gold continuation of one item; None when the task gives no gold text."""
    ctx, gold = task.doc_to_text(doc), task.doc_to_target(doc)
    if task.OUTPUT_TYPE == "multiple_choice":
        choices = task.doc_to_choice(doc)
        if isinstance(ctx, int):  # several contexts, one continuation (winogrande): the gold context
            ctx = choices[ctx]
        elif isinstance(gold, int):
            gold = choices[gold]
    if isinstance(gold, list):  # several gold answers: the first
        gold = gold[0] if gold else None
        gold = gold if isinstance(gold, str) or gold is None else str(gold)
    if not isinstance(ctx, str) or not isinstance(gold, str):
        return None
    return ctx + (task.config.target_delimiter or "") + gold


@contextlib.contextmanager
def _no_progress_bars():
    """datasets' "Generating test split" bars off while a task loads (the caller prints its own line)."""
    from datasets.utils import logging as ds_logging

    was = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def render_items(target: dict, allow_code: bool, limit: int, say=print) -> tuple[list[str], dict]:
    """The first ``limit`` items of the target task's split as texts, and the counts (read, kept, and dropped by
    reason: an item lm-eval cannot render or that has no gold text)."""
    cfg = load_task_config(target["yaml"], allow_code, warn=lambda line: say(f"[search] {line}"))
    if target.get("split"):
        cfg["test_split"] = target["split"]
    counts: dict[str, Any] = {"read": 0, "kept": 0, "dropped": collections.Counter()}
    texts = []
    with offline_env(), quiet_loggers(True), _no_progress_bars():
        from lm_eval.api.task import ConfigurableTask

        try:
            task = ConfigurableTask(config=cfg)
            docs = task.eval_docs
        except Exception as e:  # noqa: BLE001 - a task lm-eval cannot build: one line for the user
            raise EvalTaskError(f"task {target['task']} ({target['yaml']}): lm-eval cannot build it: "
                                f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        for doc in docs:
            if counts["read"] >= limit:
                break
            counts["read"] += 1
            try:
                text = item_text(task, doc)
            except Exception:  # noqa: BLE001 - one item the task's templates cannot render: counted, not fatal
                counts["dropped"]["render_error"] += 1
                continue
            if text is None:
                counts["dropped"]["no_gold_text"] += 1
                continue
            texts.append(text)
            counts["kept"] += 1
    counts["dropped"] = dict(counts["dropped"])
    return texts, counts
