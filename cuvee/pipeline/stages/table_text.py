"""Tables as plain lines, the text FineWeb's line rules were tuned on.

trafilatura 2.x writes table rows in its text output as GitHub-style pipe rows: a whole layout cell, all its
paragraphs, becomes one line such as ``| Welcome to our site. We sell ... |  |``. trafilatura 1.x (what
FineWeb, RefinedWeb and datatrove's recipes ran) wrote each cell's paragraphs as their own lines. The
FineWeb rules judge lines, so the pipe rows fail them: on the bundled demo sample, ``line_punct_ratio``
dropped 21 of the 25 pages that reached it (pages of table layouts, most of the 2008 ARC sample), and the
text that got through carried ``|`` and ``\\|`` into the training data.

``extract.tables: text`` (the default) renders table cells as paragraphs: each cell's text and each of
its paragraphs and line breaks on a line of its own, no pipes, no ``|---|`` rows. The words and their
order are trafilatura's own; only the separators differ. ``tables: markdown`` keeps trafilatura 2.x's rows.

How: while the ``extract`` stage runs, ``trafilatura.core.xmltotxt`` (the name ``determine_returnstring``
calls for text output) is wrapped to rename ``cell`` elements of the finished tree to ``p`` first.
:func:`check_supported` fails loudly when a trafilatura release stops calling it that way, rather than
silently writing pipe rows again.
"""

from __future__ import annotations

from contextlib import contextmanager

from cuvee.pipeline.stages.fallback_skip import require_internal_call


def check_supported() -> None:
    require_internal_call("xmltotxt", "determine_returnstring", "xmltotxt(document.body", "set extract.tables: markdown")


def cells_as_paragraphs(tree) -> None:
    """Rename every ``cell`` of an extracted trafilatura tree to ``p`` (in place)."""
    for cell in tree.iter("cell"):
        cell.tag = "p"


@contextmanager
def tables_as_text(enabled: bool = True):
    """Within the block, trafilatura's text output writes table cells as paragraphs instead of pipe rows."""
    if not enabled:
        yield
        return
    check_supported()
    import trafilatura.core as core

    original = core.xmltotxt

    def xmltotxt_cells_as_lines(xmloutput, include_formatting):
        if xmloutput is not None:
            cells_as_paragraphs(xmloutput)
        return original(xmloutput, include_formatting)

    xmltotxt_cells_as_lines.__wrapped__ = original
    core.xmltotxt = xmltotxt_cells_as_lines
    try:
        yield
    finally:
        core.xmltotxt = original
