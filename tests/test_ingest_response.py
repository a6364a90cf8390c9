"""response_check: status / content-type filtering and charset detection on real encoded bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.stages.response import ResponseCheck, decode_html

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _warcgen import Page, write_warc

FRENCH = "Les élèves ont reçu un « cadeau » spécial : café, crème brûlée et œufs — voilà tout."
JAPANESE = "日本語の文章です。東京は日本の首都であり、多くの人々が住んでいます。今日はとても良い天気ですね。"
RUSSIAN = "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва - столица России."


def html(body: str, head: str = "") -> str:
    return f"<html><head>{head}<title>t</title></head><body><article><p>{body}</p></article></body></html>"


def run_pages(tmp_path, pages):
    path = tmp_path / "t.warc.gz"
    write_warc(str(path), pages)
    rc = ResponseCheck()
    docs = list(rc.run(make_reader(str(path)).run()))
    stats = {k: v.total for k, v in rc.stats.stats.items()}
    return {d.metadata["url"]: d for d in docs}, stats


def test_charset_from_header_meta_and_bytes(tmp_path):
    pages = [
        # header only (cp1252 bytes, not valid UTF-8)
        Page("http://a/header", html(FRENCH).encode("cp1252"), content_type="text/html; charset=windows-1252"),
        # meta charset only
        Page("http://a/meta", html(JAPANESE, '<meta charset="shift_jis">').encode("shift_jis"), content_type="text/html"),
        # http-equiv meta
        Page("http://a/equiv", html(RUSSIAN, '<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">').encode("koi8_r"), content_type="text/html"),
        # nothing declared: byte detection
        Page("http://a/bytes", html(JAPANESE * 3).encode("shift_jis"), content_type="text/html"),
        Page("http://a/bytes-ru", html(RUSSIAN * 3).encode("cp1251"), content_type="text/html"),
        # the header lies (says utf-8, bytes are cp1252), the meta tells the truth
        Page("http://a/lying-header", html(FRENCH, '<meta charset="windows-1252">').encode("cp1252"), content_type="text/html; charset=utf-8"),
        # ISO-8859-1 label decodes as windows-1252 (WHATWG): curly quotes survive
        Page("http://a/latin1", html("“quoted” text").encode("cp1252"), content_type="text/html; charset=ISO-8859-1"),
        # UTF-8 with a BOM
        Page("http://a/bom", b"\xef\xbb\xbf" + html(FRENCH).encode("utf-8"), content_type="text/html"),
    ]
    docs, stats = run_pages(tmp_path, pages)
    assert stats["forwarded"] == len(pages)
    expect = {
        "http://a/header": (FRENCH, "header"), "http://a/meta": (JAPANESE, "meta"), "http://a/equiv": (RUSSIAN, "meta"),
        "http://a/bytes": (JAPANESE, "detected"), "http://a/bytes-ru": (RUSSIAN, "detected"),
        "http://a/lying-header": (FRENCH, "meta"), "http://a/latin1": ("“quoted” text", "header"), "http://a/bom": (FRENCH, "bom"),
    }
    for url, (text, source) in expect.items():
        d = docs[url]
        assert text in d.text, (url, d.text[:200], d.metadata)
        assert d.metadata["charset_source"] == source, (url, d.metadata)
        assert not d.media  # raw payload removed


def test_drops_are_named(tmp_path):
    pages = [
        Page("http://a/ok", html("fine").encode()),
        Page("http://a/404", html("missing").encode(), status=404),
        Page("http://a/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, content_type="image/png"),
        Page("http://a/pdf-as-html", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj", content_type="text/html"),
        Page("http://a/json", b'{"a": 1}', content_type="application/json"),
        Page("http://a/empty", b"", content_type="text/html"),
    ]
    docs, stats = run_pages(tmp_path, pages)
    assert list(docs) == ["http://a/ok"]
    assert stats["dropped_http_status"] == 1
    assert stats["dropped_content_type"] == 2  # png (declared) and json
    assert stats["dropped_binary"] == 1
    assert stats["dropped_empty"] == 1
    assert stats["total"] == stats["forwarded"] + stats["dropped"]


def test_statuses_are_configurable(tmp_path):
    path = tmp_path / "t.warc.gz"
    write_warc(str(path), [Page("http://a/404", html("x").encode(), status=404)])
    rc = ResponseCheck(statuses=(200, 404))
    assert len(list(rc.run(make_reader(str(path)).run()))) == 1


def test_real_cc_pages_decode_like_common_crawl():
    """CC's own metadata records carry the charset CC detected; ours must agree on every page."""
    rc = ResponseCheck()
    docs = list(rc.run(make_reader(str(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz")).run()))
    assert len(docs) == 16
    import codecs

    from resiliparse.parse.encoding import map_encoding_to_html5

    for d in docs:
        cc = codecs.lookup(map_encoding_to_html5(d.metadata["cc_charset"])).name
        ours = codecs.lookup(d.metadata["charset"]).name
        assert ours.replace("-sig", "") == cc, d.metadata
        assert "\ufffd" not in d.text[:20000] or d.metadata["charset_source"] == "detected"


def test_arc_pdfs_are_dropped_and_documents_writable(tmp_path):
    from datatrove.pipeline.writers import ParquetWriter

    rc = ResponseCheck()
    w = ParquetWriter(str(tmp_path / "out"))
    list(w.run(rc.run(make_reader(str(REPO / "data/sample/small-sample-1213893279526_0.arc.gz")).run())))
    stats = {k: v.total for k, v in rc.stats.stats.items()}
    assert stats["dropped_content_type"] == 6  # the 6 PDFs of SOURCE.txt (application/pdf)
    assert stats["total"] == 145 == stats["forwarded"] + stats["dropped"]
    import pyarrow.parquet as pq

    t = pq.read_table(next((tmp_path / "out").glob("*.parquet")))
    assert t.num_rows == stats["forwarded"]
    assert "media" not in t.column_names or all(not m for m in t.column("media").to_pylist())


@pytest.mark.parametrize("enc", ["utf-8", "cp1252", "shift_jis", "gb18030", "euc_kr", "cp1251"])
def test_decode_html_roundtrip_with_header(enc):
    text = {"utf-8": FRENCH + JAPANESE, "cp1252": FRENCH, "shift_jis": JAPANESE, "gb18030": "中文网页内容测试，这是一个简单的例子。",
            "euc_kr": "한국어 텍스트입니다. 서울은 대한민국의 수도입니다.", "cp1251": RUSSIAN}[enc]
    out, codec, source = decode_html(html(text).encode(enc), f"text/html; charset={enc}")
    assert text in out and source == "header"
