"""FSDP2 under torchrun, on CPU (gloo): 2 ranks train, checkpoint, resume, and match an uninterrupted run."""

import json
import os
import subprocess
import sys

import pytest
import torch

from cuvee.train.demo_data import build_variant_mix, load_wcxb

pytestmark = pytest.mark.slow


def _torchrun(config, out, steps, extra=()):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "cuvee.cli", "train", str(config),
           "--set", f"steps={steps}", "--set", f"out_dir={out}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["step"]: r["loss"] for r in map(json.loads, open(out / "log.jsonl")) if r["event"] == "train"}


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
    _torchrun(cfg, tmp_path / "split", 4, ["--stop-after", "2"])  # "preempted" after step 2
    resumed = _torchrun(cfg, tmp_path / "split", 4)
    assert [resumed[s] for s in (3, 4)] == [full[s] for s in (3, 4)]
    assert full[4] < full[1]
