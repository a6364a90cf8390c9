"""The `cuvee` command line. Subcommands live next to their code and are imported only when used,
so `cuvee --help` and recipe validation stay fast."""

from __future__ import annotations

import importlib
import json
import sys

import click

# name -> (module:attribute, one-line help)
LAZY_COMMANDS = {
    "mix": ("cuvee.mixer.cli:mix", "Tokenize a mix-weight config into weighted Megatron shards."),
    "tokenizer": ("cuvee.mixer.cli:tokenizer", "Train or extend tokenizers; compression reports."),
    "classify": ("cuvee.classifiers.cli:classify", "Train, evaluate and apply quality / topic classifiers."),
    "train": ("cuvee.train.cli:train", "Train a small Llama-style model on mixer shards."),
    "anneal": ("cuvee.train.cli:anneal", "Annealing ablation: candidate vs control mix from a checkpoint."),
    "eval-downstream": ("cuvee.train.cli:eval_downstream",
                        "Multiple-choice accuracy of an exported HF model via lm-evaluation-harness, offline."),
    "dedup": ("cuvee.dedup.cli:dedup_cli", "Run one dedup stage on files; S-curve of MinHash settings."),
    "card": ("cuvee.card.cli:card", "Write a Hugging Face dataset card (Markdown + HTML + plots) for a run."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

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
def main():
    """cuvee: Common Crawl -> filtered, deduplicated, weighted, tokenized training mix -> ablation runs."""


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
    from cuvee.folders import FolderError
    from cuvee.pipeline.recipe import RecipeError
    from cuvee.pipeline.runner import run_recipe
    from cuvee.pipeline.stats import AccountingError, summary_table

    try:
        stats = run_recipe(recipe, _overrides(run_dir, tasks, workers, limit, output), progress=True,
                           fresh=fresh, wait=not no_wait, verbose=verbose)
    except RecipeError as e:
        raise click.ClickException(f"invalid recipe:\n{e}")
    except (AccountingError, FolderError) as e:
        raise click.ClickException(str(e))
    if "submitted" in stats:
        click.echo(f"submitted jobs {', '.join(stats['submitted'])}; merge stats later with `cuvee stats {recipe}`")
        return
    click.echo(summary_table(stats))
    click.echo(f"output: {stats['output']['path']}   stats: {stats['recipe']['run_dir'] or 'runs/' + stats['recipe_name']}/stats.json")


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
        raise click.ClickException(f"invalid recipe:\n{e}")
    click.echo(f"{recipe}: OK ({len(r.stage_entries)} stages, {len(jobs)} jobs: {', '.join(j.name for j in jobs)})")
    if r.input.common_crawl is not None:
        from cuvee.pipeline.plan import snapshot_sample

        click.echo(f"input: {snapshot_sample(r).describe(r.input.common_crawl)}")
    _report_run_folder(r)


def _report_run_folder(recipe) -> None:
    """Say up front whether `cuvee run` would start, resume, or refuse this recipe's run folder."""
    from cuvee.folders import MARKER, PLAN, FolderError, bind_check, owner
    from cuvee.pipeline.plan import build_plan

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
    try:
        bind_check(run_dir, build_plan(recipe), what="run folder")
    except FolderError as e:
        raise click.ClickException(str(e))
    click.echo(f"run folder {run_dir}: same plan, `cuvee run` resumes it")


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--run-dir", help="Run directory, if not the recipe's.")
def stats(recipe, run_dir):
    """Re-merge the stats of a (possibly SLURM or partial) run of RECIPE and print the funnel."""
    from cuvee.folders import FolderError
    from cuvee.pipeline.recipe import RecipeError
    from cuvee.pipeline.runner import restat
    from cuvee.pipeline.stats import summary_table

    try:
        s = restat(recipe, {"run_dir": run_dir} if run_dir else None)
    except RecipeError as e:
        raise click.ClickException(f"invalid recipe:\n{e}")
    except FolderError as e:
        raise click.ClickException(str(e))
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
            raise click.ClickException(f"unknown stage {name!r}; known stages: {', '.join(specs)}")
        specs = {name: specs[name]}
    if as_json:
        click.echo(json.dumps({n: s.params.model_json_schema() for n, s in specs.items()}, indent=2))
        return
    for stage_name, spec in specs.items():
        doc = (spec.doc or "").strip()
        click.echo(f"{stage_name}: {doc if name else (doc.splitlines()[0] if doc else '')}")
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
def demo(run_dir, skip_mix):
    """End-to-end demo on the bundled Common Crawl sample: pipeline -> mix -> dataset card."""
    from cuvee.demo import run_demo

    run_demo(run_dir, skip_mix=skip_mix)


if __name__ == "__main__":
    main()
