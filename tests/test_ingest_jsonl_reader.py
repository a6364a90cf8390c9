"""JSONL input: every line is a record that becomes a document or is counted (not a JSON object, not UTF-8,
no text), reading goes on after a bad line, and the documents are datatrove's own on real files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from datatrove.pipeline.readers import JsonlReader

from cuvee.pipeline.readers import PlannedJsonlReader
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
CURATED = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"


def docs_of(reader):
    return [(d.id, d.text, d.metadata, d.media) for d in reader.run()]


def rows_read(docs) -> list[int]:
    """Pops what cuvee adds to datatrove's metadata (``input_file``, ``input_row``) and gives the rows."""
    rows = []
    for _, _, meta, _ in docs:
        assert meta.pop("input_file") == meta["file_path"]
        rows.append(meta.pop("input_row"))
    return rows


def record_lines(body: bytes, text_key: str) -> list[int]:
    """The index of each line that holds a document (a second reading of the file: a record with text)."""
    return [i for i, line in enumerate(body.split(b"\n")) if line.strip() and json.loads(line).get(text_key)]


def counters(step):
    return {k: v.total for k, v in step.stats.stats.items()}


def test_real_file_gives_datatroves_documents_also_across_small_blocks(tmp_path):
    """The bundled WCXB file (real page texts with newlines, quotes and non-ASCII), and the same lines with
    CRLF endings, blank lines, no final newline and no ids, read in 4 KB blocks: lines longer than a block."""
    ours = PlannedJsonlReader(str(CURATED.parent), glob_pattern=CURATED.name, text_key="main_content")
    theirs = JsonlReader(str(CURATED.parent), glob_pattern=CURATED.name, text_key="main_content")
    a, b = docs_of(ours), docs_of(theirs)
    assert rows_read(a) == record_lines(gzip.decompress(CURATED.read_bytes()), "main_content")
    assert len(a) > 1000 and a == b

    rows = [json.loads(line) for line in gzip.open(CURATED, "rt")][:300]
    body = b"\r\n".join(json.dumps(r, ensure_ascii=False).encode() for r in rows[:150]) + b"\r\n\r\n  \n"
    body += b"\n".join(json.dumps(r, ensure_ascii=False).encode() for r in rows[150:])  # no final newline
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_bytes(body)
    small = PlannedJsonlReader(str(tmp_path / "in"), text_key="main_content")
    small.block_bytes = 4096
    assert max(len(line) for line in body.split(b"\n")) > 4096
    a = docs_of(small)
    b = docs_of(JsonlReader(str(tmp_path / "in"), text_key="main_content"))
    assert rows_read(a) == record_lines(body, "main_content")
    assert len(a) == 300 and a == b  # default ids (path/line) included: blank lines still count as lines
    assert counters(small).get("dropped", 0) == 0


def test_bad_lines_are_counted_and_reading_goes_on(tmp_path):
    good = [{"id": f"d{i}", "text": f"document number {i} with some text"} for i in range(6)]
    lines = [json.dumps(good[0]).encode(), b"{not json", json.dumps(good[1]).encode(),
             b'{"id": "u", "text": "caf\xe9 latin-1"}',  # not UTF-8: datatrove stopped the file here
             json.dumps(good[2]).encode(), b"[1, 2, 3]", json.dumps({"id": "e", "text": ""}).encode(),
             json.dumps(good[3]).encode(), b"", json.dumps(good[4]).encode(), json.dumps(good[5]).encode()]
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "x.jsonl.gz", "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    r = PlannedJsonlReader(str(tmp_path / "in"))
    got = [d.id for d in r.run()]
    assert got == [g["id"] for g in good]
    c = counters(r)
    assert c["dropped_invalid_json"] == 3 and c["dropped_no_text"] == 1 and c["dropped"] == 4
    assert c["total"] == 10 and c["documents"] == 6 and c["files_read"] == 1

    # through a run: records read = kept + dropped under named reasons, balanced
    stats = run_recipe({"name": "bad_lines", "run_dir": str(tmp_path / "run"),
                        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"}, "stages": [],
                        "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1}})
    acc = stats["accounting"]
    assert acc["records_read"] == 10 and acc["kept"] == 6 and acc["balanced"]
    assert acc["by_reason"] == {"reader/invalid_json": 3, "reader/no_text": 1}


def test_limit_stops_exactly_and_stays_balanced(tmp_path):
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": f"d{i}", "text": f"text {i}"}).encode() for i in range(50)]
    lines.insert(3, b"{broken")
    (tmp_path / "in" / "x.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    stats = run_recipe({"name": "limit", "run_dir": str(tmp_path / "run"),
                        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl", "limit": 10}, "stages": [],
                        "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1}})
    acc = stats["accounting"]
    assert acc["kept"] == 10 and acc["balanced"]


def test_parquet_rows_without_text_are_counted(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cuvee.pipeline.readers import PlannedParquetReader

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "text": ["one text", "", None, "four text"]}),
                   tmp_path / "in" / "x.parquet")
    r = PlannedParquetReader(str(tmp_path / "in"))
    assert [d.id for d in r.run()] == ["a", "d"]
    c = counters(r)
    assert c["dropped_no_text"] == 2 and c["total"] == 4 and c["documents"] == 2
