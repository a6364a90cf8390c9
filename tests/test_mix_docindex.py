"""Shards that remember (issue #34): `cuvee mix` writes beside each shard a per-document index (source or selection,
epoch, the key of the document's record in the mix's input), listed with its sha256 in the manifest; readers take
each document's source from it, `cuvee mix --verify` checks it, and a mix built before it is refused in one line.

Expectations are independent of the index code: every shard document is re-read from the input row its key names
(cuvee.pipeline.io.iter_documents over that one file) and compared with the shard's tokens (byte-level tokenizer:
token ids are the text's bytes); epochs follow from the per-source shuffle reading whole passes in turn."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuvee.mixer import run_mix
from cuvee.mixer.docindex import DocumentIndexError, MixIndex
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.mix import verify_mix
from cuvee.mixer.where import matches
from cuvee.pipeline.io import iter_documents
from cuvee.train.shards import open_shards

REPO = Path(__file__).resolve().parents[1]
EOS = 256
WORDS = "the of wine cask grape barrel vintage cellar oak harvest press yeast".split()


def _words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Three sources: JSONL with ids (repeated ~2.5 times), gzip'd JSONL without ids and with a blank line (a part of
    it drawn), Parquet split by two selections."""
    import random

    tmp = tmp_path_factory.mktemp("docindex")
    rng = random.Random(4)
    (tmp / "a.jsonl").write_text("".join(json.dumps({"text": "A " + _words(rng, 3, 30), "id": f"a{i}"}) + "\n"
                                         for i in range(30)))
    lines = [json.dumps({"text": "B " + _words(rng, 3, 30)}) for _ in range(60)]
    lines.insert(20, "")  # a blank line: iter_documents names later records by their line number
    with gzip.open(tmp / "b.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    rows = [{"text": "C " + _words(rng, 3, 30), "id": f"c{i}", "metadata": {"bucket": i % 4}} for i in range(40)]
    pq.write_table(pa.Table.from_pylist(rows), tmp / "c.parquet")
    cfg = {"name": "ix", "target_tokens": 20_000, "seed": 3, "tokenizer": "bytes256.tiktoken", "shard_tokens": 5_000,
           "sources": [
               {"name": "a", "paths": str(tmp / "a.jsonl"), "weight": 0.4, "max_epochs": 4},
               {"name": "b", "paths": str(tmp / "b.jsonl.gz"), "weight": 0.2},
               {"name": "c", "paths": str(tmp / "c.parquet"), "selections": [
                   {"name": "hi", "where": {"bucket": {"gte": 2}}, "weight": 0.3, "max_epochs": 4},
                   {"name": "lo", "where": {"bucket": {"lt": 2}}, "weight": 0.1, "max_epochs": 4}]},
           ]}
    path = tmp / "ix.yaml"
    path.write_text(json.dumps({**cfg, "output_dir": str(tmp / "out")}))
    manifest = run_mix(str(path))
    return tmp / "out", manifest, path


def _rows(file: str) -> list:
    return list(iter_documents([file]))


def test_every_shard_document_leads_back_to_its_input_row(built):
    out, m, _ = built
    index = MixIndex(out, m)
    names = [s["name"] for s in m["sources"]]
    assert names == ["a", "b", "c.hi", "c.lo"]
    files = {}
    seen = defaultdict(int)
    for s in m["shards"]:
        ds = IndexedDataset(out / s["prefix"])
        assert len(index.records(s["prefix"])) == len(ds) == s["documents"]
        for i in range(len(ds)):
            d = index.describe(s["prefix"], i)
            if d["file"] not in files:
                files[d["file"]] = _rows(d["file"])
            doc = files[d["file"]][d["row"]]
            tokens = np.asarray(ds[i])
            assert tokens[-1] == EOS and bytes(tokens[:-1].astype(np.uint8)) == doc.text.encode()
            assert d["id"] == doc.id
            src = m["sources"][d["source_index"]]
            assert d["source"] == src["name"] and Path(d["file"]).name in str(src["paths"])
            if d["selection"]:
                assert matches(doc.metadata["bucket"], src["where"]["bucket"])
            seen[d["source"]] += 1
    assert dict(seen) == {s["name"]: s["documents_used"] for s in m["sources"]}
    assert {Path(f).name for f in files} == {"a.jsonl", "b.jsonl.gz", "c.parquet"}
    # ids: stored as written, and the name iter_documents gives an id-less record (the line, past a blank one)
    b_ids = {doc.id for doc in files[next(f for f in files if f.endswith(".gz"))]}
    assert any(i.endswith("/21") for i in b_ids) and not any(i.endswith("/20") for i in b_ids)


def test_epochs_are_whole_passes_of_each_source(built):
    """A source is read pass after pass (a fresh shuffle each), so a document drawn k times was drawn in epochs
    0..k-1, and every pass but the last holds each of the source's documents once."""
    out, m, _ = built
    index = MixIndex(out, m)
    draws = defaultdict(list)
    for s in m["shards"]:
        rec = index.records(s["prefix"])
        for src, epoch, entry in zip(rec["source"].tolist(), rec["epoch"].tolist(), rec["entry"].tolist()):
            draws[src, entry].append(epoch)
    for epochs in draws.values():
        assert epochs == list(range(len(epochs)))
    for k, src in enumerate(m["sources"]):
        per_epoch = defaultdict(int)
        for (s, _), epochs in draws.items():
            for e in epochs if s == k else []:
                per_epoch[e] += 1
        last = max(per_epoch)
        assert all(per_epoch[e] == src["documents"] for e in range(last)), (src["name"], dict(per_epoch))
        assert 0 < per_epoch[last] <= src["documents"]
    assert max(len(e) for e in draws.values()) >= 3  # some documents repeat, so epochs are exercised
    assert len(index.table) == len(draws)  # one table entry per distinct document, whatever its repeats


def test_manifest_lists_the_index_with_its_hashes_and_verify_checks_it(built, tmp_path):
    import shutil

    out, m, _ = built
    block = m["document_index"]
    for name, key in ((block["documents"], "sha256_documents"), (block["ids"], "sha256_ids")):
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == block[key]
    for s in m["shards"]:
        assert hashlib.sha256((out / s["docs"]).read_bytes()).hexdigest() == s["sha256_docs"]
    assert block["bytes"] == sum((out / n).stat().st_size for n in [block["documents"], block["ids"]]
                                 + [s["docs"] for s in m["shards"]])
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert verify_mix(copy)["documents"] == m["documents"]
    docs = copy / m["shards"][1]["docs"]
    data = bytearray(docs.read_bytes())
    data[2] ^= 1  # one record's epoch changed
    docs.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{m['shards'][1]['docs']}: sha256 differs"):
        verify_mix(copy)
    (copy / block["ids"]).unlink()
    with pytest.raises(ValueError, match=rf"{block['ids']}: missing"):
        verify_mix(copy)


def _strip_index(folder: Path) -> None:
    """What a mix folder built before the index looked like: no index files, no manifest block, no docs entries."""
    manifest = json.loads((folder / "manifest.json").read_text())
    block = manifest.pop("document_index")
    for s in manifest["shards"]:
        (folder / s.pop("docs")).unlink()
        s.pop("sha256_docs")
    (folder / block["documents"]).unlink()
    (folder / block["ids"]).unlink()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_mix_built_before_the_index_is_refused_in_one_line_and_rebuilt_by_cuvee_mix(built, tmp_path):
    import shutil

    out, m, config = built
    old = tmp_path / "old"
    shutil.copytree(out, old)
    _strip_index(old)
    for path in (str(old), str(old / m["shards"][0]["prefix"])):
        with pytest.raises(DocumentIndexError) as e:
            open_shards(path)
        msg = str(e.value)
        assert "\n" not in msg and f"{old}: mix 'ix' has no per-document index" in msg
        assert f"cuvee mix CONFIG --out {old}" in msg
    train_cfg = tmp_path / "train.yaml"
    train_cfg.write_text(json.dumps({"name": "t", "model": {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1,
                                                            "max_seq_len": 32},
                                     "data": {"paths": [str(old)], "seq_len": 32}, "steps": 1, "micro_batch": 1,
                                     "out_dir": str(tmp_path / "run"), "threads": 1}))
    proc = subprocess.run([sys.executable, "-m", "cuvee.cli", "train", str(train_cfg)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "has no per-document index" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()
    # the way out the message names: the same config into that folder gives the same shards, now with the index
    rebuilt = run_mix(str(config), out_dir=old)
    assert [s["sha256_bin"] for s in rebuilt["shards"]] == [s["sha256_bin"] for s in m["shards"]]
    assert open_shards(str(old)).source_names == ["a", "b", "c.hi", "c.lo"]
