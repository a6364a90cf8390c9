"""`cuvee demo`: the whole path on the bundled Common Crawl sample, offline, in about a minute on 2 cores.

recipes/demo.yaml (FineWeb stages on data/sample) -> mixes/demo.yaml (tokenized, weighted shards)
-> dataset card (README.md + card.html + plots); the last lines list every output and the next command.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from cuvee.yaml_safe import load_yaml

REPO = Path(__file__).resolve().parents[1]


def _locate(rel: str) -> Path:
    """Configs are resolved from the current folder first, then from the source checkout."""
    p = Path(rel)
    return p if p.exists() else REPO / rel


def run_demo(run_dir: str = "runs/demo", skip_mix: bool = False, fresh: bool = False) -> Path:
    """The three steps; a rerun resumes each (the pipeline and the mix find their finished work, the card is
    written again), like every other command, and ``fresh`` starts both folders over."""
    from cuvee.card.build import write_card
    from cuvee.pipeline.runner import run_recipe
    from cuvee.pipeline.stats import summary_table

    t0 = time.perf_counter()
    click.secho("1/3 pipeline: recipes/demo.yaml on the bundled Common Crawl sample (data/sample)", bold=True)
    stats = run_recipe(_locate("recipes/demo.yaml"), {"run_dir": run_dir, "input.paths": [str(_locate("data/sample"))]},
                       progress=True, fresh=fresh)
    click.echo(summary_table(stats))
    manifest = None
    if not skip_mix:
        from cuvee.mixer.cli import format_plan
        from cuvee.mixer.mix import run_mix

        click.secho("2/3 mix: mixes/demo.yaml -> Megatron .bin/.idx shards", bold=True)
        cfg = load_yaml(_locate("mixes/demo.yaml").read_text(), "mixes/demo.yaml")
        cfg["sources"][0]["paths"] = str(Path(run_dir) / "output")  # the pipeline output just written
        manifest_dict = run_mix(cfg, out_dir=str(Path(run_dir) / "mix"), fresh=fresh)
        click.echo(format_plan(manifest_dict))
        manifest = Path(run_dir) / "mix" / "manifest.json"
    click.secho("3/3 dataset card", bold=True)
    files = write_card(run_dir, mix=str(manifest) if manifest else None)
    click.echo(f"done in {time.perf_counter() - t0:.1f}s")
    outputs = [("run folder", run_dir), ("stats", Path(run_dir) / "stats.json"),
               ("documents", stats["output"]["path"])]
    if manifest:
        outputs += [("mix shards", manifest.parent), ("mix manifest", manifest)]
    outputs += [("dataset card", files.readme), ("card html", files.html)]
    click.secho("outputs:", bold=True)
    for label, path in outputs:
        click.secho(f"  {label + ':':<14}{path}", fg="green" if label == "dataset card" else None)
    click.echo(f"next: {next_command(run_dir, trained_on=manifest.parent if manifest else None)}")
    return Path(files.readme)


def next_command(run_dir: str = "runs/demo", trained_on: Path | None = None) -> str:
    """What to try after the demo: README's newcomer path goes on with a model trained on the mix just built
    (configs/train/demo_mix.yaml reads runs/demo/mix); without a mix, the full FineWeb recipe on the same sample.
    Config paths are relative to the checkout, so the command runs from there."""
    where = "" if Path("configs/train/demo_mix.yaml").is_file() else f"cd {REPO} && "
    if trained_on is not None:
        default = Path(run_dir) == Path("runs/demo") and not where  # the path demo_mix.yaml reads, from here
        data = "" if default else f" --set 'data.paths=[{Path(trained_on).resolve()}]'"
        return (f"{where}cuvee train configs/train/demo_mix.yaml{data}   (a small Llama on this mix, "
                f"a few minutes on CPU)")
    return (f"{where}cuvee run recipes/fineweb.yaml   (the full FineWeb recipe on the same sample), then "
            f"cuvee card runs/fineweb")
