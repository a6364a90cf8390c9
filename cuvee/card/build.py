"""``write_card``: run directory (+ mixer manifest) -> README.md, card.html and PNG plots.

Where the card goes: by default into the run's output folder, so that folder *is* a Hugging Face
dataset repository (README.md next to the Parquet files the ``configs`` point at) and can be uploaded
as is. With no output folder (a partial run that wrote nothing) it goes to ``<run_dir>/card``. The card of a mix
or training folder (:mod:`cuvee.card.targets`) goes into that folder and adds the provenance sections
(:mod:`cuvee.card.mix_provenance`); so does a run's card given a mix with its per-document index. Which
files it may replace there, and under which lock, is :mod:`cuvee.card.place`'s business. Plots are drawn
in a private temporary folder and the HTML inlines exactly those bytes.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cuvee.card import plots
from cuvee.card.frontmatter import build_front_matter, data_configs
from cuvee.card.funnel import funnel_rows
from cuvee.card.html import render_html
from cuvee.card.place import choose, write_files
from cuvee.card.profile import OutputProfile, profile_outputs
from cuvee.card.provenance_sections import provenance
from cuvee.card.provenance_sections import training as training_section
from cuvee.card.run_data import RunData, load_run
from cuvee.card.scores import thresholds_by_score
from cuvee.card.sections import CardWriter
from cuvee.card.targets import CardTarget, resolve, training_info

log = logging.getLogger(__name__)

IMAGES_DIR = "card_images"


@dataclass
class CardFiles:
    readme: Path
    html: Path
    images: dict[str, Path]
    run: RunData
    profile: OutputProfile


def _plots(run: RunData, prof: OutputProfile, writer: CardWriter, img_dir: Path) -> dict[str, Path]:
    made: dict[str, Path | None] = {
        "funnel": plots.funnel_plot(funnel_rows(run.stages, writer.tokens_per_char), img_dir / "funnel.png"),
        "languages": (
            plots.language_plot(writer.languages, img_dir / "languages.png")
            if writer.languages
            else plots.language_plot(dict(prof.cc_languages), img_dir / "languages.png", title="Common Crawl CLD2 language")
        ),
    }
    keys = [k for k, v in prof.scores.items() if v]
    linked, _ = thresholds_by_score(run.stages, keys)
    made["scores"] = plots.score_plots(prof.scores, linked, img_dir / "scores.png")
    if run.manifest:
        made["mix"] = plots.mix_plot(run.manifest.get("sources") or [], img_dir / "mix.png")
    return {k: v for k, v in made.items() if v is not None}


def write_card(
    run_dir: str | Path,
    mix: str | Path | None = None,
    out_dir: str | Path | None = None,
    license: str = "odc-by",
    pretty_name: str | None = None,
    max_token_docs: int = 20_000,
    spot_checks: int = 5,
    spot_seed: int = 0,
) -> CardFiles:
    """Write ``README.md`` (Hub dataset card), ``card.html`` and ``card_images/*.png``; return their paths.

    ``run_dir`` is a pipeline run folder, a mix folder or a training run folder (:mod:`cuvee.card.targets`). A mix
    with its per-document index adds the provenance sections, with ``spot_checks`` seeded tokens traced and
    verified (0: none)."""
    target = resolve(run_dir, mix)
    run = load_run(target.run_dir, target.mix)
    place = choose(run.run_dir, run.output_root, out_dir, target.folder, target.what)
    with ExitStack() as held:
        place.hold(held)
        extra = _provenance(run, target, spot_checks, spot_seed)
        return _write_locked(run, place.folder, license, pretty_name, max_token_docs, extra)


def _provenance(run: RunData, target: CardTarget, spot: int, seed: int):
    """The provenance sections' data, for a mix with its per-document index (None otherwise)."""
    from cuvee.mixer.docindex import KEY

    if not run.manifest or KEY not in run.manifest or run.manifest_path is None:
        return None
    from cuvee.card.mix_provenance import mix_provenance

    folder = run.manifest_path if run.manifest_path.is_dir() else run.manifest_path.parent
    prov = mix_provenance(folder, spot=spot, seed=seed)
    return prov, (training_info(target.training) if target.training is not None else None)


def _write_locked(run: RunData, out: Path, license: str, pretty_name: str | None, max_token_docs: int,
                  extra=None) -> CardFiles:
    prof = profile_outputs(run.output_files, max_token_docs=max_token_docs)

    # the writer's ratio is needed by the funnel plot, so images are made with a provisional writer
    writer = CardWriter(run, prof, {})
    with tempfile.TemporaryDirectory(prefix="cuvee-card-") as tmp:
        made = _plots(run, prof, writer, Path(tmp))
        if extra is not None:
            made["waterfall"] = plots.funnel_plot(extra[0].waterfall, Path(tmp) / "waterfall.png",
                                                  title="Removal waterfall: crawl to shards")
            made = {k: v for k, v in made.items() if v is not None}
        pngs = {f"{IMAGES_DIR}/{p.name}": p.read_bytes() for p in made.values()}
    refs = {k: f"{IMAGES_DIR}/{p.name}" for k, p in made.items()}
    after_mix = []
    if extra is not None:
        prov, training = extra
        img = f"![Removal waterfall: documents per step, crawl to shards]({refs['waterfall']})\n" \
            if "waterfall" in refs else ""
        after_mix = [provenance(prov, img)] + ([training_section(training)] if training else [])
    writer = CardWriter(run, prof, refs, after_mix=after_mix)
    body = writer.render()

    route_by = (run.stats.get("output") or {}).get("route_by") or (run.recipe.get("output") or {}).get("route_by")
    meta = build_front_matter(
        pretty_name=pretty_name or run.name,
        languages=writer.hub_languages,
        n_docs=writer.documents,
        configs=data_configs(run.output_files, run.output_root, out, route_by),
        license=license,
    )
    text = f"---\n{meta.to_yaml()}\n---\n\n{body}"
    page = render_html(text, pngs, pretty_name or run.name)
    written = write_files(out, {"README.md": text.encode("utf-8"), "card.html": page.encode("utf-8"), **pngs})
    images = {k: written[ref] for k, ref in refs.items()}
    log.info("wrote dataset card %s (%d images)", written["README.md"], len(images))
    return CardFiles(written["README.md"], written["card.html"], images, run, prof)
