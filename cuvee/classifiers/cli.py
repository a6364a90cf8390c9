"""``cuvee classify``: train, evaluate and apply quality classifiers (fastText or frozen-encoder + head)."""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import click
import numpy as np

from cuvee.kernel.atomic import write_json


def _check_sources(data, positive, negative) -> None:
    if data and (positive or negative):
        raise click.UsageError("give --data (labelled files) or --positive/--negative sources, not both")
    if not data and not (positive and negative):
        raise click.UsageError("give --data, or both --positive and --negative")


def _examples(data, positive, negative, text_key, label_key, regression, limit, negative_text_key=None):
    from cuvee.classifiers.examples import load_labelled, load_sources

    _check_sources(data, positive, negative)
    if data:
        if negative_text_key:
            raise click.UsageError("--negative-text-key goes with --negative sources, not --data")
        return load_labelled(list(data), text_key, label_key, regression=regression, limit=limit)
    return load_sources(list(positive), list(negative), text_key, limit_per_class=limit,
                        negative_text_key=negative_text_key)


def _kind_of(model: str) -> str:
    return "transformer" if os.path.isdir(model) and (Path(model) / "head.json").exists() else "fasttext"


def _source_options(fn):
    opts = [
        click.option("--data", multiple=True, help="labelled JSONL/Parquet files, folders or globs (text + label columns)"),
        click.option("--positive", multiple=True, help="documents of the positive class (label 'hq')"),
        click.option("--negative", multiple=True, help="documents of the negative class (label 'lq')"),
        click.option("--text-key", default="text", show_default=True),
        click.option("--negative-text-key", default=None, help="the negatives' text field when it is not --text-key "
                     "(e.g. curated main_content against a pipeline output's text)"),
        click.option("--label-key", default="label", show_default=True),
        click.option("--limit", type=int, default=None, help="at most this many examples (per class for --positive/--negative)"),
        click.option("--positive-label", default="hq", show_default=True, help="label whose probability is the score"),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@click.group("classify")
def classify():
    """Train, evaluate and apply document quality classifiers."""


@classify.command("train")
@_source_options
@click.option("--output", "-o", required=True, help="model file (.bin/.ftz) for fasttext, folder for transformer")
@click.option("--kind", type=click.Choice(["fasttext", "transformer"]), default="fasttext", show_default=True)
@click.option("--valid-fraction", type=float, default=0.1, show_default=True, help="held-out share for the reported metrics")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--lr", type=float, default=None, help="fasttext default 0.1 (DCLM); transformer head default 0.01")
@click.option("--dim", type=int, default=100, show_default=True, help="fasttext embedding size")
@click.option("--epoch", type=int, default=None, help="fasttext default 5 (DCLM); transformer head default 300 full-batch steps")
@click.option("--word-ngrams", type=int, default=2, show_default=True)
@click.option("--bucket", type=int, default=2_000_000, show_default=True, help="fasttext hash buckets for n-grams")
@click.option("--quantize/--no-quantize", default=False, show_default=True, help="fasttext: quantize (small .ftz)")
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--encoder", default="all-MiniLM-L6-v2", show_default=True, help="transformer: local folder or hub id")
@click.option("--task", type=click.Choice(["classification", "regression"]), default="classification", show_default=True)
@click.option("--max-length", type=int, default=256, show_default=True)
@click.option("--positive-at", type=float, default=None, help="regression: also report binary metrics of label >= this (FineWeb-Edu: 3)")
@click.option("--fresh", is_flag=True, help="replace a model cuvee trained into --output with another plan")
def train_cmd(data, positive, negative, text_key, negative_text_key, label_key, limit, positive_label, output, kind, valid_fraction, seed,
              lr, dim, epoch, word_ngrams, bucket, quantize, threads, encoder, task, max_length, positive_at, fresh):
    """Train on labelled files or positive/negative sources; print held-out metrics (also saved to <output>.metrics.json)."""
    from cuvee.classifiers.outputs import HEAD_FOLDER, MODEL_FILE, by_path, train_plan
    from cuvee.kernel.owned_file import open_owned_file
    from cuvee.kernel.workdir import open_workdir

    _check_sources(data, positive, negative)
    settings = {"kind": kind, "text_key": text_key, **({"negative_text_key": negative_text_key} if negative_text_key else {}),
                "label_key": label_key, "limit": limit, "valid_fraction": valid_fraction,
                "seed": seed, "lr": lr, "epoch": epoch}
    settings.update({"dim": dim, "word_ngrams": word_ngrams, "bucket": bucket, "quantize": quantize} if kind == "fasttext"
                    else {"encoder": encoder, "task": task, "max_length": max_length})
    plan = train_plan({"data": list(data), "positive": list(positive), "negative": list(negative)}, settings)
    with ExitStack() as held:
        if kind == "fasttext":
            open_owned_file(output, MODEL_FILE, plan, held, fresh=fresh)
        else:
            binding, inputs = by_path(plan)
            open_workdir(output, HEAD_FOLDER, binding, held, fresh=fresh, inputs=inputs)
        _train(data, positive, negative, (text_key, negative_text_key), label_key, limit, positive_label, output, kind, valid_fraction, seed,
               lr, dim, epoch, word_ngrams, bucket, quantize, threads, encoder, task, max_length, positive_at, plan)


def _train(data, positive, negative, text_key, label_key, limit, positive_label, output, kind, valid_fraction, seed,
           lr, dim, epoch, word_ngrams, bucket, quantize, threads, encoder, task, max_length, positive_at, plan):
    text_key, negative_text_key = text_key  # (--text-key, --negative-text-key)
    ex = _examples(data, positive, negative, text_key, label_key, kind == "transformer" and task == "regression", limit,
                   negative_text_key)
    if len(ex) < 4:
        raise click.ClickException(f"only {len(ex)} usable examples (skipped: {ex.skipped})")
    train, valid = ex.split(valid_fraction, seed)
    click.echo(f"examples: {len(train)} train, {len(valid)} held out; skipped: {ex.skipped or 'none'}", err=True)
    if kind == "fasttext":
        from cuvee.classifiers.fasttext_model import (
            FastTextConfig,
            evaluate_fasttext,
            train_fasttext,
        )

        cfg = FastTextConfig(lr=lr or 0.1, dim=dim, epoch=epoch or 5, word_ngrams=word_ngrams, bucket=bucket,
                             threads=threads, seed=seed, quantize=quantize)
        train_fasttext(train, output, cfg, plan=plan)
        metrics = evaluate_fasttext(output, valid, positive_label) if len(valid) else {}
    else:
        from cuvee.classifiers.transformer_model import (
            evaluate_transformer,
            train_transformer,
        )

        train_transformer(train, output, encoder=encoder, task=task, max_length=max_length, epochs=epoch or 300, lr=lr or 1e-2)
        metrics = evaluate_transformer(output, valid, positive_label, positive_at=positive_at) if len(valid) else {}
    report = {"model": str(output), "kind": kind, "train_examples": len(train), "valid_examples": len(valid),
              "skipped": ex.skipped, "valid_metrics": metrics}
    metrics_path = (Path(output) / "metrics.json") if kind == "transformer" else Path(str(output) + ".metrics.json")
    write_json(metrics_path, report)
    click.echo(json.dumps(report, indent=2))


def _check_evaluable(ex, label_key: str, positive_label: str, regression: bool, positive_at: float | None) -> None:
    """Metrics of no rows or of one class are NaN or meaningless: refuse them instead of printing them."""
    skipped = f" (skipped: {', '.join(f'{k} {v}' for k, v in sorted(ex.skipped.items()))})" if ex.skipped else ""
    if not len(ex):
        raise click.ClickException(f"no labelled rows to evaluate{skipped}; labels are read from the "
                                   f"{label_key!r} field (--label-key)")
    if regression:  # classes only through --positive-at
        above = {lab >= positive_at for lab in ex.labels} if positive_at is not None else {True, False}
        if len(above) < 2:
            raise click.ClickException(f"only one class present in {len(ex)} labelled rows (every target is "
                                       f"{'>=' if above.pop() else '<'} --positive-at {positive_at:g}); the binary "
                                       "metrics need both")
        return
    positive = str(positive_label).strip().removeprefix("__label__")
    n_pos = sum(str(lab) == positive for lab in ex.labels)
    if n_pos in (0, len(ex)):
        found = ", ".join(sorted({str(lab) for lab in ex.labels})[:5])
        raise click.ClickException(f"only one class present in {len(ex)} labelled rows (labels: {found}; positive label "
                                   f"{positive!r}: {n_pos} rows); precision, recall and ROC-AUC need both classes")


@classify.command("eval")
@click.option("--model", "-m", required=True, help="fastText model file or transformer head folder")
@_source_options
@click.option("--threshold", type=float, default=0.5, show_default=True)
@click.option("--positive-at", type=float, default=None, help="regression heads: binary metrics of label >= this")
def eval_cmd(model, data, positive, negative, text_key, negative_text_key, label_key, limit, positive_label, threshold, positive_at):
    """Precision, recall, F1 and ROC-AUC of a trained model on labelled data."""
    kind = _kind_of(model)
    regression = kind == "transformer" and json.loads((Path(model) / "head.json").read_text())["task"] == "regression"
    ex = _examples(data, positive, negative, text_key, label_key, regression, limit, negative_text_key)
    _check_evaluable(ex, label_key, positive_label, regression, positive_at)
    if kind == "fasttext":
        from cuvee.classifiers.fasttext_model import evaluate_fasttext

        metrics = evaluate_fasttext(model, ex, positive_label, threshold)
    else:
        from cuvee.classifiers.transformer_model import evaluate_transformer

        metrics = evaluate_transformer(model, ex, positive_label, threshold, positive_at)
    click.echo(json.dumps({"model": model, "kind": kind, "skipped": ex.skipped, "metrics": metrics}, indent=2))


@classify.command("apply")
@click.option("--model", "-m", required=True, help="fastText model file, transformer head folder, or 'demo'")
@click.option("--input", "-i", "inputs", multiple=True, required=True, help="document files, folders or globs")
@click.option("--output", "-o", required=True, help="JSONL(.gz) of kept documents, score in metadata")
@click.option("--name", default="quality", show_default=True, help="metadata key is <name>_score")
@click.option("--positive-label", default="hq", show_default=True)
@click.option("--threshold", type=float, default=None, help="keep documents with score >= threshold")
@click.option("--top-percent", type=float, default=None, help="keep the top p %% over ALL inputs")
@click.option("--batch-size", type=int, default=256, show_default=True)
@click.option("--fresh", is_flag=True, help="replace an output cuvee wrote with another plan (model, inputs, settings)")
def apply_cmd(model, inputs, output, name, positive_label, threshold, top_percent, batch_size, fresh):
    """Score documents and write those kept (threshold, corpus top-p %, or all) with the score in metadata.

    The output is cuvee's own file (``<output>.json`` records its plan): a file cuvee did not write is never
    replaced, nor one written with another plan unless --fresh; it is written under a temporary name, then renamed."""
    from cuvee.classifiers.outputs import APPLY_FILE, apply_plan
    from cuvee.classifiers.quality_stages import resolve_model_path
    from cuvee.kernel.owned_file import open_owned_file
    from cuvee.pipeline.io import expand_paths

    if threshold is not None and top_percent is not None:
        raise click.UsageError("give --threshold or --top-percent, not both")
    model = resolve_model_path(model)
    files = expand_paths(list(inputs))
    if any(os.path.realpath(f) == os.path.realpath(output) for f in files):
        raise click.ClickException(f"--output {output} is one of the input files; choose another --output")
    plan = apply_plan(model, files, {"name": name, "positive_label": positive_label, "threshold": threshold,
                                     "top_percent": top_percent})
    with ExitStack() as held:
        open_owned_file(output, APPLY_FILE, plan, held, fresh=fresh)
        _apply(model, files, Path(output), name, positive_label, threshold, top_percent, batch_size, plan)


def _json_line(doc, metadata: dict) -> str:
    try:
        return json.dumps({"text": doc.text, "id": doc.id, "metadata": metadata}, ensure_ascii=False) + "\n"
    except (TypeError, ValueError) as e:  # a Parquet binary or timestamp column, say
        raise click.ClickException(f"document {doc.id!r}: its metadata cannot be written as JSON ({e}); "
                                   "nothing was written") from None


def _apply(model, files, output: Path, name, positive_label, threshold, top_percent, batch_size, plan):
    from cuvee.classifiers.outputs import replacing_text
    from cuvee.classifiers.scoring import corpus_cutoff, score_key
    from cuvee.kernel.owned_file import marker as marker_of
    from cuvee.pipeline.io import iter_documents

    if _kind_of(model) == "fasttext":
        from cuvee.classifiers.fasttext_model import FastTextScorer

        scorer = FastTextScorer(model, positive_label)
    else:
        from cuvee.classifiers.transformer_model import TransformerScorer

        scorer = TransformerScorer(model, positive_label)
    key = score_key(name)
    docs, scores, batch = [], [], []
    for doc in iter_documents(files):
        batch.append(doc)
        if len(batch) >= batch_size:
            scores.extend(scorer.score_batch([d.text for d in batch]))
            docs.extend(batch)
            batch = []
    if batch:
        scores.extend(scorer.score_batch([d.text for d in batch]))
        docs.extend(batch)
    arr = np.asarray(scores, dtype=np.float64)
    cutoff = corpus_cutoff(arr, top_percent) if top_percent is not None else threshold
    kept = 0
    marker = marker_of(output)  # cuvee's: says which plan wrote the output, and whether it is whole
    with replacing_text(output) as f:
        for doc, s in zip(docs, arr):
            if cutoff is not None and s < cutoff:
                continue
            kept += 1
            f.write(_json_line(doc, {**doc.metadata, key: float(s)}))
        write_json(marker, {"kind": "classify-apply", "complete": False, "plan": plan})  # the rename comes next
    summary = {"documents": len(docs), "kept": kept, "dropped": len(docs) - kept, "cutoff": cutoff,
               "score_mean": float(arr.mean()) if len(arr) else None, "output": str(output)}
    write_json(marker, {"kind": "classify-apply", "complete": True, "plan": plan, "summary": summary})
    click.echo(json.dumps(summary, indent=2))
    if not docs:
        click.echo("warning: no documents read", err=True)
        sys.exit(1)


@classify.command("annotate")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "-o", required=True, help="annotations JSONL (appended to; rerun to resume)")
@click.option("--model", "-m", required=True, help="local HF causal LM folder / name, or the served model name with --endpoint")
@click.option("--endpoint", default=None, help="OpenAI-compatible base URL, e.g. http://host:8000/v1 (vLLM)")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True)
@click.option("--api-key-env", default=None, help="environment variable holding the endpoint's API key")
@click.option("--prompt", default="fineweb_edu", show_default=True, help="shipped template name or a template file with {text}")
@click.option("--n", "n", type=int, default=500, show_default=True, help="documents to sample")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-chars", type=int, default=2000, show_default=True, help="characters of each document put in the prompt")
@click.option("--max-new-tokens", type=int, default=256, show_default=True)
@click.option("--concurrency", type=int, default=8, show_default=True, help="requests in flight (endpoint only)")
@click.option("--limit", type=int, default=None, help="annotate at most this many new documents in this run")
@click.option("--retries", type=int, default=5, show_default=True, help="per request, on 429/5xx/timeouts (exponential backoff)")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="seconds per request, in all (connect, wait and the whole answer)")
@click.option("--max-response-bytes", type=int, default=8 << 20, show_default=True,
              help="larger answers are refused and counted under failed")
