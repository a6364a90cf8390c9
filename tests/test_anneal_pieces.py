"""Loader/anneal ``order: pieces`` (issue #26): every step reads the mix's weights to within one piece whatever
the documents' sizes, every seed reads another order, a piece never attends to another, a resume is exact, and
the anneal report gives the shares each seed read and its effect; arms whose sources are unknown are refused in
one line. Mixes are written by the real mixer (byte-level tokenizer) from texts in tmp."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cuvee.mixer import run_mix
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb
from cuvee.train.loader import IGNORE_INDEX, PackedLoader
from cuvee.train.piece_blend import ArmBlend, SourcesUnknownError, arm_sources
from cuvee.train.shards import open_shards
from cuvee.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
SEQ = 32
WORDS = "the of wine cask grape barrel vintage cellar oak harvest press yeast sugar acid tannin cork".split()
EOS = 256


def _jsonl(path, n, lo, hi, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
            f.write(json.dumps({"text": text, "id": f"{path.stem}-{i}"}) + "\n")
    return str(path)


def _mix(out, name, sources, target):
    cfg = {"name": name, "target_tokens": target, "seed": 5, "tokenizer": "bytes256.tiktoken", "shard_tokens": 4_000,
           "sources": sources}
    run_mix(cfg, out_dir=str(out))
    return str(out)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two arms of the issue's shape: 30 % of a few large documents (cand / other) + 70 % of many small ones."""
    tmp = tmp_path_factory.mktemp("pieces")
    cand = _jsonl(tmp / "cand.jsonl", 10, 60, 160, 1)  # ~700 bytes a document
    other = _jsonl(tmp / "other.jsonl", 10, 60, 160, 2)
    default = _jsonl(tmp / "default.jsonl", 80, 5, 30, 3)  # ~100 bytes a document
    held = _jsonl(tmp / "held.jsonl", 12, 10, 40, 4)
    arms = {}
    for arm, src in (("cand", cand), ("ctrl", other)):
        arms[arm] = _mix(tmp / arm, arm, [{"name": arm, "paths": src, "weight": 0.3, "max_epochs": 2},
                                          {"name": "default", "paths": default, "weight": 0.7, "max_epochs": 2}], 8_000)
    arms["held"] = _mix(tmp / "heldmix", "held", [{"name": "held", "paths": held, "weight": 1.0}], 1_200)
    return tmp, arms


def _token_sources(batch, doc_source):
    idx = batch["doc_index"].numpy().reshape(-1)
    return doc_source[idx[idx >= 0]]


def test_every_step_reads_the_weights_within_one_piece_for_every_seed(data):
    _, arms = data
    shards = open_shards(arms["cand"])
    arm = arm_sources(shards)
    assert arm.names == ["cand", "default"] and arm.weights == pytest.approx([0.3, 0.7])
    w = np.array(arm.weights)
    for seed in range(4):
        loader = PackedLoader(shards, SEQ, 2, seed=seed, order="pieces")
        epoch_tokens = ArmBlend(shards, arm, seed, SEQ, add_eos=True).num_tokens
        counts, worst_prefix, worst_step, read = np.zeros(2), 0.0, 0.0, 0
        for _ in range(150):  # 9,600 tokens: past the first epoch (~8,000)
            src = _token_sources(next(loader), arm.doc_source)
            step = np.bincount(src, minlength=2)
            worst_step = max(worst_step, float(np.abs(step - w * step.sum()).max()))
            for s in src:  # every token prefix of the first epoch
                if read >= epoch_tokens:
                    break
                counts[s] += 1
                read += 1
                worst_prefix = max(worst_prefix, float(np.abs(counts - w * read).max()))
        assert read == epoch_tokens
        assert worst_prefix <= SEQ, (seed, worst_prefix)  # one piece at most, at every prefix
        assert worst_step <= 2 * SEQ, (seed, worst_step)  # a step is the difference of two prefixes
    # the same steps in the mix's own order, shuffled within windows: the share wanders by whole documents
    windowed = PackedLoader(shards, SEQ, 2, seed=0, order="window")
    src = np.concatenate([_token_sources(next(windowed), arm.doc_source) for _ in range(20)])
    counts = np.cumsum(np.eye(2)[src], axis=0)
    assert np.abs(counts - np.outer(np.arange(1, len(src) + 1), w)).max() > 2 * SEQ


