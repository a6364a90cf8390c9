"""``cuvee card RUN_DIR [--mix MANIFEST]``: write the dataset card of a run."""

from __future__ import annotations

import click


@click.command("card")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--mix", "mix", type=click.Path(exists=True), default=None, help="mixer manifest.json (or its folder): adds mix composition and tokenizer")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="a folder of the card's own for README.md, card.html, card_images/ (default: the run's output folder)")
@click.option("--license", "license_", default="odc-by", show_default=True, help="licence id for the front matter")
@click.option("--name", "pretty_name", default=None, help="pretty_name (default: the recipe name)")
@click.option("--max-token-docs", default=20_000, show_default=True, help="documents tokenized for the token estimate (the rest extrapolated); 0 = none")
def card(run_dir, mix, out_dir, license_, pretty_name, max_token_docs):
    """Write a Hugging Face dataset card (README.md + self-contained card.html + PNG plots) for RUN_DIR."""
    from cuvee.card.build import write_card

    files = write_card(run_dir, mix=mix, out_dir=out_dir, license=license_, pretty_name=pretty_name, max_token_docs=max_token_docs)
    if not files.run.complete:
        click.echo("note: partial run (complete=false); the card says so", err=True)
    click.echo(f"card: {files.readme}")
    click.echo(f"html: {files.html}")
