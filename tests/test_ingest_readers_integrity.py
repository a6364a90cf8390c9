"""Record-exact accounting of the Common Crawl readers on crafted broken files (WARC, WET, ARC; plain and gzip).

Every file here is built from bytes in the test, so each case knows exactly how many records it holds, which
of them are documents and which single drop reason the damage must produce. For each case: the exact
``total``, ``forwarded`` and ``dropped_<reason>`` counters, the per-file counters, and that every kept
document is complete (each payload ends with its own ``END<n>.`` marker).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from cuvee.pipeline.readers import (
    CommonCrawlReader,
    PlannedJsonlReader,
    PlannedParquetReader,
    plan_input_files,
    split_input_path,
)

# ------------------------------------------------------------------------------------ builders


def body(i: int, n_words: int = 30) -> bytes:
    """A payload whose end is recognisable: a cut document loses its ``END<i>.`` marker."""
    return (" ".join(f"word{i}x{k}" for k in range(n_words)) + f" END{i}.").encode()


def warc_record(rtype: str, payload: bytes, rid: str, url: str = "", extra: dict | None = None,
                content_length: int | None = None, version: bytes = b"WARC/1.0") -> bytes:
    lines = [version, b"WARC-Type: " + rtype.encode(), b"WARC-Date: 2024-05-20T10:00:00Z",
             b"WARC-Record-ID: " + rid.encode()]
    if url:
        lines.append(b"WARC-Target-URI: " + url.encode())
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}".encode())
    n = len(payload) if content_length is None else content_length
    lines.append(b"Content-Length: " + str(n).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload + b"\r\n\r\n"


def http(payload: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + payload


def cc_warc(n: int = 5) -> tuple[list[bytes], list[int]]:
    """CC-style WARC: warcinfo + n x (request, response, metadata). Returns (records, indexes of responses)."""
    recs = [warc_record("warcinfo", b"isPartOf: CC-MAIN-2024-22\r\n", "<urn:uuid:info>",
                        extra={"Content-Type": "application/warc-fields"})]
    responses = []
    for i in range(n):
        url = f"http://example.com/{i}"
        rid = f"<urn:uuid:resp-{i}>"
        recs.append(warc_record("request", b"GET /%d HTTP/1.1\r\nHost: example.com\r\n\r\n" % i, f"<urn:uuid:req-{i}>", url,
                                extra={"Content-Type": "application/http; msgtype=request"}))
        responses.append(len(recs))
        recs.append(warc_record("response", http(body(i)), rid, url,
                                extra={"Content-Type": "application/http; msgtype=response"}))
        meta = b'languages-cld2: {"reliable":true,"languages":[{"code":"en","code-iso-639-3":"eng","score":99}]}\r\n'
        recs.append(warc_record("metadata", meta, f"<urn:uuid:meta-{i}>", url,
                                extra={"WARC-Concurrent-To": rid, "Content-Type": "application/warc-fields"}))
    return recs, responses


def wet(n: int = 13) -> list[bytes]:
    """WET: warcinfo + n conversion records (14 records by default, as in the user's report)."""
    recs = [warc_record("warcinfo", b"isPartOf: CC-MAIN-2024-22\r\n", "<urn:uuid:info>")]
    for i in range(n):
        recs.append(warc_record("conversion", body(i), f"<urn:uuid:conv-{i}>", f"http://example.com/{i}",
                                extra={"Content-Type": "text/plain", "WARC-Identified-Content-Language": "eng"}))
    return recs


def arc(n: int = 8) -> list[bytes]:
    """ARC v1: filedesc header record + n HTTP records."""
    desc = b"1 0 Common Crawl\nURL IP-address Archive-date Content-type Archive-length\n"
    recs = [b"filedesc://x.arc 0.0.0.0 20080509190241 text/plain %d\n" % len(desc) + desc + b"\n"]
    for i in range(n):
        block = http(body(i))
        recs.append(b"http://example.com/%d 1.2.3.4 20080509190241 text/html %d\n" % (i, len(block)) + block + b"\n")
    return recs


def join(recs: list[bytes], gz: bool) -> bytes:
    """Plain: concatenated records. gz: one gzip member per record, as Common Crawl writes them."""
    return b"".join(gzip.compress(r, mtime=0) for r in recs) if gz else b"".join(recs)


def read_file(tmp_path: Path, name: str, data: bytes, **kw):
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)
    reader = CommonCrawlReader(str(folder), glob_pattern=name, **kw)
    docs = list(reader.run(rank=0, world_size=1))
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    return docs, stats


