"""Outputs that plug in: Parquet ``metadata`` is a typed struct that pyarrow and `datasets` filter on
directly, with one schema for every file of a run; datatrove's and cuvee's readers read it back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe
from cuvee.pipeline.writers import OTHER_FIELD, _split_metadata, metadata_from_row, metadata_struct_fields

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("typed")
    recipe = {
        "name": "typed",
        "run_dir": str(tmp / "run"),
        "input": {"paths": [str(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"),
                            str(REPO / "data/sample/small-sample-1262850551027_8.arc.gz")]},
        "stages": [{"stage": "response_check"}, {"stage": "extract", "timeout_s": 5},
                   {"stage": "language", "languages": "all"}],
        "output": {"format": "parquet", "route_by": "language"},  # one file per language folder
        "executor": {"kind": "local", "tasks": 2, "workers": 1},
    }
    stats = run_recipe(recipe)
    files = stats["output"]["files"]
    assert len(files) >= 3 and stats["output"]["documents"] > 5
    return stats, files


def test_metadata_is_a_typed_struct_with_one_schema_per_run(run):
    _, files = run
    schemas = [pq.read_schema(f) for f in files]
    assert all(s.equals(schemas[0]) for s in schemas)  # every rank wrote the same schema
    meta = schemas[0].field("metadata").type
    assert pa.types.is_struct(meta)
    assert meta.field("language_score").type == pa.float64() and meta.field("language").type == pa.string()
    assert meta.field("http_status").type == pa.int64() and meta.field(OTHER_FIELD).type == pa.string()


def test_pyarrow_filters_on_metadata_fields_directly(run):
    _, files = run
    table = ds.dataset(files, format="parquet").to_table(
        filter=(pc.field("metadata", "language") == "en") & (pc.field("metadata", "language_score") > 0.5))
    docs = {d.id: d for d in iter_documents(files)}
    expected = {i for i, d in docs.items() if d.metadata.get("language") == "en" and d.metadata["language_score"] > 0.5}
    assert set(table.column("id").to_pylist()) == expected and expected


def test_datasets_loads_and_filters_without_parsing_json(run, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    _, files = run
    dset = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    en = dset.filter(lambda r: r["metadata"]["language"] == "en")
    docs = list(iter_documents(files))
    assert len(dset) == len(docs) and 0 < len(en) == sum(d.metadata.get("language") == "en" for d in docs)


def test_readers_get_the_mapping_back(run):
    from datatrove.pipeline.readers import ParquetReader

    from cuvee.pipeline.readers import PlannedParquetReader

    _, files = run
    folder = str(Path(files[0]).parent.parent)
    ours = {d.id: d.metadata for d in iter_documents(files)}
    theirs = {d.id: d.metadata for d in ParquetReader(folder).run()}  # datatrove's own reader
    planned = {d.id: d.metadata for d in PlannedParquetReader(folder).run()}
    assert set(ours) == set(theirs) == set(planned)
    for i, m in ours.items():
        assert m["language"] == theirs[i]["language"] and "url" in m
        # nulls of absent keys dropped, nothing else lost (datatrove's reader adds the file path, cuvee's where
        # it read the row)
        assert {k: v for k, v in planned[i].items() if k not in ("file_path", "input_file", "input_row")} == m
        assert planned[i]["input_file"] == planned[i]["file_path"] and planned[i]["input_row"] >= 0
        assert None not in m.values()


def test_values_that_do_not_fit_are_kept_as_json_not_coerced():
    fields = metadata_struct_fields({"quality_score": "double", "n": "int64"})
    meta = {"quality_score": "high", "n": 3, "language_score": 0.9, "custom": {"a": [1, 2]}, "http_status": True}
    row = _split_metadata(meta, fields)
    assert row["quality_score"] is None and row["n"] == 3 and row["http_status"] is None
    other = json.loads(row[OTHER_FIELD])
    assert other == {"quality_score": "high", "custom": {"a": [1, 2]}, "language_score": 0.9, "http_status": True}
    assert metadata_from_row(row) == meta  # read back exactly


def test_old_json_string_metadata_and_jsonl_still_read(tmp_path):
    from cuvee.pipeline.readers import PlannedParquetReader

    old = pa.table({"text": ["hello"], "id": ["a"], "metadata": [json.dumps({"language": "en", "x": 1})]})
    pq.write_table(old, tmp_path / "old.parquet")
    assert next(iter_documents(str(tmp_path / "old.parquet"))).metadata == {"language": "en", "x": 1}
    back = next(PlannedParquetReader(str(tmp_path)).run()).metadata
    assert {k: v for k, v in back.items() if k not in ("file_path", "input_file")} == {"language": "en", "x": 1,
                                                                                       "input_row": 0}


def test_jsonl_output_keeps_a_mapping(tmp_path):
    import gzip

    recipe = {"name": "j", "run_dir": str(tmp_path / "j"),
              "input": {"paths": [str(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz")]},
              "stages": [{"stage": "response_check"}], "output": {"format": "jsonl"},
              "executor": {"kind": "local", "tasks": 1, "workers": 1}}
    stats = run_recipe(recipe)
    with gzip.open(stats["output"]["files"][0], "rt") as f:
        row = json.loads(f.readline())
    assert isinstance(row["metadata"], dict) and row["metadata"]["url"].startswith("http")
