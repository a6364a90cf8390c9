"""Every train / anneal / eval-downstream failure is ONE line on stderr and a non-zero exit, before any work:
out-of-range or non-finite numbers name their key, unknown keys get "did you mean", broken YAML and alias
bombs are refused in one line, and a missing data folder names the command that builds it."""

import pytest
from click.testing import CliRunner

from cuvee.train.cli import anneal as anneal_cli
from cuvee.train.cli import eval_downstream as eval_cli
from cuvee.train.cli import train as train_cli

TRAIN = """name: t
model: {dim: 32, n_layers: 1, n_heads: 4, n_kv_heads: 2, max_seq_len: 64, rope_theta: 10000.0}
data: {paths: [nowhere], seq_len: 64}
optim: {lr: 3.0e-3, weight_decay: 0.1, beta1: 0.9, eps: 1.0e-8, grad_clip: 1.0}
steps: 5
micro_batch: 2
out_dir: OUT
"""

ANNEAL = """name: a
checkpoint: nowhere.pt
candidate: [c]
control: [d]
tokens: 1000
eval: {x: e}
out_dir: OUT
"""

BOMB = "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
               for p, k in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg"))


def _one_line_error(res):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code != 0, res.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


def _write(tmp_path, text, name="cfg.yaml"):
    p = tmp_path / name
    p.write_text(text.replace("OUT", str(tmp_path / "out")))
    return str(p)


@pytest.mark.parametrize("key,value,says", [
    ("data.seq_len", "0", "must be greater than 1"),
    ("optim.lr", ".nan", "must be a finite number"),
    ("optim.lr", ".inf", "must be a finite number"),
    ("micro_batch", "0", "must be greater than 0"),
    ("optim.beta1", "5", "must be less than 1"),
    ("optim.eps", "-1", "must be greater than 0"),
    ("model.n_kv_heads", "-2", "must be greater than 0"),
    ("model.rope_theta", "-1", "must be greater than 0"),
    ("optim.weight_decay", ".nan", "must be a finite number"),
    ("optim.grad_clip", ".nan", "must be a finite number"),
    ("model.norm_eps", "-.inf", "must be a finite number"),
    ("grad_accum", "-1", "must be greater than 0"),
])
def test_train_refuses_bad_numbers_naming_the_key(tmp_path, key, value, says):
    line = _one_line_error(CliRunner().invoke(train_cli, [_write(tmp_path, TRAIN), "--set", f"{key}={value}"]))
    assert f"{key}: {says}" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key,value,says", [
    ("seq_len", "0", "must be greater than 1"),
    ("lr", ".nan", "must be a finite number"),
    ("micro_batch", "0", "must be greater than 0"),
    ("tokens", "0", "must be greater than 0"),
    ("eval_docs", "-5", "must be greater than 0"),
    ("alpha", ".nan", "must be a finite number"),
])
def test_anneal_refuses_bad_numbers_naming_the_key(tmp_path, key, value, says):
    line = _one_line_error(CliRunner().invoke(anneal_cli, [_write(tmp_path, ANNEAL), "--set", f"{key}={value}"]))
    assert f"{key}: {says}" in line


@pytest.mark.parametrize("cli,text,key,suggestion", [
    (train_cli, TRAIN, "optim.lrr", "did you mean 'lr'?"),
    (train_cli, TRAIN, "stepz", "did you mean 'steps'?"),
    (train_cli, TRAIN, "model.n_layer", "did you mean 'n_layers'?"),
    (anneal_cli, ANNEAL, "average_lst", "did you mean 'average_last'?"),
])
def test_unknown_keys_get_did_you_mean(tmp_path, cli, text, key, suggestion):
    line = _one_line_error(CliRunner().invoke(cli, [_write(tmp_path, text), "--set", f"{key}=1"]))
    assert "unknown key" in line and key in line and suggestion in line


@pytest.mark.parametrize("cli", [train_cli, anneal_cli])
@pytest.mark.parametrize("text,says", [
    (BOMB, "alias"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- a list\n", "expected a mapping"),
])
def test_broken_yaml_is_one_line(tmp_path, cli, text, says):
    assert says in _one_line_error(CliRunner().invoke(cli, [_write(tmp_path, text)]))


def test_missing_demo_data_names_the_command_to_run(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    cfg = Path(__file__).resolve().parents[1] / "configs" / "train" / "tiny.yaml"
    line = _one_line_error(CliRunner().invoke(train_cli, [str(cfg)]))
    assert "runs/train_demo_data/default does not exist" in line
    assert f"cuvee train {cfg} --demo-data runs/train_demo_data" in line
    assert not (tmp_path / "runs").exists()  # nothing was created


def test_unknown_model_preset_and_bad_override_are_one_line(tmp_path):
    line = _one_line_error(CliRunner().invoke(train_cli, [_write(tmp_path, TRAIN), "--set", "model=tinyy"]))
    assert "did you mean 'tiny'?" in line
    line = _one_line_error(CliRunner().invoke(train_cli, [_write(tmp_path, TRAIN), "--set", "steps=*x"]))
    assert "--set steps" in line


def test_anneal_missing_checkpoint_is_one_line(tmp_path):
    line = _one_line_error(CliRunner().invoke(anneal_cli, [_write(tmp_path, ANNEAL)]))
    assert "nowhere.pt" in line


def test_eval_downstream_errors_are_one_line(tmp_path):
    (tmp_path / "model").mkdir()
    line = _one_line_error(CliRunner().invoke(eval_cli, [str(tmp_path / "model"), "--task", "cuvee_wcxb_cloze"]))
    assert "no config.json" in line


def test_verbose_shows_the_traceback(tmp_path):
    res = CliRunner().invoke(train_cli, [_write(tmp_path, TRAIN), "--set", "optim.lr=.nan", "-v"])
    assert res.exit_code == 1 and "Traceback" in res.stderr and res.stderr.strip().endswith("(got nan)")
