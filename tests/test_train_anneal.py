"""Anneal ablation end to end (tiny): candidate vs control from one checkpoint, checkpoint averaging,
per-source bpb, bootstrap + seed noise, Markdown + JSON report. The candidate (clean text) must beat a
control made of navigation boilerplate on held-out clean text, beyond the noise estimate."""

import json

import pytest

from cuvee.train.anneal import AnnealConfig, run_anneal
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
from cuvee.train.trainer import train


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("anneal")
    rows, heldout = split_heldout(load_wcxb())
    rows = [r for r in rows if r.get("without")]
    build_variant_mix(root / "base", "base", rows[:80], {"clean": 0.5, "boilerplate": 0.5}, max_doc_bytes=1200)
    build_variant_mix(root / "cand", "cand", rows[80:200], {"clean": 1.0}, max_doc_bytes=1200)
    build_variant_mix(root / "ctrl", "ctrl", rows[80:200], {"boilerplate": 1.0}, max_doc_bytes=1200)
    build_variant_mix(root / "held", "held", heldout[:24], {"clean": 1.0}, max_doc_bytes=1200)
    cfg = TrainConfig(name="base", model={"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
                      data={"paths": [str(root / "base")], "seq_len": 64}, optim={"lr": 3e-3, "warmup_steps": 3},
                      steps=30, micro_batch=4, out_dir=str(root / "base_run"), threads=1, log_every=10)
    res = train(cfg, quiet=True)
    return root, res["checkpoint"]


def test_anneal_ranks_clean_candidate_above_boilerplate_control(base_run):
    root, checkpoint = base_run
    ac = AnnealConfig(name="t", checkpoint=checkpoint, candidate=[str(root / "cand")], control=[str(root / "ctrl")],
                      tokens=64 * 4 * 12, eval={"clean": str(root / "held")}, eval_docs=24, seeds=[0, 1],
                      average_last=2, bootstrap=200, lr=3e-3, out_dir=str(root / "anneal_out"), threads=1)
    report = run_anneal(ac, quiet=True)
    s = report["sources"]["clean"]
    assert s["metric"] == "bpb" and s["documents"] == 24
    assert s["candidate"] < s["control"]
    assert s["bootstrap_ci95"][0] > 0 and s["beyond_noise"] and s["verdict"] == "candidate better"
    # each run: LR annealed linearly to 0, last 2 checkpoints averaged
    for arm in ("candidate", "control"):
        for seed in ("0", "1"):
            assert len(report["runs"][arm][seed]["averaged_checkpoints"]) == 2
    log = [json.loads(x) for x in open(root / "anneal_out/runs/candidate_seed0/log.jsonl")]
    assert log[-1]["lr"] == pytest.approx(0.0)
    md = (root / "anneal_out/report.md").read_text()
    assert "| clean | bpb |" in md and "candidate better" in md
    assert json.loads((root / "anneal_out/report.json").read_text())["sources"]["clean"]["verdict"] == "candidate better"
