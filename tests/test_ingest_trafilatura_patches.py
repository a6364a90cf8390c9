"""cuvee's changes to trafilatura's internals apply only on the release and XPath lists they were verified on, after
a probe on bundled pages; otherwise extraction is plain trafilatura's, said in one warning line."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import trafilatura
import trafilatura.xpaths
from lxml.etree import XPath
from trafilatura import core

from _extract_helpers import extract_samples
from cuvee.pipeline.stages import trafilatura_patches as tp
from cuvee.pipeline.stages.trafilatura_patches import ALL, Patches, expression_lists, off_reason, patched

REPO = Path(__file__).resolve().parents[1]
PLAIN = {"skip_fallback_above": None, "tables": "markdown", "guard_xpaths": False, "native_xpaths": False}


@pytest.fixture
def warnings(monkeypatch):
    """The 'patches off' warning lines logged during the test, as a fresh process would log them."""
    from datatrove.utils.logging import logger

    monkeypatch.setenv(tp._ENV, "")  # no earlier process of the run has said it
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING",
                      filter=lambda r: "trafilatura patches off" in r["message"])
    yield lines
    logger.remove(sink)


@pytest.fixture
def fresh_verdicts(monkeypatch):
    """A process that has not checked trafilatura yet."""
    monkeypatch.setattr(tp._state, "verdicts", {})


@pytest.fixture(scope="module")
def outputs():
    """The sample pages through the stage with cuvee's patches (the default) and as plain trafilatura."""
    patched_out, plain_out = extract_samples(limit=25), extract_samples(limit=25, **PLAIN)
    assert patched_out.keys() == plain_out.keys() and len(plain_out) > 15
    assert patched_out != plain_out  # tables as lines: the patches do change these pages, so equality below means off
    return patched_out, plain_out


def test_pin_and_verified_version_agree():
    pin = re.search(r'"trafilatura==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pin and pin.group(1) == tp.VERIFIED_VERSION == trafilatura.__version__
    assert tp.xpaths_fingerprint() == tp.VERIFIED_XPATHS
    assert off_reason() is None  # the probe passes on the pinned release


def test_another_trafilatura_version_turns_the_patches_off_with_one_message(monkeypatch, warnings, outputs):
    monkeypatch.setattr(trafilatura, "__version__", "2.4.0")  # a release the patches were not verified on
    first, second = extract_samples(limit=25), extract_samples(limit=25)
    assert first == second == outputs[1]  # plain trafilatura's text, on every page
    assert len(warnings) == 1 and "trafilatura 2.4.0 is installed" in warnings[0] and "2.3.1" in warnings[0]


def test_a_changed_xpath_list_turns_the_patches_off_with_one_message(warnings, outputs):
    lst = trafilatura.xpaths.OVERALL_DISCARD_XPATH
    before = list(lst)
    lst.append(XPath(".//*[self::table]"))  # a release (or plugin) that discards one more kind of element
    try:
        got = extract_samples(limit=25)
        assert got == extract_samples(limit=25, **PLAIN)  # plain trafilatura, the new expression included
        assert all(a is b for a, b in zip(lst, before)) and len(lst) == len(before) + 1  # lists left alone
    finally:
        del lst[-1]
    assert got != outputs[1]  # the new expression did run (tables discarded)
    assert len(warnings) == 1 and "trafilatura.xpaths holds other expressions" in warnings[0]


def _rebound(fn, **names):
    """``fn`` as a release would have it that calls ``names`` through its own binding, not ``trafilatura.core``'s."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__, fn.__defaults__, fn.__closure__)


def test_probe_refuses_a_release_whose_text_output_skips_core_xmltotxt(monkeypatch, warnings, fresh_verdicts, outputs):
    monkeypatch.setattr(core, "determine_returnstring", _rebound(core.determine_returnstring, xmltotxt=core.xmltotxt))
    assert "pipe rows" in off_reason()
    assert extract_samples(limit=25) == outputs[1]
    assert len(warnings) == 1


def test_probe_refuses_a_release_that_compares_without_core_compare_extraction(monkeypatch, warnings, fresh_verdicts):
    monkeypatch.setattr(core, "_extract_and_compare",
                        _rebound(core._extract_and_compare, compare_extraction=core.compare_extraction))
    assert "fallback skip no longer applies" in off_reason()
    assert len(warnings) == 1


def test_a_task_process_of_a_run_that_said_it_stays_quiet(monkeypatch, warnings):
    monkeypatch.setattr(trafilatura, "__version__", "2.4.0")
    monkeypatch.setattr(tp._state, "verdicts", {})
    assert off_reason()
    monkeypatch.setattr(tp._state, "verdicts", {})  # the next process, with the run's environment
    assert off_reason()
    assert len(warnings) == 1


def test_the_probe_runs_once_per_process(monkeypatch, fresh_verdicts):
    probes = []
    real = tp._probe
    monkeypatch.setattr(tp, "_probe", lambda: probes.append(1) or real())
    for _ in range(3):
        assert off_reason() is None
    extract_samples(limit=2)
    assert probes == [1]


def test_nested_stages_share_one_application_restored_by_the_last():
    lists = expression_lists()
    before = {n: list(lst) for n, lst in lists.items()}
    xmltotxt, compare = core.xmltotxt, core.compare_extraction
    outer, inner = patched(ALL), patched(ALL)
    assert outer.__enter__() and inner.__enter__()
    swapped = {n: list(lst) for n, lst in lists.items()}
    assert swapped != before and core.xmltotxt is not xmltotxt and core.compare_extraction is not compare
    outer.__exit__(None, None, None)  # the first stage ends while the second still runs
    assert {n: list(lst) for n, lst in lists.items()} == swapped and core.xmltotxt is not xmltotxt
    inner.__exit__(None, None, None)
    assert all(all(a is b for a, b in zip(lists[n], before[n])) for n in lists)
    assert core.xmltotxt is xmltotxt and core.compare_extraction is compare
    with patched(ALL), pytest.raises(ValueError, match="different trafilatura patches"), \
            patched(Patches(tables_as_text=True)):
        pass
    assert core.xmltotxt is xmltotxt


def test_restored_after_an_error_inside_the_block():
    lists = expression_lists()
    before = {n: list(lst) for n, lst in lists.items()}
    with pytest.raises(KeyError), patched(ALL):
        assert any(a is not b for n in lists for a, b in zip(lists[n], before[n]))
        raise KeyError("boom")
    assert all(all(a is b for a, b in zip(lists[n], before[n])) for n in lists)
