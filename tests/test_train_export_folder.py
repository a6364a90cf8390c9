"""``cuvee train --export-hf DIR`` and ``--demo-data DIR`` write only into folders cuvee owns: a folder
holding someone else's files is refused in one line and left as it was; a re-export replaces the whole
export and records which checkpoint it holds."""

import json

import pytest
from click.testing import CliRunner

from cuvee.kernel.workdir import PLAN, FolderError
from cuvee.train.checkpoint import checkpoint_identity, list_checkpoints
from cuvee.train.cli import train as train_cli
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb
from cuvee.train.hf_export import export_checkpoint
from cuvee.train.trainer import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    build_variant_mix(root / "a", "a", load_wcxb()[:20], {"clean": 1.0}, max_doc_bytes=600)
    cfg = TrainConfig(name="t", model={"dim": 32, "n_layers": 1, "n_heads": 4, "max_seq_len": 64},
                      data={"paths": [str(root / "a")], "seq_len": 64}, steps=4, micro_batch=2, ckpt_every=2,
                      keep_checkpoints=2, out_dir=str(root / "run"), threads=1)
    train(cfg, quiet=True)
    return root / "run"


def test_export_refuses_a_folder_with_foreign_files(run, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "config.json").write_text("my own file")
    with pytest.raises(FolderError, match="did not create"):
        export_checkpoint(run, foreign)
    assert [p.name for p in foreign.iterdir()] == ["config.json"]
    assert (foreign / "config.json").read_text() == "my own file"


def test_reexport_replaces_the_whole_folder_and_records_its_checkpoint(run, tmp_path):
    first, last = list_checkpoints(run)
    out = tmp_path / "hf"
    export_checkpoint(first, out)
    (out / "stale.bin").write_text("left from an earlier export")
    export_checkpoint(last, out)
    assert not (out / "stale.bin").exists()
    plan = json.loads((out / PLAN).read_text())
    assert plan["binding"]["export_of"] == checkpoint_identity(last)
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()


def test_demo_data_folder_with_foreign_files_is_refused_in_one_line(tmp_path):
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cfg = tmp_path / "t.yaml"
    cfg.write_text(f"data: {{paths: ['{foreign}/default']}}\nout_dir: '{tmp_path / 'out'}'\n")
    res = CliRunner().invoke(train_cli, [str(cfg), "--demo-data", str(foreign)])
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "did not create" in res.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_documented_tiny_command_runs_on_the_bundled_data(tmp_path, monkeypatch):
    """README: `cuvee train configs/train/tiny.yaml --demo-data runs/train_demo_data` (here 4 steps)."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "train" / "tiny.yaml"
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(train_cli, [str(config), "--demo-data", "runs/train_demo_data", "--set", "steps=4",
                                         "--set", "eval_docs=4", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout[res.stdout.index("\n{") + 1:])
    assert summary["step"] == 4 and set(summary["eval"]) == {"clean", "shuffled"}
    assert (tmp_path / "runs" / "train" / "tiny" / "checkpoints" / "step_0000004.pt").is_file()
