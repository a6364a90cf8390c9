"""``cuvee train CONFIG`` and ``cuvee anneal`` (wired into cuvee/cli.py as lazy subcommands)."""

from __future__ import annotations

import json
import os
import traceback
from contextlib import contextmanager
from pathlib import Path

import click

from cuvee.kernel.errors import UserError, one_line
from cuvee.yaml_safe import YamlLoadError, load_yaml

# the kernel's user errors, and the ValueErrors and OSErrors train raises for a config or file it cannot use
_USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, OSError)


@contextmanager
def _user_errors(verbose: bool = False):
    """Every failure is one line on stderr and exit status 1; ``-v`` prints the traceback first.

    Refusals (bad config, missing data, folder in use, divergence) are answers for the user; anything else
    is reported the same way, named as unexpected, so that no command ends in a bare traceback."""
    try:
        yield
        return
    except click.ClickException:
        raise
    except Exception as e:  # noqa: BLE001 - the one place a command's failure becomes its one line
        if verbose:
            traceback.print_exc()
        text = one_line(str(e)) or type(e).__name__
        if not isinstance(e, _USER_ERRORS):
            text = f"unexpected {type(e).__name__}: {text} (rerun with -v for the traceback)"
    raise click.ClickException(text[:2000])  # outside the handler: the traceback is printed once, with -v only


def _parse_overrides(pairs: tuple[str, ...]) -> dict:
    from cuvee.train.config import ConfigError

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected key=value (e.g. steps=50, optim.lr=1e-3)")
        key, value = pair.split("=", 1)
        try:
            out[key] = load_yaml(value, f"--set {key}")
        except YamlLoadError as e:
            raise ConfigError(" ".join(str(e).split())) from None
    return out


# what --demo-data builds (cuvee/train/demo_data.py): a missing one of these names the flag that makes it
_DEMO_PARTS = ("default", "candidate", "control", "heldout_clean", "heldout_shuffled")


def _demo_data_ready(root: Path) -> bool:
    return all((root / part / "manifest.json").is_file() for part in _DEMO_PARTS)


def _build_demo_data(root: Path) -> None:
    """The byte-level demo shards, built once into a folder cuvee owns (kind "mix"), under its lock."""
    from cuvee.kernel.workdir import Workdir, owned
    from cuvee.train.demo_data import build_demo_data

    with owned(root, Workdir("mix", "demo data folder"), {"command": "train --demo-data"}):
        if not _demo_data_ready(root):
            build_demo_data(root)


def _shard_path_exists(p: str) -> bool:
    path = Path(p)
    return path.exists() or Path(f"{p}.idx").exists() or path.with_suffix(".idx").exists()


def _check_data_paths(cfg, config: str) -> None:
    """A missing data or eval path is one line naming it and the command that creates it, before any work."""
    wanted = [("data.paths", p) for p in cfg.data.paths] + [(f"eval_paths.{k}", p) for k, p in cfg.eval_paths.items()]
    for key, p in wanted:
        if _shard_path_exists(p):
            continue
        path = Path(p)
        if path.name in _DEMO_PARTS:
            how = (f"build the bundled demo shards first: cuvee train {config} --demo-data {path.parent}")
        elif path.parts[-2:] == ("demo", "mix"):
            how = f"run `cuvee demo` first (it writes {path}), then: cuvee train {config}"
        else:
            how = ("point it at a `cuvee mix` output folder (--set 'data.paths=[DIR]'), or try the bundled demo "
                   "data: cuvee train configs/train/tiny.yaml --demo-data runs/train_demo_data")
        raise click.ClickException(f"{config}: {key} {p} does not exist; {how}")


# one word for one meaning on every command: --fresh starts a folder over (--no-resume: its older name here)
_FRESH = click.option("--fresh", is_flag=True,
                      help="start over: empty the output folder (only one cuvee created) instead of resuming")
_NO_RESUME = click.option("--no-resume", is_flag=True, hidden=True, help="older name of --fresh")


@click.command("train")
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, help="override a config key: --set steps=50 --set optim.lr=1e-3")
@_FRESH
@_NO_RESUME
@click.option("--demo-data", type=click.Path(), default=None,
              help="first build the byte-level demo shards (data/curated) into this directory if missing")
@click.option("--stop-after", type=int, default=None, help="stop (with a checkpoint) after this many steps in total")
@click.option("--export-hf", type=click.Path(), default=None, help="after training, export the model to this HF dir")
@click.option("--json", "as_json", is_flag=True, help="print the run's summary as JSON instead of the closing lines")
@click.option("-v", "--verbose", is_flag=True, help="print the traceback of an error before its one-line message")
def train(config, overrides, fresh, no_resume, demo_data, stop_after, export_hf, as_json, verbose):
    """Train a Llama-style model per CONFIG (configs/train/*.yaml); resumes from its checkpoints."""
    with _user_errors(verbose):
        from cuvee.train.config import load_train_config

        cfg = load_train_config(config, _parse_overrides(overrides))  # the config first: a typo costs nothing
        from cuvee.train.trainer import train as run_train  # torch: seconds to import
        if demo_data and not _demo_data_ready(Path(demo_data)):
            _build_demo_data(Path(demo_data))
        _check_data_paths(cfg, config)
        result = run_train(cfg, resume=not (fresh or no_resume), stop_after=stop_after)
        exported = None
        if export_hf and os.environ.get("RANK", "0") == "0":
            from cuvee.train.checkpoint import latest_checkpoint
            from cuvee.train.hf_export import export_checkpoint

            # a rerun with nothing left to train (the first one killed while exporting) still exports
            last = result["checkpoint"] or latest_checkpoint(result["out_dir"])
            if last:
                exported = export_checkpoint(last, export_hf)
                click.echo(f"exported Hugging Face Llama to {exported}")
    if os.environ.get("RANK", "0") != "0":
        return  # torchrun: rank 0 reports
    summary = {k: v for k, v in result.items() if k not in ("losses",)}
    summary["final_loss"] = result["losses"][max(result["losses"])] if result["losses"] else None
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    for line in closing_lines(result, cfg.steps, exported):
        click.echo(line)


