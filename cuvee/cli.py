"""The `cuvee` command line. Subcommands live next to their code and are imported only when used,
so `cuvee --help` and recipe validation stay fast."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import click

from cuvee.kernel.errors import UserError, one_line

DEBUG_ENV = "CUVEE_DEBUG"  # set to 1: unexpected errors show their traceback (as -v / --verbose does)

# name -> (module:attribute, one-line help)
LAZY_COMMANDS = {
    "mix": ("cuvee.mixer.cli:mix", "Tokenize a mix-weight config into weighted Megatron shards; "
            "`mix search` chooses the weights by experiment."),
    "tokenizer": ("cuvee.mixer.cli:tokenizer", "Train or extend tokenizers; compression reports."),
    "classify": ("cuvee.classifiers.cli:classify", "Train, evaluate and apply quality / topic classifiers."),
    "train": ("cuvee.train.cli:train", "Train a small Llama-style model on mixer shards."),
    "anneal": ("cuvee.train.cli:anneal", "Annealing ablation: candidate vs control mix from a checkpoint."),
    "eval-downstream": ("cuvee.train.cli:eval_downstream",
                        "Multiple-choice accuracy of an exported HF model via lm-evaluation-harness, offline."),
    "dedup": ("cuvee.dedup.cli:dedup_cli", "Run one dedup stage on files; S-curve of MinHash settings."),
    "card": ("cuvee.card.cli:card", "Write a Hugging Face dataset card (Markdown + HTML + plots) for a run."),
    "rephrase": ("cuvee.rephrase.cli:rephrase_cmd", "Rewrite a run's documents with an LLM into a new mix source."),
    "trace": ("cuvee.trace.cli:trace", "Trace a mix token, a training row or a run's document back to its page."),
}


def _wants_traceback(args: list[str]) -> bool:
    words = args[: args.index("--")] if "--" in args else args
    return bool(os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")) or "-v" in words or "--verbose" in words


def _fail(message: str, code: int) -> None:
    sys.stdout.flush()
    click.echo(f"Error: {one_line(message) or 'failed'}", err=True)
    sys.exit(code)


class LazyGroup(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Every error ends as ONE line on stderr and a non-zero exit: click's own errors (usage, bad values,
        refusals raised as ClickException) keep their exit status; anything else is exit 1 with a hint, and
        its traceback only with -v / --verbose or CUVEE_DEBUG=1."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        args = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt):
            _fail("aborted", 130)
        except click.UsageError as e:
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            _fail(e.format_message() + hint, e.exit_code)
        except click.ClickException as e:
            if _wants_traceback(args) and (e.__cause__ or e.__context__):
                import traceback

                traceback.print_exception(e.__cause__ or e.__context__, file=sys.stderr)
            _fail(e.format_message(), e.exit_code)
        except UserError as e:
            if _wants_traceback(args):
                import traceback

                traceback.print_exc()
            _fail(str(e), e.exit_code)
        except BrokenPipeError:
            sys.exit(141)  # `cuvee stages | head`: not an error worth a line
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001 - the one place every unexpected error becomes one line
            if _wants_traceback(args):
                import traceback

                traceback.print_exc()
            what = one_line(str(e)) or "no message"
            if isinstance(e, OSError):  # a missing or unreadable file the user named: their error, not ours
                _fail(f"{what} (-v shows the traceback)", 1)
            _fail(f"{type(e).__name__}: {what} (unexpected; rerun with -v or {DEBUG_ENV}=1 for the traceback)", 1)
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def resolve_command(self, ctx, args):
        """A misspelt command gets the house's "did you mean", among the lazy commands too (click's own
        suggestion knows only the commands it has loaded, so `cuvee mixx` got none)."""
        name = click.utils.make_str(args[0]) if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            from cuvee.kernel.config import did_you_mean

            raise click.UsageError(f"No such command {name!r}{did_you_mean(name, self.list_commands(ctx))}", ctx)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx, name):
        if name in LAZY_COMMANDS:
            target, _ = LAZY_COMMANDS[name]
            mod, attr = target.split(":")
            return getattr(importlib.import_module(mod), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                rows.append((name, cmd.get_short_help_str(70)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cuvee")
@click.option("-v", "--verbose", "debug", is_flag=True, expose_value=False,
              help=f"Show the traceback of an unexpected error (as {DEBUG_ENV}=1 does).")
def main():
    """cuvee: Common Crawl -> filtered, deduplicated, weighted, tokenized training mix -> ablation runs.

    Every error is one line on stderr and a non-zero exit; `cuvee -v COMMAND ...` (or CUVEE_DEBUG=1)
    adds the traceback of an unexpected one."""


def _invalid(recipe, error) -> str:
    """A recipe error, naming the recipe file when the message does not already (e.g. a missing input path)."""
    text = str(error)
    return f"invalid recipe: {text}" if str(recipe) in text else f"invalid recipe {recipe}: {text}"


def _overrides(run_dir, tasks, workers, limit, output) -> dict:
    o = {}
    if run_dir:
        o["run_dir"] = run_dir
    if tasks:
        o["executor.tasks"] = tasks
    if workers:
        o["executor.workers"] = workers
    if limit is not None:
        o["input.limit"] = limit
    if output:
        o["output.path"] = output
    return o


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--run-dir", help="Where stats, logs and (by default) output go. Default: runs/<recipe name>.")
@click.option("--tasks", type=int, help="Override executor.tasks.")
@click.option("--workers", type=int, help="Override executor.workers (local) / array concurrency (slurm).")
@click.option("--limit", type=int, help="Read at most N records per task (quick looks).")
@click.option("--output", help="Override output.path.")
@click.option("--fresh", is_flag=True, help="Empty the run folder first instead of resuming (only a folder cuvee created).")
@click.option("--no-wait", is_flag=True, help="SLURM: submit and return without waiting.")
@click.option("-v", "--verbose", is_flag=True, help="Show datatrove's logs on the console (they always go to the run folder).")
def run(recipe, run_dir, tasks, workers, limit, output, fresh, no_wait, verbose):
    """Run RECIPE (YAML). Reruns resume: finished tasks are skipped.

    A run folder is bound to its plan (resolved recipe, task count, input files): a rerun with a
    different plan stops before any work and says what differs. One run at a time per folder.
    """
    from cuvee.pipeline.recipe import RecipeError
    from cuvee.pipeline.runner import run_recipe
    from cuvee.pipeline.stats import summary_table

    try:
        stats = run_recipe(recipe, _overrides(run_dir, tasks, workers, limit, output), progress=True,
                           fresh=fresh, wait=not no_wait, verbose=verbose)
    except RecipeError as e:
        raise click.ClickException(_invalid(recipe, e)) from None
    if "submitted" in stats:
        click.echo(f"submitted jobs {', '.join(stats['submitted'])}; merge stats later with "
                   f"`cuvee stats {stats['run_dir']}`")
        return
    click.echo(summary_table(stats))
    folder = stats["recipe"]["run_dir"] or f"runs/{stats['recipe_name']}"
    click.echo(f"wrote {stats['output']['path']} (the documents) and {folder}/stats.json; "
               f"next: cuvee card {folder}   (its dataset card)")


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
def validate(recipe):
    """Validate RECIPE without running anything."""
    from cuvee.pipeline.compiler import check_inputs, compile_recipe
    from cuvee.pipeline.recipe import RecipeError, load_recipe

    try:
        r = load_recipe(recipe)
        check_inputs(r)
        jobs = compile_recipe(r)
    except RecipeError as e:
        raise click.ClickException(_invalid(recipe, e)) from None
    click.echo(f"{recipe}: OK ({len(r.stage_entries)} stages, {len(jobs)} jobs: {', '.join(j.name for j in jobs)})")
    if r.input.common_crawl is not None:
        from cuvee.pipeline.plan import snapshot_sample

        click.echo(f"input: {snapshot_sample(r).describe(r.input.common_crawl)}")
    _report_run_folder(r)


def _report_run_folder(recipe) -> None:
    """Say up front whether `cuvee run` would start, resume, or refuse this recipe's run folder."""
    from cuvee.kernel.workdir import MARKER, PLAN, bind_check, owner
    from cuvee.pipeline.plan import build_plan, split_stamps

    run_dir = recipe.resolved_run_dir()
    if not run_dir.exists() or not any(run_dir.iterdir()):
        click.echo(f"run folder {run_dir}: new")
        return
    if owner(run_dir) is None:
        raise click.ClickException(f"run folder {run_dir} holds files that cuvee did not create (no {MARKER}); "
                                   f"`cuvee run` would refuse it: choose another --run-dir")
    if not (run_dir / PLAN).exists():
        click.echo(f"run folder {run_dir}: cuvee folder without a plan; `cuvee run` will start it")
        return
    plan, stamped = split_stamps(build_plan(recipe))
    bind_check(run_dir, plan, what="run folder", inputs=stamped)
    click.echo(f"run folder {run_dir}: same plan, `cuvee run` resumes it")


