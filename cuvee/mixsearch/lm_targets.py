"""Search targets named by an lm-evaluation-harness task (``targets: [{name: arc, lm_eval: arc_easy_local,
weight: 0.5, limit: 500}]``): each item of the task becomes one target document, its context followed by the
task's target delimiter and its gold continuation, scored like any other target (bits per byte, or loss per
token for a tokenizer that cannot decode) and decontaminated against every source (caches.py).

Why likelihood and not accuracy: proxies of a few million parameters answer multiple-choice tasks at chance,
so their accuracy carries no signal about the mixture; the likelihood of the gold answer text does, and
small-model studies use it for that reason (the task loss of the OLMo model ladder, the correct answer's
negative log-likelihood normalised by its length: Bhagia et al. 2024, "Establishing Task Scaling Laws via
Compute-Efficient Model Ladders"; the correct-answer probability in DataDecide, Magnusson et al. 2025). Unlike
those, the whole item (context and continuation) is scored, not the continuation given the context, since a
search target is scored as whole documents; the context's share of the score depends on the task's format.

Offline and safe, as the rest of cuvee reads tasks: the task is resolved when the config is validated
(cuvee.dedup.eval_sets.resolve_task: a shipped task name or a task YAML; its data must be local files, a
missing one is one line) and a task file that would run Python (``!function``) is refused unless the target
says ``allow_task_code: true`` (cuvee.train.lm_eval_backend.check_task_code). The items are rendered by
lm-eval itself (its templates, ``process_docs``) under the offline environment, when the target is tokenized.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
from pathlib import Path


class LmTargetError(ValueError):
    """An lm_eval target that cannot be read offline (unknown task, no local data, task code not allowed)."""


def _task_yaml(spec: str) -> Path:
    from cuvee.dedup.eval_sets import task_files

    p = Path(spec).expanduser()
    return p.resolve() if p.suffix in (".yaml", ".yml") else task_files()[spec].resolve()


def resolve(spec: str, split: str | None, allow_code: bool) -> dict:
    """The task's name, YAML and local data files; raises :class:`LmTargetError` (one line) before any work."""
    from cuvee.dedup.eval_sets import EvalSetError, resolve_task
    from cuvee.train.lm_eval_backend import EvalTaskError, check_task_code

    if Path(spec).suffix not in (".yaml", ".yml"):
        from cuvee.dedup.eval_sets import task_files
        from cuvee.pipeline.recipe import did_you_mean

        known = task_files()
        if spec not in known:
            raise LmTargetError(f"lm_eval {spec!r}: not a shipped task{did_you_mean(spec, known)} (shipped: "
                                f"{', '.join(sorted(k for k, v in known.items() if k == v.stem))}); or give the "
                                f"path of a task YAML whose data files are local")
    try:
        name, files, _ = resolve_task(spec, split)
        path = _task_yaml(spec)
        check_task_code(path, allow_code, warn=lambda line: None)
    except (EvalSetError, EvalTaskError) as e:
        raise LmTargetError(f"lm_eval {spec!r}: {e}") from None
    if importlib.util.find_spec("lm_eval") is None:
        raise LmTargetError(f"lm_eval {spec!r}: lm-evaluation-harness is not installed (pip install 'cuvee[eval]'); "
                            f"it renders the task's items")
    return {"task": name, "yaml": str(path), "files": list(files), "split": split}


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
    """datasets' "Generating test split" bars off while a task loads (the search prints its own line)."""
    from datasets.utils import logging as ds_logging

    was = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def render(task_info: dict, allow_code: bool, limit: int, say=print) -> tuple[list[str], dict]:
    """The first ``limit`` items of the task's evaluation split as texts, and the counts (read, kept, and
    dropped by reason: an item lm-eval cannot render or that has no gold text)."""
    from cuvee.train.lm_eval_backend import EvalTaskError, _quiet_loggers, load_task_config, offline_env

    try:
        cfg = load_task_config(task_info["yaml"], allow_code=allow_code,
                               warn=lambda line: say(f"[search] {line}"))
    except EvalTaskError as e:
        raise LmTargetError(f"lm_eval {task_info['task']!r}: {e}") from None
    if task_info.get("split"):
        cfg["test_split"] = task_info["split"]
    counts = {"read": 0, "kept": 0, "dropped": collections.Counter()}
    texts = []
    with offline_env(), _quiet_loggers(True), _no_progress_bars():
        from lm_eval.api.task import ConfigurableTask

        try:
            task = ConfigurableTask(config=cfg)
            docs = task.eval_docs
        except Exception as e:  # noqa: BLE001 - a task lm-eval cannot build: one line for the user
            raise LmTargetError(f"lm_eval {task_info['task']!r}: lm-eval cannot build the task: "
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