DOC_COUNTERS = ("total", "forwarded", "dropped")
FILE_COUNTERS = ("files_read", "files_failed", "files_limited")


def check(stats: dict, docs: list, total: int, forwarded: int, drops: dict, files: dict | None = None):
    got_drops = {k[len("dropped_"):]: v for k, v in stats.items() if k.startswith("dropped_")}
    assert (stats.get("total", 0), stats.get("forwarded", 0), got_drops) == (total, forwarded, drops), stats
    assert stats.get("dropped", 0) == sum(drops.values())
    assert len(docs) == forwarded
    files = files or {"files_read": 1}
    assert {k: stats[k] for k in FILE_COUNTERS if k in stats} == files, stats
    for d in docs:  # nothing kept is cut
        payload = d.text if d.text else d.media[0].media_bytes.decode()
        i = int(payload.split("word", 1)[1].split("x", 1)[0])
        assert payload.endswith(f"END{i}."), payload[-60:]


KINDS = ["warc", "warc.gz", "wet", "wet.gz"]


def build(kind: str):
    """(records, number of documents, index of a document record to damage) for a kind."""
    if kind.startswith("wet"):
        return wet(), 13, 5
    recs, responses = cc_warc()
    return recs, 5, responses[2]


# -------------------------------------------------------------------------------- clean files


@pytest.mark.parametrize("kind", KINDS)
def test_clean_file_counts_each_record_once(tmp_path, kind):
    recs, ndocs, _ = build(kind)
    docs, stats = read_file(tmp_path, f"x.{kind}", join(recs, kind.endswith(".gz")))
    check(stats, docs, len(recs), ndocs, {"non_response_record": len(recs) - ndocs})


@pytest.mark.parametrize("gz", [False, True])
def test_clean_arc(tmp_path, gz):
    recs = arc()
    docs, stats = read_file(tmp_path, "x.arc.gz" if gz else "x.arc", join(recs, gz))
    check(stats, docs, 9, 8, {"non_response_record": 1})


# ------------------------------------------------------------------------------ broken headers