def closing_lines(result: dict, steps: int, exported=None) -> list[str]:
    """A line of what the run did, then what the folder holds and the next command (the whole summary is
    ``--json``; every logged step is in log.jsonl)."""
    from cuvee.train.checkpoint import latest_checkpoint

    out, losses = result["out_dir"], result["losses"]
    size = f"{result['params'] / 1e6:.2f}M parameters, step {result['step']} of {steps}, {result['tokens']:,} tokens"
    if losses:
        first, last = min(losses), max(losses)
        did = f"trained {out}: {size}; loss {losses[first]:.4f} (step {first}) -> {losses[last]:.4f} (step {last})"
    else:
        did = f"{out}: nothing left to train ({size})"
    if result.get("skipped_steps"):
        did += f"; {result['skipped_steps']} non-finite step(s) skipped"
    ckpt = result.get("checkpoint") or latest_checkpoint(out)
    holds = ", ".join(([f"checkpoints/{Path(ckpt).name}"] if ckpt else []) + ["log.jsonl", "config.json"])
    if result["step"] < steps:
        nxt = "rerun the same command (without --stop-after) to resume from the last checkpoint"
    elif exported:
        nxt = f"cuvee eval-downstream {exported} --task TASK   (the exported model's accuracy)"
    else:
        nxt = f"cuvee anneal --checkpoint {out} --candidate MIX --control MIX   (compare two mixes from this model)"
    return [did, f"{'wrote' if losses else 'holds'} {out}/: {holds}; next: {nxt}"]


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
@_FRESH
@_NO_RESUME
@click.option("-v", "--verbose", is_flag=True, help="print the traceback of an error before its one-line message")
def anneal(config, checkpoint, candidate, control, tokens, evals, seeds, average_last, out_dir, overrides, fresh,
           no_resume, verbose):
    """Anneal CHECKPOINT on a candidate and a control mix (LR linearly to 0); compare held-out loss/bpb."""
    with _user_errors(verbose):
        from cuvee.train.config import (
            ConfigError,
            apply_overrides,
            build_config,
            read_config_yaml,
        )

        where = config or "anneal options"
        raw = read_config_yaml(config) if config else {}  # a bad file is one line before torch loads (seconds)
        from cuvee.train.anneal import AnnealConfig, run_anneal
        if any("=" not in e for e in evals):
            raise ConfigError(f"--eval {next(e for e in evals if '=' not in e)!r}: expected NAME=PATH")
        try:
            seed_list = [int(s) for s in seeds.split(",")] if seeds else None
        except ValueError:
            raise ConfigError(f"--seeds {seeds!r}: expected comma-separated integers, e.g. 0,1,2") from None
        cli = {"checkpoint": checkpoint, "candidate": list(candidate) or None, "control": list(control) or None,
               "tokens": tokens, "average_last": average_last, "out_dir": out_dir, "seeds": seed_list,
               "eval": dict(e.split("=", 1) for e in evals) or None}
        raw.update({k: v for k, v in cli.items() if v is not None})
        apply_overrides(raw, _parse_overrides(overrides), where)
        ac = build_config(AnnealConfig, raw, where)
        report = run_anneal(ac, fresh=fresh or no_resume)
    out = ac.resolved_out_dir()
    click.echo(f"wrote {out}/: report.md (the verdicts above), report.json, runs/ (each arm and seed); "
               f"next: read {out / 'report.md'}")
    return report


@click.command("eval-downstream")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--task", "tasks", multiple=True, required=True,
              help="shipped task name (e.g. cuvee_wcxb_cloze, hellaswag_local) or a task YAML path (repeatable)")
@click.option("--limit", type=int, default=None, help="evaluate only the first N items of each task")
@click.option("--batch-size", default="8", help="lm-eval batch size (an int, or 'auto')")
@click.option("--device", default="cpu")
@click.option("--allow-task-code", is_flag=True,
              help="run Python that a task YAML references (lm-eval !function); without it such tasks are refused. "
                   "The shipped tasks need no flag")
@click.option("-v", "--verbose", is_flag=True, help="print the traceback of an error before its one-line message")
def eval_downstream(model_dir, tasks, limit, batch_size, device, allow_task_code, verbose):
    """Multiple-choice accuracy (acc, acc_norm +- stderr) of an exported HF model via lm-eval, offline.

    Nothing from MODEL_DIR or a task file is executed: a model folder with auto_map (custom code) is refused,
    and a task YAML with !function (Python next to it) is refused unless --allow-task-code is given, in which
    case each such file is named on stderr. Results go to stdout only; this command writes no files."""
    with _user_errors(verbose):
        from cuvee.train.lm_eval_backend import evaluate_hf

        res = evaluate_hf(model_dir, list(tasks), limit=limit, device=device, allow_task_code=allow_task_code,
                          batch_size=int(batch_size) if batch_size.isdigit() else batch_size)
    click.echo(json.dumps(res, indent=2))
