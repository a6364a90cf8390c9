"""The bundled WARC/ARC samples as HTML pages, and through cuvee's ``extract`` stage as texts by id, for tests
that compare XPaths or extraction output under two settings."""

from __future__ import annotations

from pathlib import Path

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.extract import TrafilaturaExtract
from cuvee.pipeline.stages.response import ResponseCheck

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "data/sample").glob("*.*arc.gz"))


def sample_pages(limit: int = 80) -> list:
    """The samples' HTML responses as datatrove Documents (``doc.text`` is the decoded HTML); ``limit`` records
    per file, -1 for all."""
    pages = []
    for path in SAMPLES:
        pages.extend(ResponseCheck().run(make_reader(str(path), limit=limit).run()))
    return pages


def extract_samples(limit: int = 60, **extract_kw) -> dict[str, str]:
    """The pages of :func:`sample_pages` through the ``extract`` stage: text by document id."""
    step = TrafilaturaExtract(timeout_s=10, **extract_kw)
    return {d.id: d.text for d in step.run(iter(sample_pages(limit)))}
