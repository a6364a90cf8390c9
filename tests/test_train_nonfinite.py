"""A diverging run stops at the step that went non-finite (or skips it, when asked), says so in one line,
never writes a checkpoint holding NaN/inf, and its log.jsonl stays strict JSON."""

import json
import math

import pytest
import torch
from click.testing import CliRunner

from cuvee.train.checkpoint import list_checkpoints, load_checkpoint
from cuvee.train.cli import train as train_cli
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb
from cuvee.train.model import Llama
from cuvee.train.strict_json import dumps as strict_dumps
from cuvee.train.trainer import TrainingDiverged


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    build_variant_mix(root / "a", "a", load_wcxb()[:30], {"clean": 1.0}, max_doc_bytes=800)
    return root / "a"


def _yaml(tmp_path, data, out, lr="1.0e+30", extra=""):
    p = tmp_path / f"{out.name}.yaml"
    p.write_text(
        f"name: t\nmodel: {{dim: 32, n_layers: 1, n_heads: 4, n_kv_heads: 2, max_seq_len: 64}}\n"
        f"data: {{paths: ['{data}'], seq_len: 64, seed: 3}}\noptim: {{lr: {lr}, warmup_steps: 0}}\n"
        f"steps: 14\nmicro_batch: 2\nlog_every: 1\nckpt_every: 1\nkeep_checkpoints: 20\nthreads: 1\n"
        f"out_dir: '{out}'\n{extra}")
    return p


def _strict_records(path):
    """Every line parsed by a strict reader: bare NaN / Infinity are refused, as jq or a browser would."""
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def _all_finite(ckpt_path):
    return all(bool(torch.isfinite(t).all()) for t in load_checkpoint(ckpt_path)["model"].values())


def test_diverging_run_stops_in_one_line_before_a_nonfinite_checkpoint(data, tmp_path):
    out = tmp_path / "stop"
    res = CliRunner().invoke(train_cli, [str(_yaml(tmp_path, data, out))])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert "training diverged at step 2" in lines[0] and "not finite" in lines[0] and "on_nonfinite" in lines[0]
    saved = list_checkpoints(out)
    assert [p.name for p in saved] == ["step_0000001.pt"]  # the step that diverged wrote nothing
    assert all(_all_finite(p) for p in saved)
    assert [r["step"] for r in _strict_records(out / "log.jsonl")] == [1]


def test_skip_mode_drops_nonfinite_updates_then_stops_when_they_persist(data, tmp_path):
    out = tmp_path / "skip"
    res = CliRunner().invoke(train_cli, [str(_yaml(tmp_path, data, out, extra="on_nonfinite: skip\n"))])
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "the last 11 steps were all non-finite" in res.stderr
    records = _strict_records(out / "log.jsonl")
    skips = [r for r in records if r["event"] == "skip"]
    assert [r["step"] for r in skips] == list(range(2, 12))
    assert all(r["grad_norm"] is None for r in skips)  # NaN written as null, not as a bare NaN
    assert all(_all_finite(p) for p in list_checkpoints(out))


def test_skip_mode_is_not_bound_and_a_healthy_run_skips_nothing(data, tmp_path):
    out = tmp_path / "healthy"
    cfg = _yaml(tmp_path, data, out, lr="3.0e-3")
    assert CliRunner().invoke(train_cli, [str(cfg), "--stop-after", "3"]).exit_code == 0
    res = CliRunner().invoke(train_cli, [str(cfg), "--set", "on_nonfinite=skip", "--json"])  # resumes the same run
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout[res.stdout.index("{"):])["skipped_steps"] == 0
    assert [r["step"] for r in _strict_records(out / "log.jsonl") if r["event"] == "train"] == list(range(1, 15))


def test_a_checkpoint_is_never_written_from_nonfinite_weights(data, tmp_path):
    from cuvee.train import distributed
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards
    from cuvee.train.step import build_optimizer
    from cuvee.train.trainer import _save

    cfg = TrainConfig(name="t", model={"dim": 32, "n_layers": 1, "n_heads": 4, "max_seq_len": 64},
                      data={"paths": [str(data)], "seq_len": 64}, out_dir=str(tmp_path / "nan"))
    shards = open_shards(cfg.data.paths)
    mcfg = cfg.resolved_model(shards.vocab_size)
    model = Llama(mcfg)
    with torch.no_grad():
        next(model.parameters())[0, 0] = math.nan
    info = distributed.DistInfo()
    with pytest.raises(TrainingDiverged, match="weights are not finite"):
        _save(tmp_path / "nan", 3, 0, model, build_optimizer(model, cfg), PackedLoader(shards, 64, 2), cfg, mcfg,
              shards, info)
    assert list_checkpoints(tmp_path / "nan") == []


def test_grad_clip_nan_is_refused_not_turned_into_no_clipping(data, tmp_path):
    res = CliRunner().invoke(train_cli, [str(_yaml(tmp_path, data, tmp_path / "gc", lr="3.0e-3")),
                                         "--set", "optim.grad_clip=.nan"])
    assert res.exit_code == 1 and res.stderr.strip() == (
        f"Error: {tmp_path / 'gc.yaml'}: optim.grad_clip: must be a finite number (got nan)")
    assert not (tmp_path / "gc").exists()


def test_strict_dumps_writes_null_for_nan_and_infinity():
    text = strict_dumps({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": (2, math.nan)})
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": [2, None]}
