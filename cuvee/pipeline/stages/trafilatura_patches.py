"""Every change cuvee makes to trafilatura's internals, applied only where it was verified.

The ``extract`` stage changes three things inside trafilatura while it runs, and restores them afterwards:

``skip_fallback_above``  ``core.compare_extraction`` (readability/jusText against the main extractor, ~35 % of
                         extraction time) is skipped when the main text already has this many characters: the
                         comparison keeps such texts anyway. Measured on both extraction benchmarks at 2,000:
                         exactly trafilatura's F1 (ScrapingHub 0.9641, WCXB 0.7955); at 1,000 WCXB lost 0.003.
``tables: text``         ``core.xmltotxt`` first renames table ``cell`` elements to ``p``, so each cell's
                         paragraphs are lines (trafilatura 1.x's text, what FineWeb's line rules were tuned on)
                         instead of 2.x's ``| ... |`` rows. Same words in the same order; only separators differ.
``guard_xpaths`` /       the expression lists in ``trafilatura.xpaths`` are swapped in place for guarded
``native_xpaths``        (:mod:`~cuvee.pipeline.stages.xpath_guard`) or compiled
                         (:mod:`~cuvee.pipeline.stages.xpath_native`) twins that select the same nodes.

Each depends on trafilatura's internals, verified on one release only. So, once per process, before the
first use: the installed version must be :data:`VERIFIED_VERSION`, the XPath lists must hold exactly the
expressions verified on it (:data:`VERIFIED_XPATHS`; a changed list means new expressions would run
unverified), and a probe extracts a few bundled real pages (``cuvee/assets/trafilatura_probe``) plain and
patched: the table patch must keep every word and leave no pipe row, the other patches must leave the text
identical and the fallback skip must really skip. On any failure no patch is applied, extraction runs as
plain trafilatura, and one warning says why (once per run: task processes inherit the note through
``CUVEE_TRAFILATURA_PATCHES_OFF``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from datatrove.utils.logging import logger

VERIFIED_VERSION = "2.3.1"
# sha256 over "name\0path\n" of every expression in trafilatura.xpaths' lists (sorted by name), as in 2.3.1
VERIFIED_XPATHS = "047385e0fbf75226d818f3c2ed21e89f4bbcce312cdabe8747bc4f9175bdcbc5"
PROBE_PAGES = Path(__file__).resolve().parents[2] / "assets" / "trafilatura_probe" / "pages.jsonl.gz"
# the probe's own settings (FineWeb's), fixed whatever a recipe sets: the checks in _probe rely on them
PROBE_EXTRACT = {"favor_precision": True, "include_comments": False, "deduplicate": False, "include_tables": True,
                 "fast": False}
_ENV = "CUVEE_TRAFILATURA_PATCHES_OFF"
_PIPE_ROW = re.compile(r"^\|.*\|\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Patches:
    """Which patches the ``extract`` stage asks for (see the module doc)."""

    skip_fallback_above: int | None = None
    tables_as_text: bool = False
    guard_xpaths: bool = False
    native_xpaths: bool = False

    def any(self) -> bool:
        return self.skip_fallback_above is not None or self.tables_as_text or self.guard_xpaths or self.native_xpaths


ALL = Patches(skip_fallback_above=2000, tables_as_text=True, guard_xpaths=True, native_xpaths=True)


def expression_lists() -> dict[str, list]:
    """trafilatura's module-level XPath lists (name -> the list object every trafilatura module shares)."""
    from lxml.etree import XPath
    from trafilatura import xpaths

    return {name: value for name, value in vars(xpaths).items()
            if isinstance(value, list) and value and all(isinstance(x, XPath) for x in value)}


def xpaths_fingerprint() -> str:
    """sha256 of the expressions in trafilatura's XPath lists (compare with :data:`VERIFIED_XPATHS`)."""
    h = hashlib.sha256()
    lists = expression_lists()
    for name in sorted(lists):
        for x in lists[name]:
            h.update(f"{name}\0{x.path}\n".encode())
    return h.hexdigest()


def cells_as_paragraphs(tree) -> None:
    """Rename every ``cell`` of an extracted trafilatura tree to ``p`` (in place)."""
    for cell in tree.iter("cell"):
        cell.tag = "p"


def _apply(p: Patches):
    """Apply ``p`` (unchecked); returns the function that restores trafilatura exactly."""
    from trafilatura import core

    from cuvee.pipeline.stages.xpath_guard import twin

    undo = []

    def restore():
        while undo:
            undo.pop()()

    def replace(name, fn):
        original = getattr(core, name)
        fn.__wrapped__ = original
        setattr(core, name, fn)
        undo.append(lambda: setattr(core, name, original))
        return original

    try:
        if p.skip_fallback_above is not None:
            min_chars, compare = p.skip_fallback_above, core.compare_extraction

            def compare_unless_long(cleaned_tree, raw_tree, body, text, options):
                if len(text) >= min_chars:
                    return body, text
                return compare(cleaned_tree, raw_tree, body, text, options)

            replace("compare_extraction", compare_unless_long)
        if p.tables_as_text:
            xmltotxt = core.xmltotxt

            def xmltotxt_cells_as_lines(xmloutput, include_formatting):
                if xmloutput is not None:
                    cells_as_paragraphs(xmloutput)
                return xmltotxt(xmloutput, include_formatting)

            replace("xmltotxt", xmltotxt_cells_as_lines)
        if p.guard_xpaths or p.native_xpaths:
            saved = [(lst, list(lst)) for lst in expression_lists().values()]

            def put_back():
                for lst, original in saved:
                    lst[:] = original

            undo.append(put_back)  # in place: every trafilatura module holds these same list objects
            for lst, original in saved:
                lst[:] = [twin(x, p.guard_xpaths, p.native_xpaths) for x in original]
    except BaseException:
        restore()
        raise
    return restore


