"""Rehydration as a mixer setting (issue #34): a source weights its documents by the size of the duplicate cluster
each was kept for, by FineWeb-2's published rule or a user table, exactly at every prefix, and the manifest says
what it did.

The corpus plants clusters of known sizes (``minhash_cluster_size``) on documents of one token length each
(byte-level tokenizer: 19 bytes + EOS), so counts are exact. The expected weights are written here from
FineWeb-2's README prose (github.com/huggingface/fineweb-2, "Deduplication": 1 -> 1, N = 2 or 3 -> N, 4 -> 3,
5..99 -> 5, 100..999 -> 8, >= 1000 -> 1), not read from cuvee; which document each draw is comes from its id
in the mix's per-document index, re-read from the input file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvee.mixer import run_mix
from cuvee.mixer.config import MixConfigError
from cuvee.mixer.docindex import MixIndex
from cuvee.pipeline.io import iter_documents

REPO = Path(__file__).resolve().parents[1]
LENGTH = 20  # tokens per document: 19 bytes + EOS
PLANTED = {1: 12, 2: 6, 3: 4, 4: 4, 5: 3, 99: 3, 100: 2, 999: 2, 1000: 2, 4321: 2}  # cluster size: documents
FINEWEB2 = {1: 1, 2: 2, 3: 3, 4: 3, 5: 5, 99: 5, 100: 8, 999: 8, 1000: 1, 4321: 1}  # from the README's prose


def _text(i: int) -> str:
    return f"doc {i:05d} ".ljust(19, "x")


def _source(tmp: Path, planted: dict[int, int], key: str = "minhash_cluster_size") -> str:
    rows, i = [], 0
    for size, n in planted.items():
        for k in range(n):
            rows.append({"text": _text(i), "id": f"c{size}-{k}", "metadata": {key: size}})
            i += 1
    path = tmp / "web.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _other(tmp: Path, n: int = 60) -> str:
    path = tmp / "other.jsonl"
    path.write_text("".join(json.dumps({"text": _text(90_000 + i), "id": f"o{i}"}) + "\n" for i in range(n)))
    return str(path)


def _cfg(web: str, other: str | None, target: int, rehydrate: dict | None, **web_over) -> dict:
    sources = [{"name": "web", "paths": web, "weight": 0.5 if other else 1.0, **web_over,
                **({"rehydrate": rehydrate} if rehydrate else {})}]
    if other:
        sources.append({"name": "other", "paths": other, "weight": 0.5, "max_epochs": 2})
    return {"name": "r", "target_tokens": target, "seed": 11, "tokenizer": "bytes256.tiktoken", "shard_tokens": 700,
            "sources": sources}


def _draws(out: Path, manifest: dict, source: str) -> list[tuple[str, int]]:
    """(id, epoch) of every document of ``source`` in shard order, the id read back from its input row."""
    index = MixIndex(out, manifest)
    rows = {}
    got = []
    for s in manifest["shards"]:
        for i in range(s["documents"]):
            d = index.describe(s["prefix"], i)
            if d["source"] != source:
                continue
            if d["file"] not in rows:
                rows[d["file"]] = [doc.id for doc in iter_documents([d["file"]])]
            assert rows[d["file"]][d["row"]] == d["id"]
            got.append((d["id"], d["epoch"]))
    return got


def _size(doc_id: str) -> int:
    return int(doc_id[1:].split("-")[0])


def test_fineweb2_rule_gives_planted_clusters_their_weights_at_every_prefix(tmp_path):
    web, other = _source(tmp_path, PLANTED), _other(tmp_path)
    one_pass = LENGTH * sum(FINEWEB2[s] * n for s, n in PLANTED.items())  # 114 documents
    out = tmp_path / "mix"
    m = run_mix(_cfg(web, other, 2 * one_pass, {"rule": "fineweb2"}), out_dir=out)
    draws = _draws(out, m, "web")
    assert len(draws) == one_pass // LENGTH
    # the whole pass: every document exactly its weight times, once in each of its class's epochs 0..k-1
    for size, n in PLANTED.items():
        for k in range(n):
            epochs = [e for d, e in draws if d == f"c{size}-{k}"]
            assert epochs == list(range(FINEWEB2[size])), (size, k, epochs)
    # every prefix: each weight class holds weight x documents of its share, to within one document
    classes = sorted(set(FINEWEB2.values()))
    share = {w: sum(w * n for s, n in PLANTED.items() if FINEWEB2[s] == w) / (one_pass // LENGTH) for w in classes}
    counts = dict.fromkeys(classes, 0)
    worst = 0.0
    for n, (doc_id, _) in enumerate(draws, start=1):
        counts[FINEWEB2[_size(doc_id)]] += 1
        worst = max(worst, max(abs(counts[w] - share[w] * n) for w in classes))
    assert worst <= 1.0, worst
    # between sources the blend is unchanged: 50 % each at every prefix, within one document
    rec = [d for s in m["shards"] for d in np.asarray(MixIndex(out, m).records(s["prefix"])["source"]).tolist()]
    assert max(abs(rec[:n].count(0) - n / 2) for n in range(1, len(rec) + 1)) <= 1
    # the manifest says what rehydration did
    web_entry = m["sources"][0]
    rh = web_entry["rehydration"]
    assert rh["key"] == "minhash_cluster_size" and rh["rule"] == "fineweb2"
    assert rh["tokens_before"] == LENGTH * sum(PLANTED.values()) and rh["tokens_after"] == one_pass
    assert web_entry["available_tokens"] == one_pass and web_entry["epochs"] == 1.0
    per_weight = {float(w): v for w, v in rh["per_weight"].items()}
    for w in classes:
        docs = sum(n for s, n in PLANTED.items() if FINEWEB2[s] == w)
        assert per_weight[w]["documents"] == docs and per_weight[w]["drawn"] == w * docs
    assert rh["per_range"]["100-999"] == {"weight": 8.0, "documents": 4, "tokens": 4 * LENGTH,
                                          "weighted_tokens": 32 * LENGTH}


def test_a_table_with_fractions_and_zero_and_a_pass_cut_short(tmp_path):
    """Weight 0 documents are never drawn (counted in the manifest); a 0.5 class makes half a pass per pass of the
    source; a target below one pass still holds every class's share at every prefix."""
    planted = {1: 10, 3: 8, 20: 4}
    web = _source(tmp_path, planted)
    table = {1: 1, "2-9": 0.5, "10+": 0}
    per_pass = 10 + 4  # documents: 10 x 1 + 8 x 0.5
    out = tmp_path / "mix"
    m = run_mix(_cfg(web, None, LENGTH * per_pass * 2, {"table": table}, max_epochs=2), out_dir=out)
    draws = _draws(out, m, "web")
    assert not [d for d, _ in draws if _size(d) == 20]
    ids = [d for d, _ in draws]
    assert all(ids.count(f"c1-{k}") == 2 for k in range(10))  # two passes of weight 1
    assert sum(ids.count(f"c3-{k}") for k in range(8)) == 8 and all(ids.count(f"c3-{k}") == 1 for k in range(8))
    rh = m["sources"][0]["rehydration"]
    assert rh["per_range"]["10+"] == {"weight": 0.0, "documents": 4, "tokens": 4 * LENGTH, "weighted_tokens": 0}
    assert rh["per_weight"]["0"]["drawn"] == 0 and rh["tokens_after"] == LENGTH * per_pass
    # a target of 9 documents: prefixes of the same rule, shares 10/14 and 4/14
    short = run_mix(_cfg(web, None, LENGTH * 9, {"table": table}), out_dir=tmp_path / "short")
    counts = {1: 0, 3: 0}
    for n, (doc_id, _) in enumerate(_draws(tmp_path / "short", short, "web"), start=1):
        counts[_size(doc_id)] += 1
        assert abs(counts[1] - n * 10 / 14) <= 1 and abs(counts[3] - n * 4 / 14) <= 1


