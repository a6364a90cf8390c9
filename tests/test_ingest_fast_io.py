"""The fast JSONL path (ISA-L gzip, the plain-record Document, batched ``doc_len``) gives what datatrove gives:
the same documents for every record shape, the same length statistics, the same handling of broken and
multi-member gzip; and JSONL written through ISA-L reads back with the standard library and datatrove."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from datatrove.pipeline.readers import JsonlReader

from cuvee.pipeline import fastgzip
from cuvee.pipeline.readers import PlannedJsonlReader
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
CURATED = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"

RECORDS = [
    {"id": "a", "text": "plain record", "source": "x", "added": "2026-01-01"},
    {"text": "no id: datatrove's path/line id"},
    {"id": None, "text": "an id that is null stays null"},
    {"id": "m", "text": "metadata mapping", "metadata": {"url": "https://e.org", "n": 3}, "extra": [1, 2]},
    {"id": "e", "text": "empty metadata", "metadata": {}},
    {"id": "n", "text": "null metadata", "metadata": None},
    {"id": "s", "text": "metadata as a JSON string", "metadata": "{\"k\": 1}"},
    {"id": "l", "text": "metadata as a list", "metadata": [1, 2]},
    {"id": "p", "text": "empty media", "media": []},
    {"id": "r", "text": "media present", "media": [{"id": "img", "type": 0, "url": "https://e.org/a.png", "media_bytes": None}]},
    {"id": "t", "text": ""},
    {"id": "u", "text": "key clash", "metadata": {"source": "inner"}, "source": "outer"},
]


def docs_of(reader):
    return [(d.id, d.text, d.metadata, d.media) for d in reader.run()]


def _write(path: Path, rows, opener=gzip.open):
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wb") as f:
        f.write(b"\n".join(json.dumps(r).encode() for r in rows) + b"\n")


@pytest.mark.parametrize("default_metadata", [None, {"source": "default", "batch": 7}])
def test_every_record_shape_gives_datatroves_document(tmp_path, default_metadata):
    _write(tmp_path / "in" / "x.jsonl.gz", RECORDS)
    ours = PlannedJsonlReader(str(tmp_path / "in"), default_metadata=default_metadata)
    theirs = JsonlReader(str(tmp_path / "in"), default_metadata=default_metadata)
    a, b = docs_of(ours), docs_of(theirs)
    read_at = [(m.pop("input_file"), m.pop("input_row")) for _, _, m, _ in a]  # what cuvee adds: file and row
    assert read_at == [(str(tmp_path / "in" / "x.jsonl.gz"), i) for i, r in enumerate(RECORDS) if r["text"]]
    assert len(a) == len(RECORDS) - 1 and a == b
    assert [d[0] for d in a][:3] == ["a", "x.jsonl.gz/1", None]


def test_null_media_is_no_media(tmp_path):
    """datatrove's own JSONL reader stops the file at ``"media": null``; cuvee reads it as no media."""
    _write(tmp_path / "in" / "x.jsonl.gz", [{"id": "q", "text": "null media", "media": None}, RECORDS[0]])
    docs = list(PlannedJsonlReader(str(tmp_path / "in")).run())
    assert [(d.id, d.media) for d in docs] == [("q", []), ("a", [])]


def test_a_custom_adapter_still_gets_every_record(tmp_path):
    """The fast path is only for datatrove's default adapter: a user's adapter sees each record."""
    _write(tmp_path / "in" / "x.jsonl.gz", RECORDS[:5])
    seen = []

    def adapter(self, data, path, id_in_file):
        seen.append(data["text"])
        return {"text": data["text"].upper(), "id": f"c{id_in_file}", "metadata": {"adapted": True}}

    docs = list(PlannedJsonlReader(str(tmp_path / "in"), adapter=adapter).run())
    assert len(seen) == 5 and [d.text for d in docs] == [r["text"].upper() for r in RECORDS[:5]]
    assert all(d.metadata["adapted"] is True and "extra" not in d.metadata for d in docs)


