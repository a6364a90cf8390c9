"""Reader robustness and accounting on real Common Crawl samples and malformed fixtures."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from cuvee.pipeline.readers import CommonCrawlReader, make_reader, split_input_path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
FIX = REPO / "tests" / "fixtures" / "warc"
CC_WARC = SAMPLE / "CC-MAIN-2020-34-sample.warc.gz"
ALL_ARCHIVES = sorted(
    p for p in list(FIX.rglob("*")) + list(SAMPLE.glob("*.gz"))
    if p.is_file() and not p.name.startswith("LICENSE") and p.suffix not in (".txt", ".md")
)


def read(path, **kw):
    reader = make_reader(str(path), **kw)
    docs = list(reader.run())
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    return docs, stats


def balanced(stats) -> bool:
    dropped = sum(v for k, v in stats.items() if k.startswith("dropped_"))
    return stats.get("total", 0) == stats.get("forwarded", 0) + stats.get("dropped", 0) and dropped == stats.get("dropped", 0)


def warcio_records(path):
    """Independent reading with warcio: (type, headers, payload bytes) per record."""
    out = []
    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            out.append((rec.rec_type, rec.rec_headers, rec.content_stream().read()))
    return out


@pytest.mark.parametrize("path", ALL_ARCHIVES, ids=lambda p: p.name)
def test_every_fixture_is_read_and_balanced(path):
    docs, stats = read(path)
    assert balanced(stats), stats
    assert stats["total"] >= 1
    assert stats.get("forwarded", 0) == len(docs)


def test_cc_warc_counts_match_warcio_and_keep_cc_metadata():
    recs = warcio_records(CC_WARC)
    responses = [h for t, h, _ in recs if t == "response"]
    assert len(recs) == 50 and len(responses) == 16  # independent count
    docs, stats = read(CC_WARC)
    assert stats["total"] == 50 and stats["forwarded"] == 16
    assert stats["dropped_non_response_record"] == 34
    assert [d.metadata["url"] for d in docs] == [h.get_header("WARC-Target-URI") for h in responses]
    assert [d.id for d in docs] == [h.get_header("WARC-Record-ID") for h in responses]
    # CC's CLD2 guess, parsed independently from the metadata records
    cld2 = {}
    for t, h, body in recs:
        if t == "metadata":
            for line in body.decode().splitlines():
                if line.startswith("languages-cld2:"):
                    langs = json.loads(line.split(":", 1)[1])["languages"]
                    cld2[h.get_header("WARC-Concurrent-To")] = [x["code"] for x in langs]
    for d in docs:
        expected = [c for c in cld2[d.id] if c != "un"]
        assert d.metadata["cc_languages"].split(",") == expected
        assert d.metadata["cc_snapshot"] == "CC-MAIN-2020-34"
        assert d.metadata["http_status"] == 200
        assert d.metadata["date"].startswith("2020-08-08")
        assert d.text == "" and d.media and d.media[0].media_bytes  # raw bytes travel in media until response_check


def test_arc_files_match_source_counts():
    docs, stats = read(SAMPLE / "small-sample-1213893279526_0.arc.gz")
    # SOURCE.txt: 145 records (139 text/html, 6 PDF) + the filedesc header
    assert len(docs) == 145 and stats["dropped_non_response_record"] == 1 and balanced(stats)
    types = [d.metadata["content_type"].split(";")[0].strip().lower() for d in docs]
    assert types.count("application/pdf") == 6
    assert all(d.metadata["url"].startswith("http") for d in docs)
    assert docs[0].metadata["date"] == "2008-05-09T19:02:41Z"
    docs8, _ = read(SAMPLE / "small-sample-1262850551027_8.arc.gz")
    assert len(docs8) == 8


def test_arc_url_with_spaces_and_warcio_agreement():
    # warcio reads this small ARC: compare URL and payload with ours
    path = FIX / "warcio_fixtures" / "example.arc.gz"
    with open(path, "rb") as f:
        ref = [(r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read()) for r in ArchiveIterator(f, arc2warc=True) if r.rec_type == "response"]
    docs, stats = read(path)
    assert [(d.metadata["url"], d.media[0].media_bytes) for d in docs] == ref


def test_wet_conversion_records_are_text():
    path = FIX / "whirlwind.warc.wet.gz"
    ref = [b for t, _, b in warcio_records(path) if t == "conversion"]
    docs, stats = read(path)
    assert len(docs) == 1 and docs[0].text == ref[0].decode("utf-8")
    assert docs[0].metadata["warc_type"] == "conversion"
    assert docs[0].metadata["cc_languages"] == "es"  # WARC-Identified-Content-Language: spa
    assert docs[0].metadata["cc_snapshot"] == "CC-MAIN-2024-22"


@pytest.mark.parametrize("fraction", [0.2, 0.45, 0.7, 0.95])
def test_truncated_gzip_counts_one_truncation(tmp_path, fraction):
    data = CC_WARC.read_bytes()
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: int(len(data) * fraction)])
    docs, stats = read(cut)
    assert balanced(stats), stats
    assert stats.get("dropped_truncated_file", 0) + stats.get("dropped_malformed_record", 0) == 1, stats
    assert len(docs) < 16
    full, _ = read(CC_WARC)
    assert [d.id for d in docs] == [d.id for d in full[: len(docs)]]  # what was read is intact


def test_truncated_plain_arc(tmp_path):
    data = gzip.decompress((SAMPLE / "small-sample-1262850551027_8.arc.gz").read_bytes())
    cut = tmp_path / "cut.arc"
    cut.write_bytes(data[: len(data) // 2])
    docs, stats = read(cut)
    assert balanced(stats) and stats["dropped_truncated_file"] == 1 and 0 < len(docs) < 8


def test_garbage_between_arc_records_is_resynchronised(tmp_path):
    data = gzip.decompress((SAMPLE / "small-sample-1262850551027_8.arc.gz").read_bytes())
    idx = data.index(b"\nhttp", 200)  # start of the 2nd record header
    bad = data[: idx + 1] + b"this is not an ARC header at all\x00\xff\n" + data[idx + 1 :]
    p = tmp_path / "bad.arc"
    p.write_bytes(bad)
    docs, stats = read(p)
    assert balanced(stats) and stats["dropped_malformed_record"] == 1 and len(docs) == 8


def test_corrupt_warc_header_is_counted(tmp_path):
    data = (FIX / "warcio_fixtures" / "example.warc").read_bytes()
    idx = data.index(b"WARC/1.0", 10)
    p = tmp_path / "broken.warc"
    p.write_bytes(data[:idx] + b"GARBAGE/9.9\r\nnot: a header\r\n\r\n" + data[idx + 8 :])
    docs, stats = read(p)
    assert balanced(stats) and stats.get("dropped_malformed_record", 0) >= 1


def test_record_size_cap():
    recs = warcio_records(CC_WARC)
    cap = 50_000
    too_big = sum(int(h.get_header("Content-Length")) > cap for _, h, _ in recs)
    assert too_big > 0
    docs, stats = read(CC_WARC, max_record_bytes=cap)
    assert stats["dropped_record_too_large"] == too_big and balanced(stats)
    assert all(len(d.media[0].media_bytes) <= cap for d in docs)


def test_limit_and_skip_keep_accounting_exact():
    docs, stats = read(CC_WARC, limit=5)
    assert len(docs) == 5 and balanced(stats)
    docs2, stats2 = read(CC_WARC, skip=3, limit=4)
    full, _ = read(CC_WARC)
    assert [d.id for d in docs2] == [d.id for d in full[3:7]]
    assert stats2["dropped_skipped"] == 3 and balanced(stats2)


def test_folder_input_shards_across_ranks_and_skips_non_archives(tmp_path):
    for p in SAMPLE.iterdir():
        shutil.copy(p, tmp_path / p.name)  # includes LICENSE/SOURCE files that must be ignored
    seen = []
    for rank in range(2):
        reader = CommonCrawlReader(str(tmp_path))
        docs = list(reader.run(rank=rank, world_size=2))
        seen.append({d.id for d in docs})
    assert not (seen[0] & seen[1])
    all_docs, _ = read(tmp_path)
    assert seen[0] | seen[1] == {d.id for d in all_docs}
    assert len(all_docs) == 16 + 1 + 145 + 8


def test_input_path_forms(tmp_path):
    assert split_input_path(str(CC_WARC)) == (str(SAMPLE), CC_WARC.name)
    assert split_input_path("s3://bucket/crawl/*.warc.gz") == ("s3://bucket/crawl", "*.warc.gz")
    assert split_input_path(str(SAMPLE)) == (str(SAMPLE), None)
    by_glob, _ = read(str(SAMPLE / "*.arc.gz"))
    assert len(by_glob) == 153
    by_url, stats = read("file://" + str(CC_WARC))
    assert len(by_url) == 16 and balanced(stats)


def test_bad_format_name_is_a_clear_error():
    with pytest.raises(ValueError, match="format"):
        make_reader(str(CC_WARC), fmt="html")


def test_reader_output_is_writable_without_raw_bytes(tmp_path):
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

    for writer_cls, suffix in ((JsonlWriter, ".jsonl.gz"), (ParquetWriter, ".parquet")):
        out = tmp_path / writer_cls.__name__
        w = writer_cls(str(out))
        list(w.run(make_reader(str(CC_WARC)).run()))
        files = list(out.glob("*" + suffix))
        assert files
        raw = gzip.decompress(files[0].read_bytes()) if suffix.endswith(".gz") else files[0].read_bytes()
        assert b"baidu-site-verification" not in raw  # HTML bytes are not written
