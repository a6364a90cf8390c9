"""Skipping trafilatura's fallback comparison for long main texts: same output on real pages, the
comparison still runs for short ones, and the wrapped internal is restored (that a release still calls it is
the probe's job: tests/test_ingest_trafilatura_patches.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trafilatura import core

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.extract import TrafilaturaExtract
from cuvee.pipeline.stages.response import ResponseCheck

REPO = Path(__file__).resolve().parents[1]
SAMPLES = [REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz", REPO / "data/sample/small-sample-1213893279526_0.arc.gz"]


def _extract(skip, limit=60):
    out = {}
    for path in SAMPLES:
        reader = make_reader(str(path), limit=limit)
        step = TrafilaturaExtract(skip_fallback_above=skip, timeout_s=10)
        out.update({d.id: d.text for d in step.run(ResponseCheck().run(reader.run()))})
    return out


@pytest.fixture
def comparisons(monkeypatch):
    """Counts calls of trafilatura's real comparison (the function itself still runs)."""
    calls = []
    real = core.compare_extraction

    def counting(*args):
        calls.append(len(args[3]))
        return real(*args)

    monkeypatch.setattr(core, "compare_extraction", counting)
    return calls


def test_same_text_on_real_pages_and_fewer_comparisons(comparisons):
    full = _extract(None)
    n_full = len(comparisons)
    comparisons.clear()
    skipped = _extract(2000)
    assert skipped == full and len(full) > 30  # identical output on real CC pages (2008 ARC + 2020 WARC)
    assert len(comparisons) < n_full  # long main texts skipped the comparison...
    assert comparisons and all(n < 2000 for n in comparisons)  # ...short ones still went through it


def test_restored_after_the_stage_and_fast_mode_never_wraps(comparisons):
    counting = core.compare_extraction
    _extract(2000, limit=5)
    assert core.compare_extraction is counting
    assert TrafilaturaExtract(fast=True).skip_fallback_above is None