def test_doc_len_statistics_equal_per_document_updates(tmp_path):
    """Merged once per 1,024 documents and at the end: the same total, count, min, max and mean as
    datatrove's one update per document (2,600 real texts: two full batches and a remainder)."""
    texts = [json.loads(line)["main_content"] for line in gzip.open(CURATED, "rt")]
    texts = [t for t in texts if t]
    _write(tmp_path / "in" / "x.jsonl.gz", [{"id": f"d{i}", "text": texts[i % len(texts)][: 50 + i]}
                                            for i in range(2600)])
    ours, theirs = PlannedJsonlReader(str(tmp_path / "in")), JsonlReader(str(tmp_path / "in"))
    n = sum(1 for _ in ours.run())
    list(theirs.run())
    a, b = ours.stats.stats["doc_len"], theirs.stats.stats["doc_len"]
    assert n == a.n == b.n == 2600
    assert (a.total, a.min, a.max) == (b.total, b.min, b.max)
    assert a.mean == pytest.approx(b.mean, rel=1e-12) and a.variance == pytest.approx(b.variance, rel=1e-9)


def test_doc_len_is_merged_when_reading_stops_early(tmp_path):
    rows = [{"id": f"d{i}", "text": "x" * (i + 1)} for i in range(3000)]
    _write(tmp_path / "in" / "x.jsonl.gz", rows)
    r = PlannedJsonlReader(str(tmp_path / "in"))
    gen = r.run()
    got = [next(gen) for _ in range(1500)]
    gen.close()
    s = r.stats.stats["doc_len"]
    assert s.n == 1500 and s.total == sum(len(d.text) for d in got) and s.max == 1500


def test_multi_member_gzip_is_read_whole(tmp_path):
    rows = [{"id": f"d{i}", "text": f"member text {i}"} for i in range(40)]
    blob = b"".join(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rows[i:i + 10]))
                    for i in range(0, 40, 10))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl.gz").write_bytes(blob)
    assert [d.id for d in PlannedJsonlReader(str(tmp_path / "in")).run()] == [r["id"] for r in rows]


def test_truncated_gzip_keeps_what_was_read_and_counts_the_file_failed(tmp_path):
    rows = [{"id": f"d{i}", "text": f"text number {i} " + "filler " * 300} for i in range(2000)]
    blob = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl.gz").write_bytes(blob[: len(blob) * 2 // 3])
    r = PlannedJsonlReader(str(tmp_path / "in"))
    r.block_bytes = 1 << 16
    ids = [d.id for d in r.run()]
    c = {k: v.total for k, v in r.stats.stats.items()}
    assert 0 < len(ids) < 2000 and ids == [f"d{i}" for i in range(len(ids))]
    assert c["files_failed"] == 1 and "files_read" not in c


def test_a_corrupt_gzip_is_counted_failed_not_read_as_text(tmp_path):
    (tmp_path / "in").mkdir()
    blob = bytearray(gzip.compress(b"".join(json.dumps({"id": f"d{i}", "text": "t" * 50}).encode() + b"\n"
                                            for i in range(100))))
    blob[20:40] = bytes(20)  # deflate data overwritten
    (tmp_path / "in" / "x.jsonl.gz").write_bytes(bytes(blob))
    r = PlannedJsonlReader(str(tmp_path / "in"))
    list(r.run())
    assert {k: v.total for k, v in r.stats.stats.items()}["files_failed"] == 1


def test_written_jsonl_reads_back_with_gzip_zlib_and_datatrove(tmp_path):
    """A run's ``.jsonl.gz`` (ISA-L level 3 when available) is ordinary gzip: the standard library, zlib and
    datatrove's reader give back every document; identical runs write identical bytes."""
    rows = [json.loads(line) for line in gzip.open(CURATED, "rt")][:400]
    _write(tmp_path / "in" / "x.jsonl.gz", [{"id": r.get("id", str(i)), "text": r["main_content"]}
                                            for i, r in enumerate(rows)])
    outs = []
    for name in ("a", "b"):
        run_recipe({"name": "w", "run_dir": str(tmp_path / name), "input": {"paths": [str(tmp_path / "in")],
                    "format": "jsonl"}, "stages": [], "output": {"format": "jsonl"},
                    "executor": {"kind": "local", "tasks": 1}})
        outs.append(sorted((tmp_path / name / "output").rglob("*.jsonl.gz")))
    assert len(outs[0]) == 1
    data = outs[0][0].read_bytes()
    assert data == outs[1][0].read_bytes()
    texts = [json.loads(line)["text"] for line in gzip.decompress(data).splitlines()]
    assert texts == [r["main_content"] for r in rows]
    assert zlib.decompress(data, 31) == gzip.decompress(data)
    back = [d.text for d in JsonlReader(str(outs[0][0].parent)).run()]
    assert back == texts
    if fastgzip._igzip is not None:
        assert fastgzip.WRITE_LEVEL == 3 and fastgzip.GzipFile.__module__.startswith("isal")
