"""``cuvee train CONFIG --export-hf DIR`` killed while it exports (training done), then run again: the rerun has
nothing left to train, and must still export. It exited 0 without exporting (the export followed only a checkpoint
written in the same session), leaving the folder a kill cut half-way. Found by the fault-injection driver
(benchmarks/_faults/export.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from cuvee.train.demo_data import build_variant_mix, load_wcxb

REPO = Path(__file__).resolve().parents[1]


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "cuvee.cli", "train", *map(str, args)]


def test_a_rerun_with_nothing_left_to_train_still_exports(tmp_path):
    build_variant_mix(tmp_path / "data", "d", load_wcxb()[:20], {"clean": 1.0}, max_doc_bytes=600)
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({
        "name": "t", "model": {"dim": 32, "n_layers": 1, "n_heads": 4, "max_seq_len": 64},
        "data": {"paths": [str(tmp_path / "data")], "seq_len": 64}, "steps": 4, "micro_batch": 2, "ckpt_every": 2,
        "threads": 1, "out_dir": str(tmp_path / "run")}))
    hf = tmp_path / "hf"
    argv = _cli(config, "--export-hf", hf)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (hf / ".cuvee-plan.json").exists():  # training is done and the export has begun
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert {"config.json", "model.safetensors"} <= {p.name for p in hf.iterdir()}, rerun.stdout[-2000:]
    assert f"exported Hugging Face Llama to {hf}" in rerun.stdout

    from transformers import LlamaForCausalLM

    assert LlamaForCausalLM.from_pretrained(hf).config.hidden_size == 32
