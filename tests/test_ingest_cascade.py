"""cc_language_prefilter: uses CC's CLD2 metadata when present, otherwise a quick fastText pass, and keeps
what the full path (extract + fastText language ID on the extracted text) would keep."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.cascade import LanguagePrefilter, load_lid176
from cuvee.pipeline.stages.extract import TrafilaturaExtract
from cuvee.pipeline.stages.response import ResponseCheck

REPO = Path(__file__).resolve().parents[1]
CC_WARC = REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"
ARC = REPO / "data/sample/small-sample-1213893279526_0.arc.gz"
sys.path.insert(0, str(REPO / "benchmarks"))
from _warcgen import Page, write_warc


def stats_of(step):
    return {k: v.total for k, v in step.stats.stats.items()}


def test_cc_metadata_decides_when_present():
    # independent: which responses does CC's CLD2 metadata call Chinese?
    zh = set()
    with open(CC_WARC, "rb") as f:
        for r in ArchiveIterator(f):
            if r.rec_type == "metadata":
                for line in r.content_stream().read().decode().splitlines():
                    if line.startswith("languages-cld2:"):
                        if any(x["code"] == "zh" for x in json.loads(line.split(":", 1)[1])["languages"]):
                            zh.add(r.rec_headers.get_header("WARC-Concurrent-To"))
    pf = LanguagePrefilter(("zh",))
    kept = list(pf.run(ResponseCheck().run(make_reader(str(CC_WARC)).run())))
    assert {d.id for d in kept} == zh and 0 < len(zh) < 16
    st = stats_of(pf)
    assert st["prefilter_cc_metadata"] == 16 and st["dropped_prefilter_language"] == 16 - len(zh)
    assert "prefilter_fasttext" not in st  # no model needed when CC already knows


def test_fasttext_path_when_no_metadata(tmp_path):
    en = "<html><body><article>" + "<p>The committee published its annual report on public transport, recommending more frequent trains and cheaper tickets for students.</p>" * 3 + "</article></body></html>"
    de = "<html><body><article>" + "<p>Der Ausschuss veröffentlichte seinen Jahresbericht über den öffentlichen Verkehr und empfahl häufigere Züge und günstigere Fahrkarten.</p>" * 3 + "</article></body></html>"
    ru = "<html><body><article>" + "<p>Комитет опубликовал ежегодный доклад об общественном транспорте и рекомендовал более частые поезда и дешёвые билеты.</p>" * 3 + "</article></body></html>"
    path = tmp_path / "x.warc.gz"
    write_warc(str(path), [Page("http://e/en", en.encode()), Page("http://e/de", de.encode()), Page("http://e/ru", ru.encode()),
                           Page("http://e/short", b"<html><body><p>Hi</p></body></html>")])
    pf = LanguagePrefilter(("en",))
    kept = [d.metadata["url"] for d in pf.run(ResponseCheck().run(make_reader(str(path)).run()))]
    assert kept == ["http://e/en", "http://e/short"]  # too-short pages are kept undecided
    assert stats_of(pf)["dropped_prefilter_language"] == 2
    # the prefilter also works straight on the reader's raw bytes (before response_check)
    pf2 = LanguagePrefilter(("de",))
    assert [d.metadata["url"] for d in pf2.run(make_reader(str(path)).run())] == ["http://e/de", "http://e/short"]


def test_prefilter_keeps_what_the_full_path_keeps():
    """On 125 real 2008 CC pages (no CLD2 metadata): every page the full path keeps as English
    (trafilatura text, fastText en >= 0.65 as in FineWeb, and >= 50 words: FineWeb's gopher_quality
    min_doc_words, so a page below it never reaches the output) must survive the prefilter. (trafilatura
    2.x extracts a 4-word date line from one Spanish blog page, which lid.176 calls English.)"""
    model = load_lid176()
    docs = list(ResponseCheck().run(make_reader(str(ARC)).run()))
    pf = LanguagePrefilter(("en",))
    pre_kept = {d.id for d in pf.run(iter([type(d)(text=d.text, id=d.id, metadata=dict(d.metadata)) for d in docs]))}
    extracted = list(TrafilaturaExtract(timeout_s=5).run(iter(docs)))
    full_kept = set()
    for d in extracted:
        pairs = model.f.predict(d.text.replace("\n", " ") + "\n", 1, 0.0, "replace")
        if pairs and pairs[0][1] == "__label__en" and pairs[0][0] >= 0.65 and len(d.text.split()) >= 50:
            full_kept.add(d.id)
    assert len(full_kept) > 30
    assert full_kept <= pre_kept, full_kept - pre_kept
    assert len(pre_kept) < len(docs)  # and it does skip something


def test_english_menus_do_not_rescue_a_non_english_page(tmp_path):
    """A German article with an English navigation (short lines): trafilatura would extract German text, which
    the language stage drops, so the cascade must skip it; counting the menu lines as a chunk would keep it."""
    menu = "".join(f"<li><a href='/{i}'>{w}</a></li>" for i, w in enumerate(
        ["Home", "About us", "Contact us", "Log in", "Sign up now", "Our products", "Latest news", "Help center",
         "Privacy policy", "Terms of use", "Careers", "Shop online", "Customer service", "Gift cards"] * 3))
    de = ("<p>Der Ausschuss veröffentlichte am Montag seinen Jahresbericht über den öffentlichen Nahverkehr in der Region. "
          "Darin empfiehlt er häufigere Verbindungen am Abend und günstigere Fahrkarten für Studierende und Auszubildende.</p>")
    html = f"<html><body><nav><ul>{menu}</ul></nav><article>{de * 2}</article></body></html>"
    path = tmp_path / "menu.warc.gz"
    write_warc(str(path), [Page("http://e/de-with-english-menu", html.encode())])

    def docs():
        return ResponseCheck().run(make_reader(str(path)).run())

    assert list(LanguagePrefilter(("en",)).run(docs())) == []
    # the same page passes when every line may form a chunk (the menu alone reads as English)
    assert len(list(LanguagePrefilter(("en",), chunk_min_words=1).run(docs()))) == 1
    # and the full path indeed does not keep it as English
    from cuvee.filters.language import LanguageFilter

    full = list(LanguageFilter({"en": 0.65}).run(TrafilaturaExtract().run(docs())))
    assert full == []
