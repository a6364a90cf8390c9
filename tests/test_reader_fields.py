"""Table input whose fields have the wrong type: the record is dropped under a named reason, never the file,
and no non-string text reaches a writer."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuvee.pipeline.readers import PlannedJsonlReader, PlannedParquetReader
from cuvee.pipeline.runner import run_recipe


def counters(step):
    return {k: v.total for k, v in step.stats.stats.items()}


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


BAD_TEXTS = [["a", "list"], {"a": "mapping"}, 5, 2.5, True, False, 0]


def test_jsonl_text_that_is_not_a_string_is_a_counted_drop(tmp_path):
    rows = [{"id": "good0", "text": "first good text"}]
    rows += [{"id": f"bad{i}", "text": t} for i, t in enumerate(BAD_TEXTS)]
    rows += [{"id": "good1", "text": "second good text"}]
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    r = PlannedJsonlReader(str(tmp_path / "in"))
    docs = list(r.run())
    assert [d.id for d in docs] == ["good0", "good1"]
    assert all(type(d.text) is str for d in docs)
    c = counters(r)
    assert c["dropped_text_not_string"] == len(BAD_TEXTS) and c["dropped"] == len(BAD_TEXTS)
    assert c["total"] == len(rows) and c["files_read"] == 1 and "files_failed" not in c


@pytest.mark.parametrize("column", [
    pa.array([["a", "b"], ["c"]], pa.list_(pa.string())),
    pa.array([{"x": "a"}, {"x": "b"}], pa.struct([("x", pa.string())])),
    pa.array([1, 2], pa.int64()),
    pa.array([True, False], pa.bool_()),
    pa.array([b"bytes one", b"bytes two"], pa.binary()),
], ids=["list", "struct", "int", "bool", "binary"])
def test_parquet_text_column_of_another_type_is_a_counted_drop(tmp_path, column):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "text": column}), tmp_path / "in" / "bad.parquet")
    pq.write_table(pa.table({"id": ["c"], "text": ["a good text"]}), tmp_path / "in" / "good.parquet")
    r = PlannedParquetReader(str(tmp_path / "in"))
    assert [(d.id, d.text) for d in r.run()] == [("c", "a good text")]
    c = counters(r)
    assert c["dropped_text_not_string"] == 2 and c["total"] == 3 and c["files_read"] == 2


def test_a_run_over_bad_texts_keeps_only_string_text_and_balances(tmp_path):
    """Through ``cuvee run`` to Parquet: a number or bool text used to end the task with a traceback after the
    output file was started, a list text was written and counted as kept."""
    rows = [{"id": f"g{i}", "text": f"good text number {i}"} for i in range(5)]
    rows += [{"id": f"b{i}", "text": t} for i, t in enumerate(BAD_TEXTS)]
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    stats = run_recipe({"name": "bad_text", "run_dir": str(tmp_path / "run"),
                        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"}, "stages": [],
                        "output": {"format": "parquet"}, "executor": {"kind": "local", "tasks": 1}})
    acc = stats["accounting"]
    assert acc["balanced"] and acc["records_read"] == len(rows) and acc["kept"] == 5
    assert acc["by_reason"] == {"reader/text_not_string": len(BAD_TEXTS)}
    [out] = (tmp_path / "run" / "output").rglob("*.parquet")
    table = pq.read_table(out)
    assert table.schema.field("text").type == pa.string()
    assert table.column("id").to_pylist() == [f"g{i}" for i in range(5)]


MEDIA_OK = {"id": "m", "type": 0, "url": "http://x/img.png", "media_bytes": base64.b64encode(b"\x89PNG").decode()}


@pytest.mark.parametrize("media", [
    "not a list", {"id": "m"}, [1], [{"foo": 1}], [{"id": "m", "type": 0}],
    [MEDIA_OK | {"type": "image"}], [MEDIA_OK | {"media_bytes": 12}], [MEDIA_OK | {"media_bytes": "not base64!"}],
    [MEDIA_OK | {"offset": "3"}], [MEDIA_OK | {"metadata": [1]}],
], ids=["str", "dict", "int-entry", "unknown-key", "no-url", "type-str", "bytes-int", "bytes-not-b64",
        "offset-str", "metadata-list"])
def test_one_malformed_media_field_drops_that_record_not_the_file(tmp_path, media):
    rows = [{"id": f"d{i}", "text": f"document {i}"} for i in range(50)]
    rows.insert(25, {"id": "bad", "text": "a text with odd media", "media": media})
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    r = PlannedJsonlReader(str(tmp_path / "in"))
    docs = list(r.run())
    assert len(docs) == 50 and "bad" not in {d.id for d in docs}
    c = counters(r)
    assert c["dropped_malformed_media"] == 1 and c["total"] == 51 and c["files_read"] == 1


def test_well_formed_media_is_still_read_with_its_bytes(tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"id": "a", "text": "with media", "media": [MEDIA_OK]},
                                              {"id": "b", "text": "null media", "media": None}])
    [a, b] = list(PlannedJsonlReader(str(tmp_path / "in")).run())
    assert a.media[0].media_bytes == b"\x89PNG" and a.media[0].url == MEDIA_OK["url"] and b.media == []


def test_an_id_that_is_neither_string_nor_integer_is_a_counted_drop(tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"id": ["i"], "text": "list id"}, {"id": {"k": 1}, "text": "dict id"},
                                              {"id": 7, "text": "int id"}, {"id": "s", "text": "str id"}])
    r = PlannedJsonlReader(str(tmp_path / "in"))
    assert [d.text for d in r.run()] == ["int id", "str id"]
    assert counters(r)["dropped_malformed_id"] == 2
