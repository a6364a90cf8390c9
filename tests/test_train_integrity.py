"""A training folder is trustworthy: checkpoints never execute code, one folder never mixes two runs,
a second process is refused, and a resumed log.jsonl never repeats steps."""

import json
import os

import pytest
import torch
from click.testing import CliRunner

from cuvee.kernel.workdir import PLAN, FolderError, FolderLock
from cuvee.train.anneal import AnnealConfig, run_anneal
from cuvee.train.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from cuvee.train.cli import train as train_cli
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb
from cuvee.train.trainer import train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    rows = load_wcxb()
    build_variant_mix(root / "a", "a", rows[:30], {"clean": 1.0}, max_doc_bytes=800)
    build_variant_mix(root / "b", "b", rows[30:60], {"clean": 1.0}, max_doc_bytes=800)
    build_variant_mix(root / "heldout", "heldout", rows[60:75], {"clean": 1.0}, max_doc_bytes=800)  # no arm trains on it
    return root


def _cfg(root, out, **kw):
    base = dict(
        name="t", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
        data={"paths": [str(root / "a")], "seq_len": 64, "seed": 3},
        optim={"lr": 3e-3, "warmup_steps": 1}, steps=6, micro_batch=2, log_every=1, ckpt_every=3,
        out_dir=str(out), threads=1,
    )
    base.update(kw)
    return TrainConfig(**base)


def _log_steps(out, event="train"):
    return [r["step"] for r in map(json.loads, open(out / "log.jsonl")) if r["event"] == event]


