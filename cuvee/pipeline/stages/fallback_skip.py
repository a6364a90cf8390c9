"""Skip trafilatura's fallback comparison where it cannot win: ~1.4x faster extraction at equal F1.

After its main extractor, trafilatura (2.x, not in ``fast`` mode) runs readability and jusText on the page
and keeps whichever text its heuristics prefer (``trafilatura.core.compare_extraction``). That comparison
is ~35 % of extraction time. When the main extractor already found a long text, the comparison keeps it:
measured on both shared benchmarks (``benchmarks/bench_extraction.py``), skipping it for main texts of at
least 2,000 characters gives exactly trafilatura's F1 (ScrapingHub 0.9641, WCXB 0.7955, same documents
identical), while 1,000 characters already lost 0.003 F1 on WCXB. ``fast: true`` (no fallback at all)
loses 0.02-0.04 F1.

How: while the ``extract`` stage runs, ``trafilatura.core.compare_extraction`` is wrapped (the module-level
name that ``trafilatura.core._extract_and_compare`` calls); short main texts still go through the original.
This depends on that one internal name: :func:`check_supported` (called when the stage starts, and by the
tests) fails loudly if a trafilatura release renames or stops calling it, instead of silently running the
full comparison or none. trafilatura's public API is unchanged for every other caller in the process once
the stage is done.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager


class UnsupportedTrafilatura(RuntimeError):
    """The installed trafilatura does not have the internal this speed-up wraps."""


def require_internal_call(name: str, caller: str, call: str, remedy: str) -> None:
    """Fail loudly unless ``trafilatura.core.<caller>`` still calls ``trafilatura.core.<name>`` as ``call``:
    the speed-ups here wrap that module-level name, and would otherwise silently stop applying."""
    import trafilatura.core as core

    fn, calling = getattr(core, name, None), getattr(core, caller, None)
    if fn is None or calling is None or call not in inspect.getsource(calling):
        import trafilatura

        raise UnsupportedTrafilatura(
            f"trafilatura {getattr(trafilatura, '__version__', '?')} no longer calls core.{name} from "
            f"core.{caller}; {remedy} (or pin trafilatura 2.x)")


def check_supported() -> None:
    require_internal_call("compare_extraction", "_extract_and_compare", "compare_extraction(",
                          "set extract.skip_fallback_above: null")


@contextmanager
def skip_fallback_above(min_chars: int | None):
    """Within the block, trafilatura skips its fallback comparison for main texts >= ``min_chars``."""
    if min_chars is None:
        yield
        return
    check_supported()
    import trafilatura.core as core

    original = core.compare_extraction

    def compare_unless_long(cleaned_tree, raw_tree, body, text, options):
        if len(text) >= min_chars:
            return body, text
        return original(cleaned_tree, raw_tree, body, text, options)

    compare_unless_long.__wrapped__ = original
    core.compare_extraction = compare_unless_long
    try:
        yield
    finally:
        core.compare_extraction = original
