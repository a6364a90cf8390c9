"""``cuvee card FOLDER [--mix MANIFEST]``: write the dataset card of a run, a mix or a training run."""

from __future__ import annotations

import click


@click.command("card")
@click.argument("run_dir", metavar="FOLDER", type=click.Path(exists=True, file_okay=False))
@click.option("--mix", "mix", type=click.Path(exists=True), default=None, help="mixer manifest.json (or its folder): adds mix composition and tokenizer")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="a folder of the card's own for README.md, card.html, card_images/ (default: the run's output folder, or the mix or training folder described)")
@click.option("--license", "license_", default="odc-by", show_default=True, help="licence id for the front matter")
@click.option("--name", "pretty_name", default=None, help="pretty_name (default: the recipe name)")
@click.option("--max-token-docs", default=20_000, show_default=True, help="documents tokenized for the token estimate (the rest extrapolated); 0 = none")
@click.option("--spot-checks", default=5, show_default=True, type=click.IntRange(min=0),
              help="a mix with its per-document index: tokens drawn at random, traced to their pages and verified (cuvee trace --verify); 0 = none")
@click.option("--seed", "spot_seed", default=0, show_default=True, help="seed of the spot checks' draw")
def card(run_dir, mix, out_dir, license_, pretty_name, max_token_docs, spot_checks, spot_seed):
    """Write a Hugging Face dataset card (README.md + self-contained card.html + PNG plots). FOLDER is a pipeline
    run folder, a mix folder (its card goes into it, with the provenance sections: removal waterfall, tokens by
    source, language, quality bucket and crawl, epochs, traced spot checks) or a training run folder (the card of
    the mix it read, with what it read)."""
    from cuvee.card.build import write_card

    files = write_card(run_dir, mix=mix, out_dir=out_dir, license=license_, pretty_name=pretty_name,
                       max_token_docs=max_token_docs, spot_checks=spot_checks, spot_seed=spot_seed)
    if not files.run.complete:
        click.echo("note: partial run (complete=false); the card says so", err=True)
    click.echo(f"card: {files.readme}")
    click.echo(f"html: {files.html}")
