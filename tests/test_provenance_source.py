"""Identity at the source: every output document names the archive, byte range, record id and payload digest of
the record it came from (WARC, WET, ARC; gzip one member per record, gzip'd whole, plain), or the file and row of a
JSONL / Parquet input; re-reading that one range (from disk, and through a real loopback HTTP server with Range
requests) and parsing it with warcio or a plain ARC parse gives back that record.

The expectation is independent of cuvee's reader: the range is fetched with ``open``/``urllib``, gzip members are
inflated with zlib, WARC records are parsed by warcio, ARC records by the few lines below, and the SHA-1 base32
payload digest is computed here."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import threading
import urllib.request
import zlib
from http.server import ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe
from tests.test_ingest_crawl import _RangeHandler

REPO = Path(__file__).resolve().parents[1]
SNAP = "CC-MAIN-2020-34"
SEGMENT = f"crawl-data/{SNAP}/segments/1596439735792.85/warc"
CC_SAMPLE = REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Path:
    """Common Crawl's layout holding the bundled files byte for byte, plus the CC sample plain and gzip'd whole."""
    root = tmp_path_factory.mktemp("crawl")
    seg = root / SEGMENT
    seg.mkdir(parents=True)
    plain = gzip.decompress(CC_SAMPLE.read_bytes())
    files = {
        "a-members.warc.gz": CC_SAMPLE.read_bytes(),  # one gzip member per record (Common Crawl)
        "b-whirlwind.warc.gz": (REPO / "data/sample/CC-MAIN-2024-22-whirlwind.warc.gz").read_bytes(),
        "c-plain.warc": plain,
        "d-whole.warc.gz": gzip.compress(plain, mtime=0),  # one member for the whole file
        "e-text.warc.wet.gz": (REPO / "tests/fixtures/warc/whirlwind.warc.wet.gz").read_bytes(),
        "f-legacy.arc.gz": (REPO / "data/sample/small-sample-1262850551027_8.arc.gz").read_bytes(),  # gzip'd whole
    }
    for name, data in files.items():
        (seg / name).write_bytes(data)
    listing = root / f"crawl-data/{SNAP}/warc.paths.gz"  # a snapshot listing is read as WARC: no ARC file in it
    listing.write_bytes(gzip.compress("".join(f"{SEGMENT}/{n}\n" for n in files if ".arc" not in n).encode(), mtime=0))
    return root


@pytest.fixture(scope="module")
def http_base(crawl):
    handler = type("H", (_RangeHandler,), {"root": crawl, "faults": {}, "ranged_gets": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _run(tmp_path, name: str, inp: dict, fmt: str) -> list:
    stats = run_recipe({"name": name, "run_dir": str(tmp_path / name), "input": inp,
                        "stages": [{"stage": "response_check"}], "output": {"format": fmt},
                        "executor": {"kind": "local", "tasks": 2, "workers": 1}})
    assert stats["accounting"]["balanced"]
    return list(iter_documents(stats["output"]["files"]))


def fetch(source: str, offset: int, length: int | None) -> bytes:
    """The recorded range, read without cuvee: a local file, or one HTTP Range request."""
    if source.startswith("http"):
        end = "" if length is None else str(offset + length - 1)
        req = urllib.request.Request(source, headers={"Range": f"bytes={offset}-{end}"})
        with urllib.request.urlopen(req) as r:
            assert r.status == 206
            return r.read()
    with open(source, "rb") as f:
        f.seek(offset)
        return f.read() if length is None else f.read(length)


def inflate(data: bytes) -> bytes:
    """Every gzip member of ``data``, one after another (a range may end inside the last one: what it gives)."""
    out = []
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(d.decompress(data))
        if not d.eof:
            break
        data = d.unused_data
    return b"".join(out)


def parse_arc(data: bytes) -> tuple[str, bytes]:
    """(URL, HTTP payload as stored) of the ARC record at the start of ``data``: 'URL IP DATE TYPE LENGTH' + block."""
    line, _, rest = data.partition(b"\n")
    fields = line.decode("latin-1").split(" ")
    block = rest[: int(fields[-1])]
    end = min((i + n for i, n in ((block.find(b"\r\n\r\n"), 4), (block.find(b"\n\n"), 2)) if i >= 0), default=len(block))
    return fields[0], block[end:]


def check_record(meta: dict) -> str:
    """Re-reads one document's record from its recorded range; returns the record's kind."""
    raw = fetch(meta["source_file"], meta["source_offset"], meta.get("source_length"))
    data = inflate(raw) if raw[:2] == b"\x1f\x8b" else raw
    data = data[meta.get("source_skip", 0):]
    if meta["source_file"].endswith(".arc.gz"):
        url, payload = parse_arc(data)
        assert url == meta["url"]
        assert sha1_b32(payload) == meta["payload_digest"]
        return "arc"
    rec = next(iter(ArchiveIterator(io.BytesIO(data))))
    assert rec.rec_headers.get_header("WARC-Record-ID") == meta["warc_record_id"]
    payload = rec.raw_stream.read()  # after the HTTP headers warcio parsed: the payload as stored
    assert sha1_b32(payload) == meta["payload_digest"]
    if rec.rec_headers.get_header("WARC-Payload-Digest"):
        assert rec.rec_headers.get_header("WARC-Payload-Digest") == meta["payload_digest"]
    return rec.rec_type


ARCHIVES = {"a-members.warc.gz", "b-whirlwind.warc.gz", "c-plain.warc", "d-whole.warc.gz", "e-text.warc.wet.gz"}


def _check_all(docs: list, where: str, names: set[str]) -> None:
    kinds: dict[str, int] = {}
    for d in docs:
        assert d.metadata["source_file"].startswith(where), d.metadata["source_file"]
        kind = check_record(d.metadata)
        kinds[kind] = kinds.get(kind, 0) + 1
    # every shape of archive gave documents: the sample's 16 HTML responses in each of its three copies, ...
    assert {Path(d.metadata["source_file"]).name for d in docs} == names
    assert sum(n.startswith(("a-", "c-", "d-")) for n in (Path(d.metadata["source_file"]).name for d in docs)) == 48
    assert kinds["conversion"] == 1 and kinds.get("arc", 0) >= ("f-legacy.arc.gz" in names)
    # a record that is its own gzip member is exactly that member: nothing to skip
    assert all("source_skip" not in d.metadata for d in docs if "members" in d.metadata["source_file"])
    assert all(d.metadata.get("source_skip", 0) > 0 for d in docs if "whole" in d.metadata["source_file"])


def test_every_output_document_rereads_from_its_local_archive(crawl, tmp_path):
    docs = _run(tmp_path, "local", {"paths": [str(crawl / SEGMENT)]}, "parquet")  # typed struct round trip
    _check_all(docs, str(crawl / SEGMENT), ARCHIVES | {"f-legacy.arc.gz"})


def test_every_output_document_rereads_from_its_remote_archive(crawl, http_base, tmp_path):
    cc = {"snapshot": SNAP, "kind": "warc", "files": 1.0, "base_url": http_base,
          "paths_file": str(crawl / f"crawl-data/{SNAP}/warc.paths.gz")}
    docs = _run(tmp_path, "remote", {"common_crawl": cc}, "jsonl")
    _check_all(docs, http_base + SEGMENT, ARCHIVES)


def test_table_inputs_carry_file_and_row(tmp_path):
    """JSONL (blank, invalid and text-less lines in between) and Parquet (a null-text row): each document's
    input_file and input_row point at the row it was read from, read back here with json / pyarrow."""
    src = tmp_path / "in"
    src.mkdir()
    lines = [json.dumps({"id": "j0", "text": "first"}), "", "{not json", json.dumps({"id": "j3", "text": ""}),
             json.dumps({"id": "j4", "text": "fifth line", "metadata": {"source_file": "x.warc.gz"}}),
             json.dumps({"text": "no id"})]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.table({"id": ["p0", "p1", "p2"], "text": ["row zero", None, "row two"]}), tmp_path / "b.parquet")
    for fmt, path in (("jsonl", str(src)), ("parquet", str(tmp_path / "b.parquet"))):
        docs = _run(tmp_path, f"t_{fmt}", {"paths": [path], "format": fmt}, "jsonl")
        assert len(docs) == 3 if fmt == "jsonl" else 2
        for d in docs:
            m = d.metadata
            if fmt == "jsonl":
                row = json.loads(Path(m["input_file"]).read_text().split("\n")[m["input_row"]])
            else:
                row = pq.read_table(m["input_file"]).slice(m["input_row"], 1).to_pylist()[0]
            assert row["text"] == d.text
            assert row.get("id", d.id) == d.id
        if fmt == "jsonl":  # an earlier run's source identity is the record's own: kept as it was
            assert [d.metadata.get("source_file") for d in docs] == [None, "x.warc.gz", None]
