"""Downstream multiple-choice evaluation through lm-evaluation-harness, offline: tiny CPU model -> HF export ->
evaluate_hf on the shipped cloze task and on the FineWeb early-signal templates (fed with fake local rows)."""

import json
import math
import socket

import pytest
from click.testing import CliRunner

pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")

from cuvee.evaltasks import EvalTaskError, task_index
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
from cuvee.train.hf_export import export_checkpoint
from cuvee.train.lm_eval_backend import CLOZE_DATA, CLOZE_TASK, build_cloze_items, evaluate_hf
from cuvee.train.trainer import train

TEMPLATES = ["hellaswag_local", "arc_easy_local", "arc_challenge_local", "piqa_local", "siqa_local",
             "openbookqa_local", "winogrande_local", "commonsense_qa_local"]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmeval")
    train_rows, _ = split_heldout(load_wcxb())  # the cloze items come from the held-out pages only
    build_variant_mix(root / "train", "train", train_rows[:60], {"clean": 1.0}, max_doc_bytes=1500)
    cfg = TrainConfig(
        name="t", model={"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 128},
        data={"paths": [str(root / "train")], "seq_len": 128, "seed": 3},
        optim={"lr": 3e-3, "warmup_steps": 2}, steps=30, micro_batch=4, grad_accum=1, log_every=10,
        ckpt_every=0, out_dir=str(root / "run"), threads=1)
    res = train(cfg, quiet=True)
    return export_checkpoint(res["checkpoint"], root / "hf")


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket connection fails the test (and is recorded)."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled by test")

    monkeypatch.setattr(socket.socket, "connect", lambda self, *a: refuse(*a))
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, *a: refuse(*a))
    monkeypatch.setattr(socket, "create_connection", refuse)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    return attempts


def _check_mc(row, n):
    for metric in ("acc", "acc_norm"):
        assert 0.0 <= row[metric] <= 1.0
        se = row[f"{metric}_stderr"]
        assert se is not None and math.isfinite(se) and se >= 0
        # closed-form SE of a mean of 0/1 scores: sqrt(p (1 - p) / (n - 1))
        assert se == pytest.approx(math.sqrt(row[metric] * (1 - row[metric]) / (n - 1)), rel=1e-6)
    assert row["samples"] == n and row["items_per_s"] > 0


def test_cloze_offline_on_tiny_model(hf_dir, no_network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the task's relative data path must not depend on the cwd
    res = evaluate_hf(hf_dir, [CLOZE_TASK], limit=20, batch_size=8, device="cpu")
    assert list(res) == [CLOZE_TASK]
    _check_mc(res[CLOZE_TASK], 20)
    assert no_network == []  # nothing tried to reach the hub (or anything else)


def test_shipped_cloze_data_is_reproducible_and_well_formed():
    shipped = [json.loads(line) for line in CLOZE_DATA.read_text(encoding="utf-8").splitlines()]
    assert 200 <= len(shipped) <= 500
    assert shipped == build_cloze_items()
    heldout_urls = {r["url"] for r in split_heldout(load_wcxb())[1]}
    for it in shipped:
        assert len(it["choices"]) == 4 and len(set(it["choices"])) == 4 and 0 <= it["label"] < 4
        assert it["url"] in heldout_urls and it["context"]
    assert set(task_index()) >= {CLOZE_TASK, *TEMPLATES}


def test_missing_local_data_file_is_one_clear_line(hf_dir, tmp_path, monkeypatch):
    yaml_path = tmp_path / "mine.yaml"
    yaml_path.write_text("task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: nowhere.jsonl\n"
                         "test_split: test\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: c\n"
                         "doc_to_target: a\n")
    with pytest.raises(EvalTaskError) as err:
        evaluate_hf(hf_dir, [str(yaml_path)], limit=2)
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path / "nowhere.jsonl") in msg and "not found" in msg
    # the CLI hook prints the same line, no traceback
    from cuvee.train.cli import eval_downstream

    out = CliRunner().invoke(eval_downstream, [str(hf_dir), "--task", str(yaml_path), "--limit", "2"])
    assert out.exit_code == 1 and out.output.strip() == f"Error: {msg}"
    monkeypatch.delenv("CUVEE_EVAL_DATA", raising=False)
    with pytest.raises(EvalTaskError, match="needs \\$CUVEE_EVAL_DATA, which is not set"):
        evaluate_hf(hf_dir, ["piqa_local"], limit=2)
    with pytest.raises(EvalTaskError, match="unknown task"):
        evaluate_hf(hf_dir, ["no_such_task"])


