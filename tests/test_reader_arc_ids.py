"""ARC document ids are unique across same-named files in different folders (ARC has no record id of its own)."""

from __future__ import annotations

import shutil
from pathlib import Path

from cuvee.pipeline.readers import make_reader
from cuvee.pipeline.runner import run_recipe

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
ARC_A = SAMPLE / "small-sample-1213893279526_0.arc.gz"
ARC_B = SAMPLE / "small-sample-1262850551027_8.arc.gz"


def test_same_named_arc_files_in_two_folders_give_distinct_ids(tmp_path):
    for sub, src in (("2008", ARC_A), ("2010", ARC_B)):
        (tmp_path / "in" / sub).mkdir(parents=True)
        shutil.copy(src, tmp_path / "in" / sub / "crawl.arc.gz")
    docs = list(make_reader(str(tmp_path / "in")).run())
    ids = [d.id for d in docs]
    expected = sum(1 for src in (ARC_A, ARC_B) for _ in make_reader(str(src)).run())
    assert len(ids) == expected > 150 and len(set(ids)) == len(ids)
    assert all(i.startswith("arc:crawl.arc.gz:") for i in ids)
    assert {d.id for d in docs} == {d.metadata["warc_record_id"] for d in docs}


def test_a_run_over_two_same_named_inputs_writes_distinct_ids(tmp_path):
    paths = []
    for sub, src in (("a", ARC_A), ("b", ARC_B)):
        (tmp_path / sub).mkdir()
        shutil.copy(src, tmp_path / sub / "x.arc.gz")
        paths.append(str(tmp_path / sub / "x.arc.gz"))
    run_recipe({"name": "arc_ids", "run_dir": str(tmp_path / "run"), "input": {"paths": paths}, "stages": [],
                "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1}})
    import gzip
    import json

    ids = [json.loads(line)["id"] for f in sorted((tmp_path / "run" / "output").rglob("*.jsonl*"))
           for line in gzip.decompress(f.read_bytes()).decode().splitlines()]
    assert len(ids) > 150 and len(set(ids)) == len(ids)


def test_ids_are_stable_and_a_byte_identical_copy_keeps_them(tmp_path):
    (tmp_path / "copy").mkdir()
    shutil.copy(ARC_A, tmp_path / "copy" / ARC_A.name)
    first = [d.id for d in make_reader(str(ARC_A)).run()]
    again = [d.id for d in make_reader(str(tmp_path / "copy" / ARC_A.name)).run()]
    assert first == again and len(set(first)) == len(first)
