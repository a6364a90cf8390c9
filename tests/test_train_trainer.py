"""Training loop: exact resume on CPU, falling loss, schedules, checkpoint averaging, JSONL log."""

import json

import numpy as np
import pytest
import torch

from cuvee.train.checkpoint import average_state_dicts, list_checkpoints
from cuvee.train.config import OptimConfig, TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
from cuvee.train.schedule import lr_at
from cuvee.train.trainer import train


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    train_rows, heldout = split_heldout(load_wcxb())
    build_variant_mix(root / "train", "train", train_rows[:60], {"clean": 1.0}, max_doc_bytes=1500)
    build_variant_mix(root / "heldout", "heldout", heldout[:10], {"clean": 1.0}, max_doc_bytes=1500)
    return root


def _cfg(shards, out, **kw):
    base = dict(
        name="t", model={"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
        data={"paths": [str(shards / "train")], "seq_len": 64, "seed": 3},
        optim={"lr": 3e-3, "warmup_steps": 2, "schedule": "cosine"}, steps=6, micro_batch=2, grad_accum=2,
        log_every=1, ckpt_every=3, out_dir=str(out), threads=1,
    )
    base.update(kw)
    return TrainConfig(**base)


def test_resume_reproduces_uninterrupted_losses(demo_shards, tmp_path):
    full = train(_cfg(demo_shards, tmp_path / "full"), quiet=True)
    first = train(_cfg(demo_shards, tmp_path / "split"), stop_after=3, quiet=True)
    assert first["step"] == 3 and len(list_checkpoints(tmp_path / "split")) == 1
    rest = train(_cfg(demo_shards, tmp_path / "split"), quiet=True)  # resumes from step 3
    assert set(rest["losses"]) == {4, 5, 6}
    for step in (4, 5, 6):
        assert rest["losses"][step] == full["losses"][step]  # bit-exact, not approximately
    a = torch.load(full["checkpoint"], weights_only=True)["model"]
    b = torch.load(rest["checkpoint"], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = [json.loads(line) for line in open(tmp_path / "full" / "log.jsonl")]
    assert [r["step"] for r in log if r["event"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert all(r["tokens_per_s"] > 0 and "mfu" in r for r in log)


def test_tiny_model_loss_falls_and_eval_reports_bpb(demo_shards, tmp_path):
    cfg = _cfg(demo_shards, tmp_path / "run", steps=40, grad_accum=1, ckpt_every=0, log_every=10,
               eval_paths={"heldout": str(demo_shards / "heldout")}, eval_docs=5)
    res = train(cfg, quiet=True)
    losses = res["losses"]
    assert np.mean([losses[s] for s in range(36, 41)]) < np.mean([losses[s] for s in range(1, 6)]) - 1.0
    ev = res["eval"]["heldout"]
    assert ev["documents"] == 5 and ev["bpb"] is not None
    assert abs(ev["bpb"] - ev["loss"] / np.log(2) * ev["tokens"] / ev["bytes"]) < 1e-9
    assert ev["bpb"] < 8.0  # better than uniform over bytes (log2(257) bits per token ~ per byte)


def test_schedules():
    o = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1, schedule="cosine")
    lrs = [lr_at(s, 100, o) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1) and all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    wsd = OptimConfig(lr=1.0, warmup_steps=0, min_lr_ratio=0.0, schedule="wsd", decay_frac=0.2)
    w = [lr_at(s, 100, wsd) for s in range(100)]
    assert w[79] == 1.0 and w[80] < 1.0 and w[-1] == pytest.approx(0.0)
    lin = OptimConfig(lr=2.0, warmup_steps=0, min_lr_ratio=0.0, schedule="linear")
    assert lr_at(0, 4, lin) == pytest.approx(1.5) and lr_at(3, 4, lin) == pytest.approx(0.0)


def test_average_state_dicts():
    a, b = {"w": torch.ones(2), "n": torch.tensor(3)}, {"w": torch.zeros(2), "n": torch.tensor(5)}
    avg = average_state_dicts([a, b])
    assert torch.equal(avg["w"], torch.full((2,), 0.5)) and avg["n"] == 5