def _shared_lists() -> str | None:
    """Why the swapped lists would not reach trafilatura (a module holding its own copy), or None."""
    import sys

    lists = expression_lists()
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("trafilatura.") and mod_name != "trafilatura.xpaths":
            for name, lst in lists.items():
                held = vars(mod).get(name)
                if held is not None and held is not lst:
                    return f"{mod_name}.{name} is not trafilatura.xpaths.{name}"
    return None


def _probe() -> str | None:
    """Extract the bundled pages plain and patched; None when every patch does what it should, else why not."""
    import trafilatura
    from trafilatura import core

    with gzip.open(PROBE_PAGES, "rt", encoding="utf-8") as f:
        pages = [json.loads(line) for line in f]
    calls = [0]
    compare = core.compare_extraction

    def counted(*args):
        calls[0] += 1
        return compare(*args)

    def extract_all(p: Patches) -> list[str]:
        calls[0] = 0
        restore = _apply(p)
        try:
            return [trafilatura.extract(pg["html"], url=pg["url"], **PROBE_EXTRACT) or "" for pg in pages]
        finally:
            restore()

    core.compare_extraction = counted
    try:
        plain = extract_all(Patches())
        plain_calls = calls[0]
        tables = extract_all(Patches(tables_as_text=True))
        patched = extract_all(ALL)
        patched_calls = calls[0]
    except Exception as e:  # noqa: BLE001 - any failure means: do not patch
        return f"the probe failed: {type(e).__name__}: {e}"
    finally:
        core.compare_extraction = compare
    words = re.compile(r"\w+")
    if not all(plain):
        return "plain trafilatura extracted nothing from a probe page"
    if any(words.findall(a) != words.findall(b) for a, b in zip(plain, tables)):
        return "the table patch changed the words of a probe page"
    if not any(_PIPE_ROW.search(t) for t in plain) or any(_PIPE_ROW.search(t) for t in tables):
        return "the table patch no longer replaces pipe rows (core.xmltotxt is not reached)"
    if patched != tables:
        return "the XPath twins or the fallback skip changed the text of a probe page"
    if not 0 < patched_calls < plain_calls:
        return "the fallback skip no longer applies (core.compare_extraction is not reached)"
    return _shared_lists()


class _State:
    """This process's verdicts (by trafilatura version and XPath fingerprint) and the patches now applied."""

    def __init__(self):
        self.lock = threading.RLock()
        self.verdicts: dict[tuple[str, str], str | None] = {}
        self.holders = 0
        self.applied: Patches | None = None
        self.restore = None


_state = _State()


def off_reason() -> str | None:
    """None when the patches may be applied in this process, else why not (said once, as a warning)."""
    import trafilatura

    with _state.lock:
        if _state.holders:
            return None  # applied, hence verified; the lists now hold the twins
        version, fingerprint = str(getattr(trafilatura, "__version__", "?")), xpaths_fingerprint()
        key = (version, fingerprint)
        if key not in _state.verdicts:
            if version != VERIFIED_VERSION:
                reason = f"trafilatura {version} is installed, the patches were verified on {VERIFIED_VERSION}"
            elif fingerprint != VERIFIED_XPATHS:
                reason = f"trafilatura.xpaths holds other expressions than the {VERIFIED_VERSION} ones verified"
            else:
                reason = _probe()
            _state.verdicts[key] = reason
            if reason and os.environ.get(_ENV) != reason:  # a task process of a run that already said so stays quiet
                os.environ[_ENV] = reason
                logger.warning(f"trafilatura patches off: {reason}; extraction runs as plain trafilatura "
                               f"(no speed-ups, tables as pipe rows). Install trafilatura=={VERIFIED_VERSION} "
                               f"for cuvee's settings")
        return _state.verdicts[key]


@contextmanager
def patched(p: Patches):
    """Within the block trafilatura runs with ``p`` applied if :func:`off_reason` allows, else unchanged; yields
    whether it is applied. Nested blocks (two extract stages in one process) share one application, restored
    when the last one ends; they must ask for the same patches."""
    if not p.any() or off_reason():
        yield False
        return
    with _state.lock:
        if _state.holders and _state.applied != p:
            raise ValueError(f"two extract stages with different trafilatura patches in one process: "
                             f"{_state.applied} and {p}")
        if not _state.holders:
            _state.restore, _state.applied = _apply(p), p
        _state.holders += 1
    try:
        yield True
    finally:
        with _state.lock:
            _state.holders -= 1
            if not _state.holders:
                restore, _state.restore, _state.applied = _state.restore, None, None
                restore()
