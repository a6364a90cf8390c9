"""extract: trafilatura really extracts (not silently timing out), time limit and size cap are counted."""

from __future__ import annotations

import re
import signal
import sys
import threading
from pathlib import Path

from datatrove.data import Document

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.extract import TrafilaturaExtract
from cuvee.pipeline.stages.response import ResponseCheck

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _warcgen import Page, write_warc

PARAS = [
    "The river valley was settled by farmers who cultivated wheat and barley along the fertile banks for centuries.",
    "Archaeologists recently uncovered pottery fragments suggesting that trade routes reached far beyond the hills.",
    "Local historians argue that the old stone bridge, built in the fourteenth century, shaped the town's economy.",
    "Today the valley attracts hikers and birdwatchers, and the annual harvest festival draws visitors from abroad.",
]
ARTICLE = (
    "<html><head><title>History of the valley</title></head><body>"
    "<nav><a href='/'>Home</a> | <a href='/about'>About us</a> | <a href='/shop'>Shop now</a></nav>"
    "<article><h1>History of the valley</h1>" + "".join(f"<p>{p}</p>" for p in PARAS) + "</article>"
    "<footer>Copyright 2024 Example Media. All rights reserved. Subscribe to our newsletter.</footer></body></html>"
)


def words(s: str) -> set[str]:
    return set(re.findall(r"\w+", s.lower()))


def stats_of(step):
    return {k: v.total for k, v in step.stats.stats.items()}


def test_extracts_main_text_without_boilerplate():
    ex = TrafilaturaExtract()
    docs = list(ex.run(iter([Document(text=ARTICLE, id="a")])))
    assert len(docs) == 1
    for p in PARAS:
        assert p in docs[0].text
    assert "Subscribe to our newsletter" not in docs[0].text and "Shop now" not in docs[0].text
    assert stats_of(ex)["forwarded"] == 1


def test_real_cc_page_matches_common_crawls_wet_text():
    """The CC-MAIN-2024-22 page through reader -> response_check -> extract vs CC's own WET text for it."""
    ex = TrafilaturaExtract()
    docs = list(ex.run(ResponseCheck().run(make_reader(str(REPO / "data/sample/CC-MAIN-2024-22-whirlwind.warc.gz")).run())))
    wet = list(make_reader(str(REPO / "tests/fixtures/warc/whirlwind.warc.wet.gz")).run())
    assert len(docs) == 1 and len(wet) == 1
    ours, cc = words(docs[0].text), words(wet[0].text)
    assert len(docs[0].text) > 500
    precision = len(ours & cc) / len(ours)  # what we extract is page text (WET holds all page text)
    assert precision > 0.9, precision
    assert "escopete" in ours
    assert len(docs[0].text) < len(wet[0].text)  # boilerplate (menus, footer) removed


def test_timeout_is_counted_and_is_real():
    big = "<html><body>" + "".join(f"<div><p>{PARAS[i % 4]} number {i}</p></div>" for i in range(3000)) + "</body></html>"
    ex = TrafilaturaExtract(timeout_s=0.001, deduplicate=False)
    out = list(ex.run(iter([Document(text=big, id="slow")])))
    assert out == [] and stats_of(ex)["dropped_extraction_timeout"] == 1
    # the same document extracts fine with a normal limit: the timeout was the timer, not a broken extractor
    ex2 = TrafilaturaExtract(timeout_s=30, deduplicate=False)
    out2 = list(ex2.run(iter([Document(text=big, id="slow")])))
    assert len(out2) == 1 and "number 2999" in out2[0].text
    assert signal.getsignal(signal.SIGPROF) == signal.SIG_DFL  # handler restored
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)  # no stray timer left behind
    # the wall-clock timer works the same way
    ex3 = TrafilaturaExtract(timeout_s=0.001, deduplicate=False, timer="wall")
    assert list(ex3.run(iter([Document(text=big, id="slow")]))) == []
    assert stats_of(ex3)["dropped_extraction_timeout"] == 1
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_size_cap_and_empty_extraction_are_counted():
    ex = TrafilaturaExtract(max_input_chars=len(ARTICLE) - 1)
    assert list(ex.run(iter([Document(text=ARTICLE, id="big")]))) == []
    assert stats_of(ex)["dropped_too_large"] == 1
    ex2 = TrafilaturaExtract()
    empty = "<html><head><script>var x = 1;</script></head><body><div></div></body></html>"
    assert list(ex2.run(iter([Document(text=empty, id="e")]))) == []
    assert stats_of(ex2)["dropped_empty_extraction"] == 1


def test_wet_records_pass_through_and_raw_payload_is_decoded(tmp_path):
    wet = list(TrafilaturaExtract().run(make_reader(str(REPO / "tests/fixtures/warc/whirlwind.warc.wet.gz")).run()))
    assert len(wet) == 1 and wet[0].metadata["warc_type"] == "conversion" and "Escopete" in wet[0].text
    # without response_check the extractor decodes the reader's raw bytes itself
    path = tmp_path / "p.warc.gz"
    write_warc(str(path), [Page("http://example.org/valley", ARTICLE.encode("cp1252"), content_type="text/html; charset=windows-1252")])
    docs = list(TrafilaturaExtract().run(make_reader(str(path)).run()))
    assert len(docs) == 1 and PARAS[0] in docs[0].text and not docs[0].media


def test_extraction_outside_main_thread_uses_the_sandbox():
    result = {}

    def work():
        ex = TrafilaturaExtract(timeout_s=20)
        result["docs"] = list(ex.run(iter([Document(text=ARTICLE, id="t")])))

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert len(result["docs"]) == 1 and PARAS[1] in result["docs"][0].text
