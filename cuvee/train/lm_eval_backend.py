"""Downstream multiple-choice evaluation of an exported model through lm-evaluation-harness, offline.

``evaluate_hf(model_dir, tasks, limit, batch_size, device)`` runs lm-eval's ``hf`` backend on a folder written
by :mod:`cuvee.train.hf_export` (``LlamaForCausalLM`` + tokenizer) and returns
``{task: {"acc": .., "acc_stderr": .., "acc_norm": .., "acc_norm_stderr": .., "samples": n, ...}}``.

Nothing is downloaded: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` are set for the run, the model and the
tokenizer come from ``model_dir``, and every task is resolved, checked and handed to lm-eval as a dict by
:mod:`cuvee.evaltasks` (local data files only, task code refused unless allowed), as every other command does.

Shipped tasks (``cuvee/assets/eval_tasks/``, pass their names):

* ``cuvee_wcxb_cloze``: 4-way next-sentence cloze built from the held-out WCXB pages in ``data/curated``
  (:func:`build_cloze_items`; CC-BY-4.0, see ``data/curated/SOURCE.txt``);
* ``fineweb_early_signal/*.yaml``: templates for FineWeb's early-signal tasks (hellaswag, arc_easy,
  arc_challenge, piqa, siqa, openbookqa, winogrande, commonsense_qa) reading local copies of those datasets
  from ``$CUVEE_EVAL_DATA`` (docs/DOWNSTREAM_EVAL.md).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cuvee.evaltasks import TASKS_DIR, EvalTaskError

CLOZE_TASK = "cuvee_wcxb_cloze"
CLOZE_DATA = TASKS_DIR / "cuvee_wcxb_cloze.jsonl"


@contextmanager
def _keep_rng_state():
    """simple_evaluate seeds python / numpy / torch globally; a caller (e.g. an anneal run) keeps its streams."""
    import numpy as np
    import torch

    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


# ------------------------------------------------------------------------------------------- evaluate

def evaluate_hf(model_dir: str | Path, tasks: list[str], limit: int | None = None, batch_size: int | str = 8,
                device: str = "cpu", dtype: str = "float32", num_fewshot: int | None = None,
                bootstrap_iters: int = 1000, max_length: int | None = None,
                quiet: bool = True, allow_task_code: bool = False) -> dict[str, dict[str, Any]]:
    """Evaluate the HF model folder on ``tasks`` (shipped task names or task YAML paths), offline.

    Returns ``{task: {metric: value, f"{metric}_stderr": se, ..., "samples": n, "seconds": s,
    "items_per_s": r}}`` with ``acc`` / ``acc_norm`` for multiple-choice tasks. ``limit`` caps the items
    per task (first ``limit`` items). Stderr of ``acc``/``acc_norm`` is lm-eval's closed-form standard error of
    the mean (sample std / sqrt(n)); ``bootstrap_iters`` only matters for non-mean metrics (0 disables stderr).
    ``quiet`` keeps lm-eval's and transformers' loggers at ERROR (e.g. the per-request truncation warnings). ``max_length`` (default: the
    model's ``max_position_embeddings``) is the window lm-eval scores in: contexts are cut from the left to
    fit, but each answer must fit whole (lm-eval asserts it), so short-window models need short answers.
    ``allow_task_code``: run task files that carry Python (``!function``); without it they are refused.
    A model folder with ``auto_map`` (custom code) is refused; the model, its config and tokenizer are loaded
    with ``trust_remote_code=False``.
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise EvalTaskError(f"{model_dir}: no config.json - not a Hugging Face model folder "
                            "(export one with `cuvee train ... --export-hf DIR`)")
    if not ((model_dir / "tokenizer.json").is_file() or (model_dir / "tokenizer_config.json").is_file()):
        raise EvalTaskError(f"{model_dir}: no tokenizer files - lm-eval needs the tokenizer next to the model")
    from cuvee.evaltasks.render import load_task_config, offline_env, quiet_loggers
    from cuvee.hf_loading import refuse_remote_code

    refuse_remote_code(model_dir)  # ModelLoadError, a user error: auto_map (custom code) in the folder

    configs = [load_task_config(t, allow_code=allow_task_code) for t in tasks]
    with offline_env(), quiet_loggers(quiet), _keep_rng_state():
        import lm_eval
        from lm_eval.tasks import TaskManager

        t0 = time.perf_counter()
        out = lm_eval.simple_evaluate(
            model="hf",
            model_args={"pretrained": str(model_dir), "tokenizer": str(model_dir), "dtype": dtype,
                        "trust_remote_code": False, **({"max_length": max_length} if max_length else {})},
            tasks=configs, num_fewshot=num_fewshot, batch_size=batch_size, device=device, limit=limit,
            task_manager=TaskManager(include_defaults=False), bootstrap_iters=bootstrap_iters,
            log_samples=False, cache_requests=False, verbosity="WARNING",
        )
        seconds = time.perf_counter() - t0
    return _summarise(out, seconds)


def _summarise(out: dict, seconds: float) -> dict[str, dict[str, Any]]:
    results, n_samples = out["results"], out.get("n-samples", {})
    total = sum(int(v.get("effective", 0)) for v in n_samples.values()) or None
    summary = {}
    for task, metrics in results.items():
        row: dict[str, Any] = {}
        for key, value in metrics.items():
            if key == "alias" or "," not in key:
                continue
            metric, _filter = key.split(",", 1)
            row[metric] = None if value == "N/A" else value
        n = int(n_samples.get(task, {}).get("effective", 0))
        row["samples"] = n
        # one shared wall clock: attribute it to tasks by item count
        row["seconds"] = seconds * n / total if total else seconds
        row["items_per_s"] = n / row["seconds"] if row["seconds"] else None
        summary[task] = row
    return summary


# ------------------------------------------------------------------------------------ cloze builder

_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def _sentences(text: str) -> list[str]:
    out = []
    for para in text.split("\n"):
        out.extend(s.strip() for s in _SENT.split(para) if s.strip())
    return out


def build_cloze_items(rows: list[dict] | None = None, per_doc: int = 3, max_items: int = 400, seed: int = 0,
                      context_chars: int = 400) -> list[dict]:
    """4-way "which sentence comes next" items from held-out WCXB pages (never in the demo's training split).

    For a page, an item takes a sentence (40-120 chars, so that with a byte-level tokenizer it fits a 128-token window) that follows at least two sentences of the same
    page; the context is the preceding text (last ``context_chars`` characters, cut at a word); the three
    distractors are sentences of *other* held-out pages with a similar length (0.7-1.4x), so length alone
    does not give the answer away. Deterministic for a seed.
    """
    from cuvee.train.demo_data import load_wcxb, split_heldout

    if rows is None:
        rows = split_heldout(load_wcxb())[1]
    rows = sorted(rows, key=lambda r: r.get("file_id") or r.get("url") or "")
    rng = random.Random(seed)
    doc_sents = [(r, _sentences(r.get("main_content") or "")) for r in rows]
    pool = [(i, s) for i, (_, sents) in enumerate(doc_sents) for s in sents if 40 <= len(s) <= 120]
    items = []
    for d, (row, sents) in enumerate(doc_sents):
        cands = [k for k in range(2, len(sents)) if 40 <= len(sents[k]) <= 120]
        for k in sorted(rng.sample(cands, min(per_doc, len(cands)))):
            true = sents[k]
            others = [s for i, s in pool if i != d and 0.7 <= len(s) / len(true) <= 1.4 and s != true]
            if len(others) < 3:
                continue
            context = " ".join(sents[:k])
            if len(context) > context_chars:
                context = context[-context_chars:]
                context = context[context.find(" ") + 1:] if " " in context else context
            choices = rng.sample(others, 3)
            label = rng.randrange(4)
            choices.insert(label, true)
            items.append({"id": f"{row.get('file_id')}-{k}", "context": context, "choices": choices,
                          "label": label, "url": row.get("url"), "page_type": row.get("page_type")})
    rng.shuffle(items)
    return items[:max_items]


def write_cloze_task(path: str | Path = CLOZE_DATA, **kw) -> dict:
    """Write the cloze jsonl (the shipped one is this with defaults); returns {items, sha256}."""
    items = build_cloze_items(**kw)
    text = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items)
    Path(path).write_text(text, encoding="utf-8")
    return {"items": len(items), "sha256": hashlib.sha256(text.encode()).hexdigest(), "path": str(path)}


if __name__ == "__main__":  # python -m cuvee.train.lm_eval_backend  -> rebuild the shipped cloze data
    print(json.dumps(write_cloze_task()))
