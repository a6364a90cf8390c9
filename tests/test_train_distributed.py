"""FSDP2 under torchrun, on CPU (gloo): 2 ranks train, checkpoint, resume, and match an uninterrupted run."""

import json
import os
import subprocess
import sys

import pytest
import torch

from cuvee.train.demo_data import build_variant_mix, load_wcxb

pytestmark = pytest.mark.slow


def _torchrun(config, out, steps, extra=(), ok=True):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "cuvee.cli", "train", str(config),
           "--set", f"steps={steps}", "--set", f"out_dir={out}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if not ok:
        return proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr  # every rank left the process group cleanly
    return [(r["step"], r["loss"]) for r in map(json.loads, open(out / "log.jsonl")) if r["event"] == "train"]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_fsdp2_two_ranks_resume_exactly(tmp_path):
    build_variant_mix(tmp_path / "data", "d", load_wcxb()[:40], {"clean": 1.0}, max_doc_bytes=800)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"name: d\nmodel: {{dim: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 64}}\n"
        f"data: {{paths: ['{tmp_path / 'data'}'], seq_len: 64}}\nmicro_batch: 2\nlog_every: 1\nckpt_every: 2\nthreads: 1\n"
        f"optim: {{lr: 3.0e-3, warmup_steps: 1}}\n"
    )
    full = _torchrun(cfg, tmp_path / "full", 4)
    _torchrun(cfg, tmp_path / "split", 4, ["--stop-after", "3"])  # "preempted" after step 3, checkpoint at 2
    (tmp_path / "split" / "checkpoints" / "step_0000003.pt").unlink()  # as if killed before saving step 3
    resumed = _torchrun(cfg, tmp_path / "split", 4)
    assert resumed == full  # steps 1..4 once each, losses bit-exact
    assert [s for s, _ in full] == [1, 2, 3, 4] and full[3][1] < full[0][1]
    # another plan in the same folder: both ranks stop with the message, none hangs
    proc = _torchrun(cfg, tmp_path / "split", 4, ["--set", "optim.lr=0.01"], ok=False)
    assert proc.returncode != 0 and "optim.lr" in proc.stderr + proc.stdout