BROKEN_HEADERS = {
    # header line without a colon and no Content-Length: FastWARC used to yield it as an 'unknown' record, then
    # choke on its body: two or more counts for one record (the user's 14-record WET reporting 20)
    "no_colon_no_length": lambda r: r.replace(b"WARC-Type: ", b"WARC-Type ").replace(b"Content-Length: ", b"Content-Lenght "),
    "bad_length": lambda r: r.replace(b"Content-Length: ", b"Content-Length: x"),
    "bad_version_line": lambda r: r.replace(b"WARC/1.0", b"WARX/1.0", 1),
    "binary_garbage_header": lambda r: r.replace(b"WARC-Date", b"\x00\xff\xfe\x01", 1).replace(b"Content-Length: ", b"Content-Length\x00"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", sorted(BROKEN_HEADERS))
def test_broken_header_is_one_malformed_record(tmp_path, kind, how):
    recs, ndocs, victim = build(kind)
    recs[victim] = BROKEN_HEADERS[how](recs[victim])
    docs, stats = read_file(tmp_path, f"x.{kind}", join(recs, kind.endswith(".gz")))
    check(stats, docs, len(recs), ndocs - 1, {"non_response_record": len(recs) - ndocs, "malformed_record": 1})


def test_user_report_14_record_wet_with_three_broken_headers(tmp_path):
    recs = wet()
    assert len(recs) == 14
    for i in (3, 7, 10):
        recs[i] = BROKEN_HEADERS["no_colon_no_length"](recs[i])
    for gz in (False, True):
        docs, stats = read_file(tmp_path, f"u{gz:d}.wet" + (".gz" if gz else ""), join(recs, gz))
        check(stats, docs, 14, 10, {"non_response_record": 1, "malformed_record": 3})


def test_broken_arc_header(tmp_path):
    for gz in (False, True):
        recs = arc()
        recs[4] = recs[4].replace(b" 1.2.3.4 20080509190241", b" 1.2.3.4 notadate", 1)
        docs, stats = read_file(tmp_path, f"b{gz:d}.arc" + (".gz" if gz else ""), join(recs, gz))
        check(stats, docs, 9, 7, {"non_response_record": 1, "malformed_record": 1})


# ------------------------------------------------------------------------- garbage between records

GARBAGE = b"this is not a record\x00\xff\xfe at all\r\nnor: this\r\n\r\nWARC no\r\n"


@pytest.mark.parametrize("kind", KINDS)
def test_garbage_between_records_is_one_malformed_region(tmp_path, kind):
    recs, ndocs, victim = build(kind)
    gz = kind.endswith(".gz")
    data = join(recs[:victim], gz) + GARBAGE + join(recs[victim:], gz)
    docs, stats = read_file(tmp_path, f"x.{kind}", data)
    check(stats, docs, len(recs) + 1, ndocs, {"non_response_record": len(recs) - ndocs, "malformed_record": 1})


@pytest.mark.parametrize("kind", ["warc.gz", "wet.gz"])
def test_gzip_member_holding_garbage(tmp_path, kind):
    recs, ndocs, victim = build(kind)
    data = join(recs[:victim], True) + gzip.compress(GARBAGE * 3) + join(recs[victim:], True)
    docs, stats = read_file(tmp_path, f"x.{kind}", data)
    check(stats, docs, len(recs) + 1, ndocs, {"non_response_record": len(recs) - ndocs, "malformed_record": 1})


@pytest.mark.parametrize("gz", [False, True])
def test_garbage_between_arc_records(tmp_path, gz):
    recs = arc()
    data = join(recs[:3], gz) + b"garbage line \x00\xff\nanother one\n" + join(recs[3:], gz)
    docs, stats = read_file(tmp_path, "g.arc.gz" if gz else "g.arc", data)
    check(stats, docs, 10, 8, {"non_response_record": 1, "malformed_record": 1})


# --------------------------------------------------------------------------- truncated file


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["payload", "header"])
def test_file_cut_mid_record(tmp_path, kind, where):
    recs, ndocs, victim = build(kind)
    gz = kind.endswith(".gz")
    cut_at = len(recs[victim]) - 30 if where == "payload" else 20
    if gz:  # the victim's member is cut: its compressed bytes end early
        data = join(recs[:victim], True) + gzip.compress(recs[victim], mtime=0)[: cut_at // 4]
    else:
        data = join(recs[:victim], False) + recs[victim][:cut_at]
    docs, stats = read_file(tmp_path, f"x.{kind}", data)
    before = recs[:victim]
    docs_before = sum(b"WARC-Type: response" in r or b"WARC-Type: conversion" in r for r in before)
    check(stats, docs, victim + 1, docs_before,
          {"non_response_record": victim - docs_before, "truncated_file": 1}, {"files_failed": 1})


@pytest.mark.parametrize("gz", [False, True])
def test_arc_cut_mid_record(tmp_path, gz):
    recs = arc()
    if gz:
        data = join(recs[:5], True) + gzip.compress(recs[5], mtime=0)[:-40]
    else:
        data = join(recs[:5], False) + recs[5][:-40]
    docs, stats = read_file(tmp_path, "c.arc.gz" if gz else "c.arc", data)
    check(stats, docs, 6, 4, {"non_response_record": 1, "truncated_file": 1}, {"files_failed": 1})


# ------------------------------------------------------------------------- Content-Length mismatch


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("delta", [-17, -1000, 25, 2000, 10_000_000_000])
def test_wrong_content_length_is_counted_not_cut(tmp_path, kind, delta):
    recs, ndocs, victim = build(kind)
    header, sep, rest = recs[victim].partition(b"\r\n\r\n")
    actual = len(rest) - 4
    wrong = max(1, actual + delta)
    recs[victim] = header.replace(b"Content-Length: %d" % actual, b"Content-Length: %d" % wrong) + sep + rest
    docs, stats = read_file(tmp_path, f"x.{kind}", join(recs, kind.endswith(".gz")))
    check(stats, docs, len(recs), ndocs - 1, {"non_response_record": len(recs) - ndocs, "length_mismatch": 1})


@pytest.mark.parametrize("kind", KINDS)
def test_overlong_last_record(tmp_path, kind):
    recs, ndocs, _ = build(kind)
    header, sep, rest = recs[-1].partition(b"\r\n\r\n")
    actual = len(rest) - 4
    recs[-1] = header.replace(b"Content-Length: %d" % actual, b"Content-Length: %d" % (actual + 500)) + sep + rest
    gz = kind.endswith(".gz")
    docs, stats = read_file(tmp_path, f"x.{kind}", join(recs, gz))
    last_is_doc = kind.startswith("wet")
    if gz:  # the member ended cleanly: the file is whole, the record's length is wrong
        reason, files = "length_mismatch", {"files_read": 1}
    else:  # plain: indistinguishable from a file cut inside its last record
        reason, files = "truncated_file", {"files_failed": 1}
    check(stats, docs, len(recs), ndocs - last_is_doc,
          {"non_response_record": len(recs) - ndocs - (not last_is_doc), reason: 1}, files)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("delta", [-20, 30])
def test_arc_wrong_length(tmp_path, gz, delta):
    recs = arc()
    head, nl, block = recs[4].partition(b"\n")
    n = int(head.rsplit(b" ", 1)[1])
    recs[4] = head.rsplit(b" ", 1)[0] + b" %d" % (n + delta) + nl + block
    docs, stats = read_file(tmp_path, "l.arc.gz" if gz else "l.arc", join(recs, gz))
    check(stats, docs, 9, 7, {"non_response_record": 1, "length_mismatch": 1})


# ----------------------------------------------------------------------------- corrupt gzip member


@pytest.mark.parametrize("kind", ["warc.gz", "wet.gz"])
@pytest.mark.parametrize("where", [0.3, 0.6, 0.95])
def test_corrupt_gzip_member_counts_its_record_once(tmp_path, kind, where):
    recs, ndocs, victim = build(kind)
    member = bytearray(gzip.compress(recs[victim], mtime=0))
    at = max(12, int(len(member) * where))
    member[at: at + 6] = b"\xde\xad\xbe\xef\x00\xff"
    data = join(recs[:victim], True) + bytes(member) + join(recs[victim + 1:], True)
    docs, stats = read_file(tmp_path, f"x.{kind}", data)
    check(stats, docs, len(recs), ndocs - 1, {"non_response_record": len(recs) - ndocs, "corrupt_gzip": 1})


def test_corrupt_gzip_arc_member(tmp_path):
    recs = arc()
    member = bytearray(gzip.compress(recs[4], mtime=0))
    member[len(member) // 2: len(member) // 2 + 6] = b"\xde\xad\xbe\xef\x00\xff"
    data = join(recs[:4], True) + bytes(member) + join(recs[5:], True)
    docs, stats = read_file(tmp_path, "z.arc.gz", data)
    check(stats, docs, 9, 7, {"non_response_record": 1, "corrupt_gzip": 1})


def test_corrupt_last_gzip_member_fails_the_file(tmp_path):
    recs, ndocs, _ = build("wet.gz")
    member = bytearray(gzip.compress(recs[-1], mtime=0))
    member[len(member) // 2: len(member) // 2 + 6] = b"\xde\xad\xbe\xef\x00\xff"
    docs, stats = read_file(tmp_path, "t.wet.gz", join(recs[:-1], True) + bytes(member))
    check(stats, docs, 14, 12, {"non_response_record": 1, "corrupt_gzip": 1}, {"files_read": 1})


# ------------------------------------------------------------------------------ per-file counters


def _folder_of(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "many"
    folder.mkdir()
    for k in range(n):
        (folder / f"f{k}.wet.gz").write_bytes(join(wet(3), True))  # 3 documents each
    (folder / "README.txt").write_text("not an archive")
    return folder


def test_file_counters_with_limit_and_failures(tmp_path):
    folder = _folder_of(tmp_path, 5)
    (folder / "f1.wet.gz").write_bytes(join(wet(3), True)[:-30])  # cut: fails
    reader = CommonCrawlReader(str(folder))
    docs = list(reader.run())
    s = {k: v.total for k, v in reader.stats.stats.items()}
    assert (s["files_read"], s.get("files_failed"), s.get("files_limited", 0)) == (4, 1, 0)
    # limit inside the 2nd file: the 2nd is 'limited', and so are the three files never opened
    reader = CommonCrawlReader(str(folder), limit=4)
    docs = list(reader.run())
    s = {k: v.total for k, v in reader.stats.stats.items()}
    assert len(docs) == 4
    assert (s.get("files_read"), s.get("files_failed", 0), s["files_limited"]) == (1, 0, 4)
    # limit reached on a file's last document: the reader stops without looking further, so 'limited'
    reader = CommonCrawlReader(str(folder), limit=3)
    list(reader.run())
    s = {k: v.total for k, v in reader.stats.stats.items()}
    assert (s.get("files_read", 0), s["files_limited"]) == (0, 5)


def test_unopenable_file_is_counted_not_fatal(tmp_path, monkeypatch):
    folder = _folder_of(tmp_path, 3)
    reader = CommonCrawlReader(str(folder))
    real_open = reader.data_folder.open

    def flaky_open(path, *a, **kw):
        if path.endswith("f1.wet.gz"):
            raise PermissionError("denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(reader.data_folder, "open", flaky_open)
    docs = list(reader.run())
    s = {k: v.total for k, v in reader.stats.stats.items()}
    assert len(docs) == 6 and (s["files_read"], s["files_failed"]) == (2, 1)
    assert s["total"] == s["forwarded"] + s["dropped"]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_plan_matches_the_shards_read(tmp_path, world_size):
    folder = _folder_of(tmp_path, 5)
    for spec in (str(folder), str(folder / "*.wet.gz"), str(folder / "f3.wet.gz"), "file://" + str(folder)):
        plan = plan_input_files(spec, "auto")
        assert all(p.endswith(".wet.gz") for p in plan)
        assert len(plan) == (1 if spec.endswith("f3.wet.gz") else 5)
        for rank in range(world_size):
            reader = CommonCrawlReader(*split_input_path(spec))
            files = reader._shard(rank, world_size)
            assert [reader.data_folder.resolve_paths(f) for f in files] == plan[rank::world_size]
            list(reader.run(rank=rank, world_size=world_size))
            s = {k: v.total for k, v in reader.stats.stats.items()}
            assert s.get("files_read", 0) == len(plan[rank::world_size])


def test_planned_jsonl_and_parquet_readers(tmp_path):
    from datatrove.data import Document
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

    for fmt, writer_cls, cls in (("jsonl", JsonlWriter, PlannedJsonlReader), ("parquet", ParquetWriter, PlannedParquetReader)):
        out = tmp_path / fmt
        for rank in range(3):
            w = writer_cls(str(out))
            docs = [Document(text=f"doc {rank} {k}", id=f"{rank}-{k}") for k in range(4)]
            list(w.run(iter(docs), rank=rank, world_size=3))
            w.close()
        plan = plan_input_files(str(out), fmt)
        assert len(plan) == 3
        for rank in range(2):
            folder, pattern = split_input_path(str(out))
            reader = cls(folder, glob_pattern=pattern)
            docs = list(reader.run(rank=rank, world_size=2))
            s = {k: v.total for k, v in reader.stats.stats.items()}
            assert s["files_read"] == len(plan[rank::2]) and len(docs) == 4 * len(plan[rank::2])
        reader = cls(str(out), glob_pattern=None, limit=5)
        assert len(list(reader.run())) == 5
        s = {k: v.total for k, v in reader.stats.stats.items()}
        assert (s["files_read"], s["files_limited"]) == (1, 2)


def test_planned_readers_give_datatrove_documents(tmp_path):
    """The planned readers resolve each file's path once; documents (text, id, metadata with file_path) are
    exactly what datatrove's own readers give, across several files."""
    from datatrove.data import Document
    from datatrove.pipeline.readers import JsonlReader, ParquetReader
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

    for fmt, writer_cls, ours, theirs in (("jsonl", JsonlWriter, PlannedJsonlReader, JsonlReader),
                                          ("parquet", ParquetWriter, PlannedParquetReader, ParquetReader)):
        out = tmp_path / fmt
        for rank in range(3):
            w = writer_cls(str(out))
            docs = [Document(text=f"doc {rank} {k}", id=f"{rank}-{k}", metadata={"url": f"u{k}", "n": k})
                    for k in range(4)]
            list(w.run(iter(docs), rank=rank, world_size=3))
            w.close()
        got = [(d.text, d.id, d.metadata) for d in ours(str(out)).run()]
        want = [(d.text, d.id, d.metadata) for d in theirs(str(out)).run()]
        # cuvee adds where each document was read: its file (as datatrove's file_path) and its row in it
        read_at = [(m.pop("input_file"), m.pop("input_row")) for _, _, m in got]
        assert read_at == [(m["file_path"], int(doc_id.split("-")[1])) for _, doc_id, m in want]
        assert len(got) == 12 and got == want
        assert len({m["file_path"] for _, _, m in got}) == 3
