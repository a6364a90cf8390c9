"""``cuvee train CONFIG`` and ``cuvee anneal`` (wired into cuvee/cli.py as lazy subcommands)."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import click
import yaml


@contextmanager
def _user_errors():
    """Folder and checkpoint refusals are answers for the user, not bugs: one line, no traceback."""
    from cuvee.folders import FolderError
    from cuvee.train.checkpoint import CheckpointError

    try:
        yield
    except (FolderError, CheckpointError) as e:
        raise click.ClickException(" ".join(str(e).split())) from None


def _parse_overrides(pairs: tuple[str, ...]) -> dict:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r}: expected key=value (e.g. steps=50, optim.lr=1e-3)")
        key, value = pair.split("=", 1)
        out[key] = yaml.safe_load(value)
    return out


@click.command("train")
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, help="override a config key: --set steps=50 --set optim.lr=1e-3")
@click.option("--no-resume", is_flag=True,
              help="start over: empty the output directory (only if cuvee created it) instead of resuming")
@click.option("--demo-data", type=click.Path(), default=None,
              help="first build the byte-level demo shards (data/curated) into this directory if missing")
@click.option("--stop-after", type=int, default=None, help="stop (with a checkpoint) after this many steps in total")
@click.option("--export-hf", type=click.Path(), default=None, help="after training, export the model to this HF dir")
def train(config, overrides, no_resume, demo_data, stop_after, export_hf):
    """Train a Llama-style model per CONFIG (configs/train/*.yaml); resumes from its checkpoints."""
    from cuvee.train.config import load_train_config
    from cuvee.train.trainer import train as run_train

    if demo_data and not (Path(demo_data) / "default" / "manifest.json").exists():
        from cuvee.train.demo_data import build_demo_data

        build_demo_data(demo_data)
    cfg = load_train_config(config, _parse_overrides(overrides))
    with _user_errors():
        result = run_train(cfg, resume=not no_resume, stop_after=stop_after)
        if export_hf and result["checkpoint"] and os.environ.get("RANK", "0") == "0":
            from cuvee.train.hf_export import export_checkpoint

            click.echo(f"exported Hugging Face Llama to {export_checkpoint(result['checkpoint'], export_hf)}")
    if os.environ.get("RANK", "0") != "0":
        return  # torchrun: rank 0 reports
    summary = {k: v for k, v in result.items() if k not in ("losses",)}
    summary["final_loss"] = result["losses"][max(result["losses"])] if result["losses"] else None
    click.echo(json.dumps(summary, indent=2, default=str))


@click.command("anneal")
@click.argument("config", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("--checkpoint", help="checkpoint .pt or training run dir to branch from")
@click.option("--candidate", multiple=True, help="candidate mix: mixes/*.yaml or mixer output dir (repeatable)")
@click.option("--control", multiple=True, help="control mix: mixes/*.yaml or mixer output dir (repeatable)")
@click.option("--tokens", type=int, help="anneal token budget per run")
@click.option("--eval", "evals", multiple=True, help="held-out eval set NAME=PATH (repeatable)")
@click.option("--seeds", help="comma-separated data-order seeds, e.g. 0,1,2")
@click.option("--average-last", type=int, help="average the last k checkpoints")
@click.option("--out", "out_dir", help="output directory (report.md, report.json, runs/)")
@click.option("--set", "overrides", multiple=True, help="override any anneal config key: --set micro_batch=4")
@click.option("--no-resume", is_flag=True,
              help="start over: empty the output directory (only if cuvee created it) instead of resuming its runs")
def anneal(config, checkpoint, candidate, control, tokens, evals, seeds, average_last, out_dir, overrides, no_resume):
    """Anneal CHECKPOINT on a candidate and a control mix (LR linearly to 0); compare held-out loss/bpb."""
    from cuvee.train.anneal import AnnealConfig, run_anneal

    from cuvee.yaml_safe import load_yaml

    raw = load_yaml(Path(config).read_text(), str(config)) if config else {}
    cli = {"checkpoint": checkpoint, "candidate": list(candidate) or None, "control": list(control) or None,
           "tokens": tokens, "average_last": average_last, "out_dir": out_dir,
           "seeds": [int(s) for s in seeds.split(",")] if seeds else None,
           "eval": dict(e.split("=", 1) for e in evals) or None}
    raw.update({k: v for k, v in cli.items() if v is not None})
    raw.update(_parse_overrides(overrides))
    with _user_errors():
        report = run_anneal(AnnealConfig(**raw), fresh=no_resume)
    click.echo(f"report: {AnnealConfig(**raw).resolved_out_dir() / 'report.md'}")
    return report


@click.command("eval-downstream")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--task", "tasks", multiple=True, required=True,
              help="shipped task name (e.g. cuvee_wcxb_cloze, hellaswag_local) or a task YAML path (repeatable)")
@click.option("--limit", type=int, default=None, help="evaluate only the first N items of each task")
@click.option("--batch-size", default="8", help="lm-eval batch size (an int, or 'auto')")
@click.option("--device", default="cpu")
def eval_downstream(model_dir, tasks, limit, batch_size, device):
    """Multiple-choice accuracy (acc, acc_norm +- stderr) of an exported HF model via lm-eval, offline."""
    from cuvee.train.lm_eval_backend import EvalTaskError, evaluate_hf

    try:
        res = evaluate_hf(model_dir, list(tasks), limit=limit, device=device,
                          batch_size=int(batch_size) if batch_size.isdigit() else batch_size)
    except EvalTaskError as e:
        raise click.ClickException(str(e)) from None
    click.echo(json.dumps(res, indent=2))
