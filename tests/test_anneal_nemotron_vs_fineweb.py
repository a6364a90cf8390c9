"""configs/train/anneal_nemotron_vs_fineweb.yaml and its mix configs, validated without running them.

The anneal itself (two recipe runs, the tiny checkpoint, 6 anneals) takes ~15 minutes on CPU, so it is not
part of the suite; these checks hold the comparison to what its header claims: equal tokens and tokenizer in
both arms, the candidate carrying mixes/nemotron_cc.yaml's selections, no eval page's split in either arm, the
WCXB eval pages outside the tiny checkpoint's training data, and the header's commands naming real files.
"""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "configs" / "train"
CONFIG = TRAIN / "anneal_nemotron_vs_fineweb.yaml"


def _mix(path):
    from cuvee.mixer.config import load_mix_config

    return load_mix_config(REPO / path)


def _anneal():
    from cuvee.train.anneal import AnnealConfig
    from cuvee.train.config import build_config, read_config_yaml

    return build_config(AnnealConfig, read_config_yaml(str(CONFIG)), str(CONFIG))


def test_config_loads_and_arms_are_equal_but_for_their_data():
    ac = _anneal()
    assert ac.name == "nemotron_vs_fineweb" and len(ac.seeds) >= 2 and ac.decontaminate and ac.containment
    (cand,), (ctrl,) = (_mix(p) for p in ac.candidate), (_mix(p) for p in ac.control)
    evals = {name: _mix(p) for name, p in ac.eval.items()}
    assert cand.target_tokens == ctrl.target_tokens >= ac.tokens  # equal tokens; the anneal reads within the mix
    assert cand.seed == ctrl.seed
    assert all(cfg.tokenizer == cand.tokenizer for cfg in (ctrl, *evals.values()))
    from cuvee.mixer import load_tokenizer
    from cuvee.train.demo_data import BYTE_TOKENIZER

    tok = load_tokenizer(cand.tokenizer)  # the ids the tiny checkpoint was trained on: byte values, EOS 256
    text = "Caf\u00e9 <|endoftext|> 42"
    assert tok.encode(text) == list(text.encode("utf-8"))
    assert (tok.eos_id, tok.vocab_size) == (BYTE_TOKENIZER["eos_id"], BYTE_TOKENIZER["vocab_size"])
    assert [s.paths for s in cand.sources] == [["runs/nemotron_cc/output"]]
    assert [s.paths for s in ctrl.sources] == [["runs/fineweb/output"]]


def test_candidate_carries_the_nemotron_cc_mix_selections():
    (cand,) = (_mix(p) for p in _anneal().candidate)
    shipped = _mix("mixes/nemotron_cc.yaml")
    pick = [[(s.name, s.where, s.weight, s.max_epochs) for s in src.selections] for src in (cand.sources[0], shipped.sources[0])]
    assert pick[0] == pick[1] and pick[0]


def test_arms_exclude_the_held_out_web_split():
    from cuvee.mixer.where import matches

    ac = _anneal()
    web = _mix(ac.eval["web"]).sources[0]
    assert web.paths == ["runs/nemotron_cc/output"]
    for path in (*ac.candidate, *ac.control):
        src = _mix(path).sources[0]
        assert src.where["url"] == {"lt": web.where["url"]["gte"]}, path  # one boundary, opposite sides
        for url in ("http://www.r", "http://www.rpbridge.net/", "https://a.org/", "http://www.q.com/", "http://a.cn/"):
            assert matches(url, src.where["url"]) != matches(url, web.where["url"])


def test_wcxb_eval_pages_are_held_out_from_the_checkpoint():
    from cuvee.train.demo_data import load_wcxb, split_heldout

    ac = _anneal()
    src = _mix(ac.eval["wcxb"]).sources[0]
    ids = src.where["file_id"]["in"]
    train, heldout = split_heldout(load_wcxb())
    assert len(ids) == len(set(ids)) == ac.eval_docs
    assert set(ids) <= {r["file_id"] for r in heldout} and not set(ids) & {r["file_id"] for r in train}
    assert re.search(r"checkpoint: runs/train/tiny/checkpoints/step_\d+\.pt", CONFIG.read_text())
    tiny = yaml.safe_load((TRAIN / "tiny.yaml").read_text())
    assert tiny["data"]["paths"] == ["runs/train_demo_data/default"]  # built from split_heldout's training side


def test_header_commands_name_real_files():
    header = [line[1:].strip() for line in CONFIG.read_text().splitlines() if line.startswith("#")]
    commands = [line for line in header if line.startswith("cuvee ")]
    assert [c.split()[1] for c in commands] == ["run", "run", "train", "mix", "mix", "mix", "mix", "anneal"]
    for c in commands:
        for arg in c.split()[2:]:
            if arg.endswith(".yaml"):
                assert (REPO / arg).is_file(), arg


def test_bits_per_byte_on_a_rank_file_tokenizer_mix(tmp_path):
    """The arms and eval sets are mixed with bytes256.tiktoken, whose manifest names the rank file but not its
    path: held-out bits per byte must count the documents' UTF-8 bytes (the anneal stopped on it before), and a
    manifest whose fingerprint is not the shipped file's gets no bpb rather than a wrong one."""
    import json

    import torch

    from cuvee.mixer import run_mix
    from cuvee.train.config import ModelConfig
    from cuvee.train.evaluate import evaluate
    from cuvee.train.model import Llama
    from cuvee.train.shards import open_shards

    texts = ["Caf\u00e9 au lait, s'il vous pla\u00eet.", "Stra\u00dfe und Gr\u00fc\u00dfe " * 3, "plain ascii text " * 4]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "mix"
    total = sum(len(t.encode()) + 1 for t in texts)
    run_mix({"name": "m", "target_tokens": total, "seed": 1, "tokenizer": "bytes256.tiktoken", "output_dir": str(out),
             "sources": [{"name": "s", "paths": [str(src)], "weight": 1.0}]}, out_dir=str(out))
    torch.manual_seed(0)
    model = Llama(ModelConfig(vocab_size=257, dim=16, n_layers=1, n_heads=2, max_seq_len=64))
    res = evaluate(model, open_shards([str(out)]), seq_len=64)
    assert res["documents"] == 3 and res["bytes"] == sum(len(t.encode()) for t in texts)
    assert res["bpb"] is not None and abs(res["bpb"] - res["loss"] * res["tokens"] / res["bytes"] / 0.6931471805599453) < 1e-9
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"]["fingerprint"] = "0" * 64
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert evaluate(model, open_shards([str(out)]), seq_len=64)["bpb"] is None
