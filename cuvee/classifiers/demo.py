"""Train the shipped demo quality classifier (``cuvee/assets/models/demo_quality.ftz``) on real pages.

Positives ("hq"): human-reviewed main-content texts of real web pages (WCXB ground truth: the 1,497
DEV texts shipped in ``data/curated`` plus the TEST pages' texts). Negatives ("lq"): the boilerplate of
the same kind of pages: for each WCXB TEST page, the full-page text (resiliparse, boilerplate kept)
minus every line that belongs to the ground-truth main content (menus, footers, cookie banners,
related-link lists ...), plus the DEV pages' human-marked "without" snippets.

The held-out split is by *page*: 20 % of the TEST pages (their main content and their boilerplate)
never reach training. Run::

    python -m cuvee.classifiers.demo --shared /work/shared/data
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import click

from cuvee.classifiers.examples import NEGATIVE, POSITIVE, Examples
from cuvee.kernel.atomic import write_json

REPO = Path(__file__).resolve().parents[2]
DEV_JSONL = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
OUTPUT = REPO / "cuvee" / "assets" / "models" / "demo_quality.ftz"


def _norm_line(s: str) -> str:
    return " ".join(s.split()).lower()


def boilerplate_text(html: str, main_content: str) -> str:
    """Page text with the main-content lines removed: what an extractor should have thrown away."""
    from resiliparse.extract.html2text import extract_plain_text

    full = extract_plain_text(html, main_content=False, alt_texts=False)
    main = {_norm_line(x) for x in main_content.splitlines() if x.strip()}
    kept = [ln.strip() for ln in full.splitlines() if ln.strip() and _norm_line(ln) not in main]
    return "\n".join(kept)


def is_held_out(file_id: str, fraction: float = 0.2) -> bool:
    return (zlib.crc32(file_id.encode()) % 1000) < fraction * 1000


def build_examples(shared: Path) -> tuple[Examples, Examples, dict]:
    train, valid = Examples(), Examples()
    info = {"dev_pages": 0, "test_pages": 0, "test_held_out_pages": 0, "empty_boilerplate": 0}
    with gzip.open(DEV_JSONL, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            info["dev_pages"] += 1
            if r.get("main_content"):
                train.texts.append(r["main_content"])
                train.labels.append(POSITIVE)
            without = [s for s in (r.get("without") or []) if s]
            if without:
                train.texts.append("\n".join(without))
                train.labels.append(NEGATIVE)
    wcxb = shared / "extraction_wcxb" / "test"
    for gt_path in sorted((wcxb / "ground-truth").glob("*.json")):
        gt = json.loads(gt_path.read_text())
        main = (gt.get("ground_truth") or {}).get("main_content") or ""
        html_path = wcxb / "html" / f"{gt_path.stem}.html.gz"
        if not main or not html_path.exists():
            continue
        info["test_pages"] += 1
        target = valid if is_held_out(gt_path.stem) else train
        info["test_held_out_pages"] += target is valid
        target.texts.append(main)
        target.labels.append(POSITIVE)
        bp = boilerplate_text(gzip.open(html_path, "rt", encoding="utf-8", errors="replace").read(), main)
        if len(bp.split()) < 5:
            info["empty_boilerplate"] += 1
            continue
        target.texts.append(bp)
        target.labels.append(NEGATIVE)
    return train, valid, info


@click.command()
@click.option("--shared", default="/work/shared/data", show_default=True, help="the shared data folder (extraction_wcxb/)")
@click.option("--output", default=str(OUTPUT), show_default=True)
def main(shared: str, output: str):
    """Train, quantize and evaluate the demo classifier; writes <output> and <output>.metrics.json."""
    from cuvee.classifiers.fasttext_model import FastTextConfig, evaluate_fasttext, train_fasttext

    train, valid, info = build_examples(Path(shared))
    cfg = FastTextConfig(quantize=True, quantize_cutoff=40_000, bucket=500_000)
    train_fasttext(train, output, cfg)
    metrics = evaluate_fasttext(output, valid)
    report = {"model": Path(output).name, "data": info, "train_examples": len(train), "valid_examples": len(valid),
              "train_labels": {lab: train.labels.count(lab) for lab in (POSITIVE, NEGATIVE)},
              "valid_labels": {lab: valid.labels.count(lab) for lab in (POSITIVE, NEGATIVE)},
              "config": cfg.__dict__, "valid_metrics": metrics, "size_bytes": Path(output).stat().st_size}
    write_json(Path(str(output) + ".metrics.json"), report)
    click.echo(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
