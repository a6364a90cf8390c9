"""extract.tables: table cells as lines (trafilatura 1.x's text, what FineWeb's line rules expect) by default,
trafilatura 2.x's pipe rows on request; the same words either way, on the real pages of the bundled sample."""

from __future__ import annotations

import re

import pytest
import trafilatura.core
from datatrove.data import Document

from _extract_helpers import sample_pages
from cuvee.pipeline.stages.extract import TrafilaturaExtract
from cuvee.pipeline.stages.trafilatura_patches import Patches, patched

CELL_A = "The river valley was settled by farmers who cultivated wheat and barley along the fertile banks."
CELL_B = "Archaeologists recently uncovered pottery fragments suggesting that trade routes reached far."
CELL_C = "Local historians argue that the old stone bridge, built in the fourteenth century, shaped the economy."
LAYOUT = (
    "<html><body><table>"
    "<tr><td>Home | About</td><td>Contact us</td></tr>"
    f"<tr><td><p>{CELL_A}</p><p>{CELL_B}</p></td><td></td></tr>"
    f"<tr><th>Note</th><td>{CELL_C}<br>Second line of the cell.</td></tr>"
    "</table></body></html>"
)
PIPE_ROW = re.compile(r"^\|.*\|\s*$", re.MULTILINE)


def extract(html: str, tables: str) -> str:
    docs = list(TrafilaturaExtract(tables=tables).run(iter([Document(text=html, id="t")])))
    assert len(docs) == 1
    return docs[0].text


def word_seq(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def test_layout_table_cells_become_lines_not_pipe_rows():
    text = extract(LAYOUT, "text")
    lines = text.split("\n")
    assert CELL_A in lines and CELL_B in lines and CELL_C in lines  # each paragraph of a cell on its own line
    assert not PIPE_ROW.search(text) and "\\|" not in text
    md = extract(LAYOUT, "markdown")
    assert PIPE_ROW.search(md) and CELL_A not in md.split("\n")  # trafilatura 2.x: the cell is one pipe row
    assert word_seq(text) == word_seq(md)


def test_the_patch_is_scoped_to_the_stage():
    original = trafilatura.core.xmltotxt
    with patched(Patches(tables_as_text=True)):
        assert trafilatura.core.xmltotxt is not original
    assert trafilatura.core.xmltotxt is original
    with patched(Patches()):
        assert trafilatura.core.xmltotxt is original
    with pytest.raises(ValueError, match="tables"):
        TrafilaturaExtract(tables="html")


def test_real_pages_same_words_and_no_pipe_rows():
    """Every page of the bundled sample: identical word sequence in both modes; pipe rows only in markdown.
    The 2008 ARC pages are table layouts: most of them must differ, or the test would prove nothing."""
    pages = sample_pages(limit=-1)
    assert len(pages) > 100
    out = {}
    for mode in ("text", "markdown"):
        ex = TrafilaturaExtract(tables=mode)
        docs = list(ex.run(iter([Document(text=d.text, id=d.id, metadata=dict(d.metadata)) for d in pages])))
        out[mode] = {d.id: d.text for d in docs}
    assert out["text"].keys() == out["markdown"].keys() and len(out["text"]) > 100
    import lxml.html

    visible = {d.id: " ".join(lxml.html.document_fromstring(d.text.encode()).text_content().split()) for d in pages}
    with_tables = 0
    for k, text in out["text"].items():
        md = out["markdown"][k]
        assert word_seq(text) == word_seq(md), k
        for row in PIPE_ROW.findall(text):  # a pipe row in text mode must be the page's own text, not a table
            assert " ".join(row.split()) in visible[k], (k, row)
        assert "\\|" not in text and "|---|" not in text, k
        with_tables += bool(PIPE_ROW.search(md))
    assert with_tables >= 30