def _recipe_of_run_folder(folder: Path):
    """The recipe a run folder was run with (``recipe.resolved.json``, overrides included), pointed at
    ``folder`` if the folder was moved or named by another path."""
    from cuvee.pipeline.recipe import RecipeError, parse_recipe

    resolved = folder / "recipe.resolved.json"
    if not resolved.is_file():
        raise click.ClickException(f"{folder} is not a cuvee run folder (no {resolved.name}); "
                                   f"give the run folder `cuvee run` wrote, or a recipe file")
    try:
        data = json.loads(resolved.read_text())
    except (OSError, ValueError) as e:
        raise click.ClickException(f"{resolved}: unreadable ({e})") from None
    try:
        recipe = parse_recipe(data, str(resolved))
    except RecipeError as e:
        raise click.ClickException(f"invalid recipe {resolved}: {e}") from None
    same = recipe.resolved_run_dir().resolve() == folder.resolve()
    return recipe, None if same else {"run_dir": str(folder)}


@main.command()
@click.argument("target", metavar="RUN_DIR|RECIPE", type=click.Path())
@click.option("--run-dir", help="With a RECIPE: its run folder, if not the recipe's.")
def stats(target, run_dir):
    """Re-merge the stats of a (possibly SLURM or partial) run and print the funnel.

    RUN_DIR is the folder `cuvee run` wrote (as for `cuvee card`); a RECIPE file (with --run-dir if the run
    used one) is still accepted. Writes RUN_DIR/stats.json."""
    from cuvee.pipeline.recipe import RecipeError
    from cuvee.pipeline.runner import restat
    from cuvee.pipeline.stats import summary_table

    path = Path(target)
    if path.is_dir():
        if run_dir:
            raise click.UsageError("--run-dir goes with a RECIPE; RUN_DIR is already the run folder")
        recipe, overrides = _recipe_of_run_folder(path)
    else:
        recipe, overrides = target, ({"run_dir": run_dir} if run_dir else None)
    try:
        s = restat(recipe, overrides)
    except RecipeError as e:
        raise click.ClickException(_invalid(target, e)) from None
    click.echo(summary_table(s))
    if not s["complete"]:
        click.echo("(partial run: some tasks have not finished)")


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON schema per stage).")
def stages(name, as_json):
    """List every stage a recipe can use with each parameter's type, default and description.

    With NAME, show that stage only, with its full description."""
    from cuvee.pipeline.registry import all_stages, describe_params

    specs = all_stages()
    if name is not None:
        if name not in specs:
            from cuvee.pipeline.recipe import unknown_stage

            raise click.ClickException(unknown_stage(name))
        specs = {name: specs[name]}
    if as_json:
        click.echo(json.dumps({n: s.params.model_json_schema() for n, s in specs.items()}, indent=2))
        return
    for stage_name, spec in specs.items():
        doc = (spec.doc or "").strip()
        summary = " ".join(doc.split("\n\n")[0].split())  # the first paragraph: a wrapped sentence is not cut
        click.echo(f"{stage_name}: {doc if name else summary}")
        rows = describe_params(spec.params)
        if not rows:
            click.echo("    (no parameters)")
        width = max((len(r["name"]) for r in rows), default=0)
        for r in rows:
            default = "required" if r["required"] else f"default {r['default']}"
            desc = f"  {r['description']}" if r["description"] else ""
            click.echo(f"    {r['name']:<{width}}  {r['type']}, {default}{desc}")
        click.echo("")


@main.command()
@click.option("--run-dir", default="runs/demo", show_default=True)
@click.option("--skip-mix", is_flag=True, help="Only the pipeline and the card.")
@click.option("--fresh", is_flag=True, help="Start over in the run and mix folders (cuvee's own) instead of resuming.")
def demo(run_dir, skip_mix, fresh):
    """End-to-end demo on the bundled Common Crawl sample: pipeline -> mix -> dataset card (a rerun resumes)."""
    from cuvee.demo import run_demo

    run_demo(run_dir, skip_mix=skip_mix, fresh=fresh)


if __name__ == "__main__":
    main()