@click.option("--tokenizer", default=None, help="count tokens with this tokenizer when the endpoint sends no usage")
@click.option("--price-per-mtok", nargs=2, type=float, default=None, help="IN OUT prices per million tokens, for the cost estimate")
@click.option("--store-text/--no-store-text", default=True, show_default=True, help="keep the text (needed by classify train)")
@click.option("--device", default="auto", show_default=True, help="local model: auto, cpu or cuda")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option("--fresh", is_flag=True, help="start over an annotations file cuvee wrote with another plan (inputs, model, prompt, settings)")
def annotate_cmd(inputs, out, model, endpoint, api, api_key_env, prompt, n, seed, max_chars, max_new_tokens, concurrency,
                 limit, retries, timeout, max_response_bytes, tokenizer, price_per_mtok, store_text, device, progress, fresh):
    """Score a seeded sample of documents with an LLM (FineWeb-Edu prompt by default) into an annotations JSONL.

    The file is cuvee's own and bound to its plan (``<out>.json``: the input files, model, prompt and settings;
    a larger --n extends it): a rerun with another plan is refused untouched unless --fresh."""
    from cuvee.classifiers.annotate import annotate
    from cuvee.llm.endpoint import HttpLM, api_key_from_env
    from cuvee.llm.local import LocalLM
    from cuvee.llm.prompt import load_prompt

    template = load_prompt(prompt)
    if endpoint:
        backend = HttpLM(endpoint, model, api=api, api_key=api_key_from_env(api_key_env),
                         max_new_tokens=max_new_tokens, timeout=timeout,
                         retries=retries, concurrency=concurrency, tokenizer=tokenizer,
                         max_bytes=max_response_bytes)
    else:
        backend = LocalLM(model, max_new_tokens=max_new_tokens, device=device)
    summary = annotate(inputs, out, backend, template, n=n, seed=seed, max_chars=max_chars, limit=limit,
                       store_text=store_text, price_per_mtok=tuple(price_per_mtok) if price_per_mtok else None,
                       progress=progress, fresh=fresh)
    click.echo(json.dumps(summary, indent=2))


main = classify

if __name__ == "__main__":  # `python -m cuvee.classifiers.cli ARGS` is `cuvee classify ARGS`, its one-line errors too
    from cuvee.cli import main as cuvee_main

    cuvee_main(["classify", *sys.argv[1:]], prog_name="cuvee")