def _fake_rows():
    abcd = ["A", "B", "C", "D"]
    return {
        "hellaswag/validation.jsonl": {"ind": 1, "activity_label": "Baking", "ctx_a": "She mixes flour.",
                                       "ctx_b": "she", "ctx": "", "endings": ["bakes it.", "[title] runs.",
                                                                              "sings.", "swims."], "label": "0"},
        "arc_easy/test.jsonl": {"id": "x", "question": "What melts ice?",
                                "choices": {"text": ["heat", "cold", "dark", "salt water"], "label": abcd},
                                "answerKey": "A"},
        "arc_challenge/test.jsonl": {"id": "y", "question": "What is hot?",
                                     "choices": {"text": ["fire", "snow", "ice", "rain"], "label": abcd},
                                     "answerKey": "A"},
        "piqa/validation.jsonl": {"goal": "Open a jar.", "sol1": "Twist the lid.", "sol2": "Eat the lid.",
                                  "label": 0},
        "siqa/validation.jsonl": {"context": "Kai was cold.", "question": "What will Kai do?",
                                  "answerA": "get a coat", "answerB": "swim", "answerC": "sleep", "label": "1"},
        "openbookqa/test.jsonl": {"id": "z", "question_stem": "The sun is a",
                                  "choices": {"text": ["star", "moon", "rock", "cloud"], "label": abcd},
                                  "answerKey": "A"},
        "winogrande/validation.jsonl": {"sentence": "The cup fell off the shelf because _ was tilted.",
                                        "option1": "the shelf", "option2": "the cup", "answer": "1"},
        "commonsense_qa/validation.jsonl": {"id": "w", "question": "Where do fish live?",
                                            "choices": {"label": abcd + ["E"],
                                                        "text": ["water", "sky", "desk", "car", "sand"]},
                                            "answerKey": "A"},
    }


def test_fineweb_templates_run_on_local_copies(hf_dir, no_network, tmp_path, monkeypatch):
    for rel, row in _fake_rows().items():
        path = tmp_path / "data" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(json.dumps(row) for _ in range(3)) + "\n")
    monkeypatch.setenv("CUVEE_EVAL_DATA", str(tmp_path / "data"))
    res = evaluate_hf(hf_dir, TEMPLATES, limit=2, batch_size=4)
    assert set(res) == set(TEMPLATES)
    for task in TEMPLATES:
        assert res[task]["samples"] == 2 and 0.0 <= res[task]["acc"] <= 1.0 and "acc_norm" in res[task]
    assert no_network == []


def test_anneal_report_holds_downstream_accuracy(tmp_path):
    """`downstream:` in an anneal exports each arm's averaged model and runs lm-eval on it, offline."""
    from cuvee.train.anneal import AnnealConfig, run_anneal
    from cuvee.train.config import TrainConfig
    from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout
    from cuvee.train.trainer import train

    rows, heldout = split_heldout(load_wcxb())
    rows = [r for r in rows if r.get("without")]
    build_variant_mix(tmp_path / "base", "base", rows[:40], {"clean": 1.0}, max_doc_bytes=600)
    build_variant_mix(tmp_path / "cand", "cand", rows[40:80], {"clean": 1.0}, max_doc_bytes=600)
    build_variant_mix(tmp_path / "ctrl", "ctrl", rows[40:80], {"boilerplate": 1.0}, max_doc_bytes=600)
    build_variant_mix(tmp_path / "held", "held", heldout[:8], {"clean": 1.0}, max_doc_bytes=600)
    cfg = TrainConfig(name="base", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 128},
                      data={"paths": [str(tmp_path / "base")], "seq_len": 128}, optim={"lr": 3e-3, "warmup_steps": 1},
                      steps=4, micro_batch=2, out_dir=str(tmp_path / "base_run"), threads=1, log_every=2)
    ckpt = train(cfg, quiet=True)["checkpoint"]
    ac = AnnealConfig(name="d", checkpoint=ckpt, candidate=[str(tmp_path / "cand")], control=[str(tmp_path / "ctrl")],
                      tokens=128 * 2 * 2, eval={"held": str(tmp_path / "held")}, eval_docs=8, seeds=[0, 1],
                      average_last=1, lr=3e-3, out_dir=str(tmp_path / "anneal"), threads=1,
                      downstream=["cuvee_wcxb_cloze"], downstream_limit=8)
    report = run_anneal(ac, quiet=True)
    row = report["downstream"]["cuvee_wcxb_cloze"]
    assert row["items"] == 8
    for metric in ("acc", "acc_norm"):
        m = row[metric]
        assert len(m["candidate_per_seed"]) == 2 and all(0 <= v <= 1 for v in m["candidate_per_seed"] + m["control_per_seed"])
        assert m["effect_candidate_minus_control"] == pytest.approx(m["candidate"] - m["control"])
    assert (tmp_path / "anneal" / "runs" / "candidate_seed0" / "hf_averaged" / "config.json").exists()
    assert "Downstream (lm-evaluation-harness" in (tmp_path / "anneal" / "report.md").read_text()