def test_seeds_read_different_orders(data):
    _, arms = data
    shards = open_shards(arms["cand"])

    def first_docs(seed):
        loader = PackedLoader(shards, SEQ, 2, seed=seed, order="pieces")
        return [int(d) for _ in range(30) for d in next(loader)["doc_index"].reshape(-1)]

    orders = [first_docs(s) for s in range(3)]
    assert orders[0] == first_docs(0)  # a seed is one order
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]


def test_pieces_are_masked_as_documents_of_their_own(data):
    """Rows are the piece stream of ArmBlend cut every SEQ tokens; segments (doc_ids), positions and labels
    restart at every piece, so no token attends to or predicts across a piece boundary, even within one
    document; a piece is a slice of its own document, whose EOS only ends the last piece, and never crosses a
    row boundary."""
    _, arms = data
    shards = open_shards(arms["cand"])
    arm = arm_sources(shards)
    view = ArmBlend(shards, arm, 3, SEQ, add_eos=True)
    pieces = [np.asarray(view.document(i), dtype=np.int64) for i in range(view.num_documents)]
    for i, p in enumerate(pieces):
        whole = np.asarray(shards.document(view.document_origin(i)), dtype=np.int64)
        whole = whole if whole[-1] == EOS else np.append(whole, EOS)  # the mixer writes it; else the loader adds it
        assert 1 <= len(p) <= SEQ and p.tobytes() in whole.tobytes()
        assert EOS not in p[:-1].tolist() and (p[-1] == EOS) == (whole[-len(p):] == p).all()
    ends = np.cumsum([len(p) for p in pieces])
    assert ends[-1] % SEQ == 0 and ((ends - 1) // SEQ == (ends - [len(p) for p in pieces]) // SEQ).all()  # no piece
    # crosses a row boundary, so a long document's pieces fill whole rows: ~1 segment a row, not 2
    assert len(pieces) < 1.3 * ends[-1] / SEQ
    stream = np.concatenate(pieces)
    piece_of = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
    starts = np.zeros(len(stream), dtype=bool)
    starts[np.cumsum([0] + [len(p) for p in pieces[:-1]])] = True
    loader = PackedLoader(shards, SEQ, 1, seed=3, order="pieces")
    rows = len(stream) // SEQ - 1
    for r in range(rows):
        b = next(loader)
        at = slice(r * SEQ, (r + 1) * SEQ)
        tokens, pos = b["input_ids"][0].numpy(), b["position_ids"][0].numpy()
        seg, labels, origin = b["doc_ids"][0].numpy(), b["labels"][0].numpy(), b["doc_index"][0].numpy()
        assert (tokens == stream[at]).all()
        new = starts[at].copy()
        new[0] = True  # every row starts a segment
        assert (seg == np.cumsum(new) - 1).all()  # a new segment exactly where a piece (or the row) starts
        run = np.arange(SEQ) - np.maximum.accumulate(np.where(new, np.arange(SEQ), 0))
        assert (pos == run).all()  # positions restart at every piece
        nxt = stream[r * SEQ + 1:(r + 1) * SEQ + 1]
        ends = np.append(starts[r * SEQ + 1:(r + 1) * SEQ + 1], False)[:SEQ]  # the next token starts a piece
        assert (labels[ends] == IGNORE_INDEX).all() and (labels[~ends] == nxt[~ends]).all()
        assert (origin == [view.document_origin(int(k)) for k in piece_of[at]]).all()


def test_loader_resume_is_exact_across_an_epoch(data):
    _, arms = data
    shards = open_shards(arms["cand"])
    whole = PackedLoader(shards, SEQ, 2, seed=7, order="pieces")
    expected = [next(whole) for _ in range(200)]  # crosses into the second epoch (a fresh piece order)
    first = PackedLoader(shards, SEQ, 2, seed=7, order="pieces")
    for _ in range(140):
        next(first)
    state = first.state_dict()
    assert state["order"] == "pieces" and state["piece_tokens"] == SEQ and state["epoch"] == 1
    again = PackedLoader(shards, SEQ, 2, seed=7, order="pieces")
    again.load_state_dict(json.loads(json.dumps(state)))
    for want in expected[140:]:
        got = next(again)
        for key in ("input_ids", "labels", "position_ids", "doc_ids", "doc_index"):
            assert torch.equal(got[key], want[key]), key
    with pytest.raises(ValueError, match="piece_tokens"):
        PackedLoader(shards, SEQ, 2, seed=7, order="pieces", piece_tokens=16).load_state_dict(state)


@pytest.fixture(scope="module")
def base(data):
    tmp, arms = data
    cfg = TrainConfig(name="base", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": SEQ},
                      data={"paths": [arms["ctrl"]], "seq_len": SEQ}, optim={"lr": 3e-3, "warmup_steps": 1},
                      steps=4, micro_batch=2, out_dir=str(tmp / "base_run"), threads=1, log_every=2)
    return train(cfg, quiet=True)["checkpoint"]


def test_anneal_arm_with_pieces_resumes_exactly(data, base):
    """An anneal arm is a train run from the branch checkpoint; stopped after 3 of 6 steps and resumed, it
    ends with the weights and losses of the uninterrupted run."""
    tmp, arms = data
    ckpt = base

    def arm(out):
        return TrainConfig(name="arm", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": SEQ},
                           data={"paths": [arms["cand"]], "seq_len": SEQ, "seed": 1, "order": "pieces"},
                           optim={"lr": 3e-3, "schedule": "linear", "min_lr_ratio": 0.0}, steps=6, micro_batch=2,
                           ckpt_every=3, out_dir=str(tmp / out), threads=1, log_every=1)

    whole = train(arm("whole"), init_from=ckpt, quiet=True)
    part = train(arm("part"), init_from=ckpt, stop_after=3, quiet=True)
    assert max(part["losses"]) == 3
    done = train(arm("part"), init_from=ckpt, resume=True, quiet=True)
    assert {k: done["losses"][k] for k in (4, 5, 6)} == {k: whole["losses"][k] for k in (4, 5, 6)}
    a = torch.load(whole["checkpoint"], weights_only=True)["model"]
    b = torch.load(done["checkpoint"], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_anneal_report_gives_each_seeds_shares_and_effect(data, base):
    from cuvee.train.anneal import AnnealConfig, run_anneal

    tmp, arms = data
    ckpt = base
    ac = AnnealConfig(name="p", checkpoint=ckpt, candidate=[arms["cand"]], control=[arms["ctrl"]], tokens=SEQ * 2 * 6,
                      eval={"held": arms["held"]}, eval_docs=12, seeds=[0, 1], average_last=1, lr=3e-3,
                      out_dir=str(tmp / "anneal"), threads=1, decontaminate=False)
    assert ac.order == "pieces"  # the anneal default
    report = run_anneal(ac, quiet=True)
    for arm, src in (("candidate", "cand"), ("control", "ctrl")):
        sh = report["shares"][arm]
        assert sh["method"].startswith("loader: realised over the 6 steps trained")
        for seed in ("0", "1"):
            rec = sh["per_seed"][seed]
            assert rec["tokens"] == SEQ * 2 * 6 and rec["steps"] == 6
            assert abs(rec["shares"][src] - 0.3) * rec["tokens"] <= SEQ  # within one piece
            assert rec["nominal"][src] == pytest.approx(0.3) and rec["prefix_gap"][src] <= SEQ  # at every step
            assert 0 <= rec["step_range"][src][0] <= rec["step_range"][src][1] <= 1
        assert sh["seed_range"][src][1] - sh["seed_range"][src][0] <= 2 * SEQ / (SEQ * 2 * 6)
    s = report["sources"]["held"]
    md = (tmp / "anneal" / "report.md").read_text()
    assert "unknown" not in md
    for i, seed in enumerate(("0", "1")):
        delta = s["control_per_seed"][i] - s["candidate_per_seed"][i]
        row = next(line for line in md.splitlines() if line.startswith(f"| {seed} | cand "))
        assert f"{delta:+.4f}" in row and "ctrl " in row and "(of 30.0 %; every step's prefix within " in row


def test_pieces_with_unknown_sources_is_refused_in_one_line(data, base, tmp_path):
    """A two-source demo mix records no document's source: order pieces (the default) is refused before any
    folder is made, in one line naming the folder and the way out; the CLI prints that line alone."""
    from cuvee.train.anneal import AnnealConfig, run_anneal

    tmp, arms = data
    ckpt = base
    rows = load_wcxb()[:30]
    build_variant_mix(tmp_path / "demo", "demo", rows, {"clean": 0.5, "shuffled": 0.5}, max_doc_bytes=300)
    out = tmp_path / "anneal"
    ac = AnnealConfig(checkpoint=ckpt, candidate=[str(tmp_path / "demo")], control=[arms["ctrl"]], tokens=SEQ * 2,
                      eval={"held": arms["held"]}, out_dir=str(out))
    with pytest.raises(SourcesUnknownError) as e:
        run_anneal(ac, quiet=True)
    msg = str(e.value)
    assert "\n" not in msg and str((tmp_path / "demo").resolve()) in msg and "order: window" in msg
    assert "lists 2 sources" in msg and not out.exists()
    proc = subprocess.run([sys.executable, "-m", "cuvee.cli", "anneal", "--checkpoint", ckpt, "--candidate",
                           str(tmp_path / "demo"), "--control", arms["ctrl"], "--tokens", "64",
                           "--eval", f"held={arms['held']}", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "CUVEE_DEBUG": ""})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "order: pieces needs the source" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    # the same arms in order window still run (their shares then come from the manifest, with the reason)
    ok = AnnealConfig(checkpoint=ckpt, candidate=[str(tmp_path / "demo")], control=[arms["ctrl"]], tokens=SEQ * 2,
                      eval={"held": arms["held"]}, out_dir=str(out), order="window", seeds=[0], average_last=1,
                      decontaminate=False, threads=1)
    report = run_anneal(ok, quiet=True)
    assert "not measured over the steps trained" in report["shares"]["candidate"]["method"]
    assert report["shares"]["control"]["method"].startswith("loader: realised")


def test_train_with_order_pieces_and_unknown_sources_is_refused_before_its_folder(tmp_path):
    """`cuvee train` with data.order: pieces on a mix whose documents' sources are unknown stops in one line
    before it claims its output folder (not later, when the loader is built)."""
    rows = load_wcxb()[:30]
    build_variant_mix(tmp_path / "demo", "demo", rows, {"clean": 0.5, "shuffled": 0.5}, max_doc_bytes=300)
    out = tmp_path / "run"
    cfg = TrainConfig(name="p", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": SEQ},
                      data={"paths": [str(tmp_path / "demo")], "seq_len": SEQ, "order": "pieces"},
                      steps=2, micro_batch=2, out_dir=str(out), threads=1)
    with pytest.raises(SourcesUnknownError) as e:
        train(cfg, quiet=True)
    assert "\n" not in str(e.value) and "order: window" in str(e.value)
    assert not out.exists()