def test_weights_of_one_read_the_source_as_without_rehydration(tmp_path):
    web, other = _source(tmp_path, {1: 5, 7: 5, 300: 5}), _other(tmp_path)
    plain = run_mix(_cfg(web, other, 1_000, None, max_epochs=2), out_dir=tmp_path / "plain")
    ones = run_mix(_cfg(web, other, 1_000, {"table": {"1+": 1}}, max_epochs=2), out_dir=tmp_path / "ones")
    assert [s["sha256_bin"] for s in plain["shards"]] == [s["sha256_bin"] for s in ones["shards"]]
    assert [s["sha256_docs"] for s in plain["shards"]] == [s["sha256_docs"] for s in ones["shards"]]


def test_documents_without_the_key_are_counted_and_a_misspelt_key_is_named(tmp_path):
    web = _source(tmp_path, {1: 4, 2: 4})
    rows = [json.loads(x) for x in Path(web).read_text().splitlines()]
    rows[0]["metadata"] = {}
    rows[1]["metadata"]["minhash_cluster_size"] = "many"
    Path(web).write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = run_mix(_cfg(web, None, LENGTH * 4, {"rule": "fineweb2"}), out_dir=tmp_path / "m")
    counters = m["sources"][0]["counters"]
    assert counters["dropped"] == {"bad_minhash_cluster_size": 1, "no_minhash_cluster_size": 1}
    assert counters["read"] == 8 and counters["kept"] == 6
    with pytest.raises(MixConfigError) as e:
        run_mix(_cfg(web, None, 80, {"rule": "fineweb2", "key": "minhash_clustr_size"}), out_dir=tmp_path / "n")
    msg = str(e.value)
    assert "\n" not in msg and "no_minhash_clustr_size" in msg and "did you mean 'minhash_cluster_size'" in msg


@pytest.mark.parametrize("table, says", [
    ({1: 1, "3+": 2}, "cluster sizes 2 are in no range"),
    ({1: 1, "2-5": 2, "4+": 1}, "cluster-size ranges overlap at size 4"),
    ({1: 1, "2-5": 2}, "cluster sizes above 5 are in no range"),
    ({1: 1, "2+": -1}, "weight -1.0 is not a finite number >= 0"),
    ({"2+": 1}, "must cover cluster size 1"),
    ({1: 1, "2..3": 1, "4+": 1}, "'2..3' is not 'N', 'N-M' or 'N+'"),
])
def test_a_bad_table_is_refused_in_one_line_before_any_work(tmp_path, table, says):
    web = _source(tmp_path, {1: 2})
    cfg = _cfg(web, None, 40, {"table": table})
    cfg["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "mix.yaml"
    path.write_text(json.dumps(cfg))
    proc = subprocess.run([sys.executable, "-m", "cuvee.cli", "mix", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "sources[0].rehydrate.table" in lines[0] and says in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