class _Evil:
    """Unpickling this runs ``touch <marker>``: what a crafted checkpoint could do to whoever loads it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _plant_evil(path, marker):
    torch.save({"step": 5, "model": _Evil(marker), "config": {}, "model_config": {}}, path)


# ---- 1. checkpoints are data, never code ---------------------------------------------------------

def test_crafted_checkpoint_is_refused_everywhere(data, tmp_path):
    out = tmp_path / "run"
    train(_cfg(data, out), stop_after=3, quiet=True)
    marker = tmp_path / "pwned"
    evil = out / "checkpoints" / "step_0000005.pt"  # now the "latest" checkpoint
    _plant_evil(evil, marker)

    with pytest.raises(CheckpointError, match="step_0000005.pt"):
        load_checkpoint(evil)
    with pytest.raises(CheckpointError):
        train(_cfg(data, out), quiet=True)  # auto-resume picks the latest
    res = CliRunner().invoke(train_cli, [str(_yaml(tmp_path, data, out))])
    assert res.exit_code == 1 and "Error:" in res.output and "step_0000005.pt" in res.output
    assert "Traceback" not in res.output
    with pytest.raises(CheckpointError):
        train(_cfg(data, tmp_path / "branch"), init_from=evil, quiet=True)
    with pytest.raises(CheckpointError):
        run_anneal(AnnealConfig(checkpoint=str(evil), candidate=[str(data / "a")], control=[str(data / "b")],
                                tokens=256, eval={"a": str(data / "a")}, out_dir=str(tmp_path / "anneal")), quiet=True)
    from cuvee.train.hf_export import export_checkpoint

    with pytest.raises(CheckpointError):
        export_checkpoint(evil, tmp_path / "hf")
    assert not marker.exists()


def test_genuine_checkpoint_loads_weights_only(data, tmp_path):
    res = train(_cfg(data, tmp_path / "run", steps=3), quiet=True)
    state = torch.load(res["checkpoint"], map_location="cpu", weights_only=True)
    assert state["step"] == 3 and state["loader"][0]["cursor"] >= 0 and torch.is_tensor(state["rng"])


# ---- 2. a folder is bound to one run -------------------------------------------------------------

def test_resume_with_other_config_or_data_stops_before_any_step(data, tmp_path):
    out = tmp_path / "run"
    train(_cfg(data, out), stop_after=3, quiet=True)
    plan = json.loads((out / PLAN).read_text())
    before = (out / "log.jsonl").read_text()
    with pytest.raises(FolderError, match=r"optim\.lr") as e:
        train(_cfg(data, out, optim={"lr": 1e-3, "warmup_steps": 1}), quiet=True)
    assert "--fresh" in str(e.value)
    with pytest.raises(FolderError, match="data"):
        train(_cfg(data, out, data={"paths": [str(data / "b")], "seq_len": 64, "seed": 3}), quiet=True)
    with pytest.raises(FolderError, match="steps"):
        train(_cfg(data, out, steps=9), quiet=True)
    assert (out / "log.jsonl").read_text() == before and len(list_checkpoints(out)) == 1
    assert json.loads((out / PLAN).read_text()) == plan

    # what does not change results may differ: log frequency, checkpoint cadence/keep count, threads
    res = train(_cfg(data, out, log_every=2, keep_checkpoints=5, ckpt_every=2, threads=2), quiet=True)
    assert res["step"] == 6 and set(res["losses"]) == {4, 5, 6}

    # --fresh (resume=False) starts over in the same folder with the new plan
    res = train(_cfg(data, out, optim={"lr": 1e-3, "warmup_steps": 1}), resume=False, quiet=True)
    assert set(res["losses"]) == {1, 2, 3, 4, 5, 6} and _log_steps(out) == [1, 2, 3, 4, 5, 6]
    assert json.loads((out / PLAN).read_text())["binding"]["config"]["optim"]["lr"] == 1e-3


def _reverse_tokens(path):
    """The same tokens in reverse order: same size, valid ids, other text everywhere; mtime kept."""
    import numpy as np

    st = path.stat()
    path.write_bytes(np.fromfile(path, dtype=np.uint16)[::-1].tobytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_shard_rewritten_at_the_same_size_stops_the_resume_but_a_moved_mix_resumes(data, tmp_path):
    """The manifest names what the shards should be; each .bin/.idx is bound by its size and head/tail SHA-256
    too, so a shard rewritten in place (manifest untouched, even the mtime kept) is refused in one line naming
    it, after a kill and after a finished run; a copy of the mix elsewhere (new paths and mtimes) resumes."""
    import shutil

    from cuvee.kernel.workdir import fingerprint

    mix = tmp_path / "mix"
    shutil.copytree(data / "a", mix)
    shard = mix / "a_00000.bin"
    out = tmp_path / "run"
    cfg = _cfg(data, out, data={"paths": [str(mix)], "seq_len": 64, "seed": 3})
    train(cfg, stop_after=3, quiet=True)
    inputs = json.loads((out / PLAN).read_text())["inputs"]
    assert {str(shard.resolve()), str(shard.with_suffix(".idx").resolve())} <= set(inputs)
    assert "mtime_ns" not in inputs[str(shard.resolve())]  # content only: a copied mix resumes
    before = (out / "log.jsonl").read_text()
    original = shard.read_bytes()
    _reverse_tokens(shard)
    with pytest.raises(FolderError, match=r"a_00000\.bin changed since .*\(same size, other content\)"
                       r".*--fresh") as e:
        train(cfg, quiet=True)
    assert "\n" not in str(e.value)
    assert (out / "log.jsonl").read_text() == before and len(list_checkpoints(out)) == 1

    shard.write_bytes(original)  # restored: resumes, and finishes
    assert train(cfg, quiet=True)["step"] == 6
    _reverse_tokens(shard)
    with pytest.raises(FolderError, match=r"a_00000\.bin changed"):
        train(cfg, quiet=True)
    shard.write_bytes(original)

    moved = tmp_path / "moved"
    shutil.copytree(mix, moved, copy_function=shutil.copyfile)  # new paths, new modification times
    out2 = tmp_path / "run2"
    train(_cfg(data, out2, data={"paths": [str(mix)], "seq_len": 64, "seed": 3}), stop_after=3, quiet=True)
    res = train(_cfg(data, out2, data={"paths": [str(moved)], "seq_len": 64, "seed": 3}), quiet=True)
    assert res["step"] == 6 and set(res["losses"]) == {4, 5, 6}

    # a plan recorded without input stamps resumes as it did (the kernel compares stamps only where both have them)
    out3 = tmp_path / "run3"
    train(_cfg(data, out3, data={"paths": [str(mix)], "seq_len": 64, "seed": 3}), stop_after=3, quiet=True)
    plan = json.loads((out3 / PLAN).read_text())
    plan.pop("inputs")
    assert plan["fingerprint"] == fingerprint(plan["binding"])
    (out3 / PLAN).write_text(json.dumps(plan))
    assert train(_cfg(data, out3, data={"paths": [str(mix)], "seq_len": 64, "seed": 3}), quiet=True)["step"] == 6


def test_shard_whose_size_disagrees_with_its_manifest_is_refused(data, tmp_path):
    import shutil

    mix = tmp_path / "mix"
    shutil.copytree(data / "a", mix)
    shard = mix / "a_00000.bin"
    shard.write_bytes(shard.read_bytes() + b"\0\0")  # cut short / appended to: the .idx no longer covers it
    with pytest.raises(ValueError, match=r"a_00000\.bin: [\d,]+ bytes, but its manifest\.json lists"):
        train(_cfg(data, tmp_path / "run", data={"paths": [str(mix)], "seq_len": 64, "seed": 3}), quiet=True)
    assert not (tmp_path / "run" / PLAN).exists()


def test_vocab_padding_is_bound_by_the_resolved_vocab(data, tmp_path):
    """A run started unpadded (as before vocab_multiple existed) resumes with vocab_multiple=1 and is refused
    with the padded default, whose model has another vocab_size."""
    out = tmp_path / "run"
    train(_cfg(data, out, vocab_multiple=1), stop_after=3, quiet=True)
    assert json.loads((out / PLAN).read_text())["binding"]["config"]["model"]["vocab_size"] == 257
    assert "vocab_multiple" not in json.loads((out / PLAN).read_text())["binding"]["config"]
    with pytest.raises(FolderError, match="vocab_size"):
        train(_cfg(data, out), quiet=True)
    res = train(_cfg(data, out, vocab_multiple=1), quiet=True)
    assert res["step"] == 6 and res["model"]["vocab_size"] == 257
    fresh = train(_cfg(data, tmp_path / "padded"), quiet=True)
    assert fresh["model"]["vocab_size"] == 384


def test_cli_reports_binding_mismatch_in_one_line(data, tmp_path):
    out = tmp_path / "run"
    cfg = _yaml(tmp_path, data, out)
    assert CliRunner().invoke(train_cli, [str(cfg), "--stop-after", "3"]).exit_code == 0
    res = CliRunner().invoke(train_cli, [str(cfg), "--set", "optim.lr=0.01"])
    assert res.exit_code == 1 and res.output.startswith("Error:") and "optim.lr" in res.output
    assert "--fresh" in res.output and "Traceback" not in res.output
    assert "now 0.01 Rerun" not in res.output  # the plan's lines are joined as one line, not run together
    res = CliRunner().invoke(train_cli, [str(cfg), "--set", "optim.lr=0.01", "--fresh"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(train_cli, [str(cfg), "--set", "optim.lr=0.02", "--no-resume"])  # its older name
    assert res.exit_code == 0, res.output


def test_foreign_folder_and_concurrent_run_are_refused(data, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FolderError, match="did not create"):
        train(_cfg(data, foreign), quiet=True)
    with pytest.raises(FolderError, match="did not create"):
        train(_cfg(data, foreign), resume=False, quiet=True)
    assert (foreign / "notes.txt").read_text() == "mine"

    out = tmp_path / "run"
    train(_cfg(data, out, steps=2), quiet=True)
    with FolderLock(out, "another cuvee train"):
        with pytest.raises(FolderError, match="in use"):
            train(_cfg(data, out, steps=2), quiet=True)
        with pytest.raises(FolderError, match="in use"):
            train(_cfg(data, out, steps=2), resume=False, quiet=True)  # never deletes under a running process
        res = CliRunner().invoke(train_cli, [str(_yaml(tmp_path, data, out, steps=2))])
        assert res.exit_code == 1 and "in use" in res.output and "Traceback" not in res.output
    assert list_checkpoints(out)


def test_resume_cleans_stale_tmp(data, tmp_path):
    out = tmp_path / "run"
    train(_cfg(data, out), stop_after=3, quiet=True)
    stale = out / "checkpoints" / "step_0000004.pt.tmp"  # a torch.save killed half-way
    stale.write_bytes(b"half a checkpoint")
    train(_cfg(data, out), quiet=True)
    assert not stale.exists()


def test_anneal_binds_its_folders(data, tmp_path):
    base = train(_cfg(data, tmp_path / "base", steps=3), quiet=True)
    kw = dict(checkpoint=base["checkpoint"], candidate=[str(data / "a")], control=[str(data / "b")], tokens=64 * 2 * 2,
              eval={"heldout": str(data / "heldout")}, eval_docs=4, seeds=[0], average_last=1, bootstrap=100,
              out_dir=str(tmp_path / "anneal"), threads=1)
    run_anneal(AnnealConfig(**kw), quiet=True)
    out = tmp_path / "anneal"
    assert (out / PLAN).exists() and (out / "runs" / "candidate_seed0" / PLAN).exists()
    run_anneal(AnnealConfig(**kw), quiet=True)  # same plan: resumes (nothing left to train)
    with pytest.raises(FolderError, match="tokens"):
        run_anneal(AnnealConfig(**{**kw, "tokens": 64 * 2 * 4}), quiet=True)
    with FolderLock(out / "runs" / "control_seed0"):
        with pytest.raises(FolderError, match="in use"):
            run_anneal(AnnealConfig(**kw), quiet=True)
    with FolderLock(out):
        with pytest.raises(FolderError, match="in use"):
            run_anneal(AnnealConfig(**kw), quiet=True)
    report = run_anneal(AnnealConfig(**{**kw, "tokens": 64 * 2 * 4}), fresh=True, quiet=True)
    assert report["config"]["tokens"] == 64 * 2 * 4


# ---- 3. a resumed log never repeats steps --------------------------------------------------------

def test_resumed_log_has_each_step_once(data, tmp_path):
    full = train(_cfg(data, tmp_path / "full", steps=8, ckpt_every=4), quiet=True)
    train(_cfg(data, tmp_path / "split", steps=8, ckpt_every=4), stop_after=6, quiet=True)
    # stop_after=6 checkpoints at 6 too; drop it, as if the process had been killed between 4 and 6
    (tmp_path / "split" / "checkpoints" / "step_0000006.pt").unlink()
    assert _log_steps(tmp_path / "split") == [1, 2, 3, 4, 5, 6]
    train(_cfg(data, tmp_path / "split", steps=8, ckpt_every=4), quiet=True)  # resumes at 4
    steps = _log_steps(tmp_path / "split")
    assert steps == _log_steps(tmp_path / "full") == list(range(1, 9))
    losses = {r["step"]: r["loss"] for r in map(json.loads, open(tmp_path / "split" / "log.jsonl"))}
    assert losses == {s: full["losses"][s] for s in range(1, 9)}


def test_rerunning_a_finished_run_does_not_repeat_eval(data, tmp_path):
    cfg = _cfg(data, tmp_path / "run", steps=3, eval_paths={"b": str(data / "b")}, eval_docs=3)
    train(cfg, quiet=True)
    train(cfg, quiet=True)
    assert _log_steps(tmp_path / "run") == [1, 2, 3] and _log_steps(tmp_path / "run", "eval") == [3]


def _yaml(tmp_path, data, out, steps=6):
    p = tmp_path / f"cfg_{out.name}.yaml"
    p.write_text(
        f"name: t\nmodel: {{dim: 32, n_layers: 1, n_heads: 4, n_kv_heads: 2, max_seq_len: 64}}\n"
        f"data: {{paths: ['{data / 'a'}'], seq_len: 64, seed: 3}}\noptim: {{lr: 3.0e-3, warmup_steps: 1}}\n"
        f"steps: {steps}\nmicro_batch: 2\nlog_every: 1\nckpt_every: 3\nthreads: 1\nout_dir: '{out}'\n"
    )
    return p


def test_ckpt_after_writes_only_the_late_checkpoints_and_the_anneal_keeps_its_averaged_steps(data, tmp_path):
    """Anneal arms save only the checkpoints they average (each save holds the AdamW state)."""
    out = tmp_path / "late"
    train(_cfg(data, out, steps=8, ckpt_every=2, ckpt_after=6, keep_checkpoints=10), quiet=True)
    assert [int(p.stem.split("_")[1]) for p in list_checkpoints(out)] == [6, 8]

    from cuvee.train.anneal import AnnealConfig, _arm_config

    state = {"config": _cfg(data, out).model_dump(mode="json"), "model_config": {"dim": 32, "n_layers": 1,
             "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64, "vocab_size": 384}}
    for tokens in (128, 64 * 2 * 7, 64 * 2 * 12, 64 * 2 * 62, 64 * 2 * 100):
        for k in (1, 2, 3, 5):
            ac = AnnealConfig(checkpoint="x", candidate=["a"], control=["b"], tokens=tokens, eval={"e": "e"},
                              average_last=k)
            cfg = _arm_config(ac, state, "candidate", ["a"], 0, 1e-3)
            every, n = cfg.ckpt_every, cfg.steps
            all_saved = [s for s in range(1, n + 1) if s % every == 0 or s == n]  # the schedule before ckpt_after
            written = [s for s in range(1, n + 1) if (s % every == 0 and s >= cfg.ckpt_after) or s == n]
            assert written == all_saved[-k:], (tokens, k)


def test_anneal_report_json_is_strict_json(data, tmp_path):
    """One seed gives no interval (p = NaN, CI = +-inf): report.json says null, never a bare NaN/Infinity."""
    base = train(_cfg(data, tmp_path / "base", steps=2), quiet=True)
    run_anneal(AnnealConfig(checkpoint=base["checkpoint"], candidate=[str(data / "a")], control=[str(data / "b")],
                            tokens=64 * 2, eval={"heldout": str(data / "heldout")}, eval_docs=4, seeds=[0],
                            average_last=1, out_dir=str(tmp_path / "anneal"), threads=1), quiet=True)

    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    report = json.loads((tmp_path / "anneal" / "report.json").read_text(), parse_constant=refuse)
    source = report["sources"]["heldout"]
    assert source["p_value"] is None and source["ci95"] == [None, None]
