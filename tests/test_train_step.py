"""The one training step (cuvee/train/step.py) shared by `cuvee train` and the mix search's proxies.

Checked against independent expectations: k micro-batches against one batch k times the size and against the
closed form of one clipped AdamW step; a proxy against the trainer (a second implementation) on the same
NaN-poisoned step, the same configured autocast and attention backend, and the same refusal of flex on a CPU."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cuvee.train.model as model_module
from cuvee.kernel.config import ConfigError
from cuvee.mixsearch.proxies import train_proxy
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb
from cuvee.train.loader import IGNORE_INDEX, PackedLoader
from cuvee.train.model import Llama
from cuvee.train.shards import open_shards
from cuvee.train.step import Execution, Step, TrainingDiverged
from cuvee.train.trainer import train

TINY = {"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64}


# ---- gradient accumulation ---------------------------------------------------------------------------------
def _micro_batch(rows: int, seq: int, vocab: int, ignored: int, gen: torch.Generator) -> dict:
    """Two documents per row (positions restart at the second); ``ignored`` extra labels masked out, so the
    micro-batches predict different numbers of tokens and a per-micro-batch mean would weigh them wrongly."""
    ids = torch.randint(0, vocab, (rows, seq), generator=gen)
    labels = torch.roll(ids, -1, dims=1)
    doc_ids = torch.zeros(rows, seq, dtype=torch.long)
    position_ids = torch.arange(seq).repeat(rows, 1)
    for r in range(rows):
        cut = int(torch.randint(2, seq - 2, (1,), generator=gen))
        doc_ids[r, cut:] = 1
        position_ids[r, cut:] -= cut
        labels[r, cut - 1] = labels[r, -1] = IGNORE_INDEX  # a document's last token predicts nothing
    flat = labels.view(-1)
    flat[torch.randperm(flat.numel(), generator=gen)[:ignored]] = IGNORE_INDEX
    return {"input_ids": ids, "labels": labels, "position_ids": position_ids, "doc_ids": doc_ids}


def test_k_micro_batches_step_as_one_batch_k_times_the_size_and_as_the_closed_form():
    k, rows, seq, vocab = 3, 2, 16, 50
    gen = torch.Generator().manual_seed(0)
    micro = [_micro_batch(rows, seq, vocab, ignored=5 * i, gen=gen) for i in range(k)]
    whole = {key: torch.cat([b[key] for b in micro]) for key in micro[0]}
    optim = {"lr": 1e-2, "schedule": "constant", "warmup_steps": 0, "eps": 1e-3, "weight_decay": 0.1, "grad_clip": 0.3}
    torch.manual_seed(0)
    start = Llama(TrainConfig(model={**TINY, "vocab_size": vocab}, data={"paths": ["-"], "seq_len": seq}).resolved_model())

    def one_step(micro_batch: int, batches: list[dict]):
        cfg = TrainConfig(model={**TINY, "vocab_size": vocab}, data={"paths": ["-"], "seq_len": seq}, steps=1,
                          micro_batch=micro_batch, grad_accum=len(batches), optim=optim)
        model = copy.deepcopy(start)
        done = Step(cfg, model, Execution.of(cfg, torch.device("cpu")))(batches, 0)
        return done, dict(model.named_parameters())

    accumulated, weights_k = one_step(rows, micro)
    single, weights_1 = one_step(k * rows, [whole])

    # the closed form: the token mean of the cross-entropy over the whole batch, its gradient clipped to grad_clip,
    # then AdamW's first step, p <- p (1 - lr wd) - lr g / (|g| + eps) (bias corrections cancel at step 1)
    ref = copy.deepcopy(start)
    logits = ref(whole["input_ids"], whole["position_ids"], whole["doc_ids"])
    loss = F.cross_entropy(logits.view(-1, vocab).float(), whole["labels"].view(-1), ignore_index=IGNORE_INDEX)
    names, params = zip(*ref.named_parameters())
    grads = torch.autograd.grad(loss, params)
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    assert norm > optim["grad_clip"]  # the clipping is exercised
    scale = optim["grad_clip"] / (norm + 1e-6)
    for done in (accumulated, single):
        assert done.finite and done.lr == optim["lr"]
        assert done.loss == pytest.approx(loss.item(), rel=1e-5)
        assert done.grad_norm == pytest.approx(norm, rel=1e-5)
    for name, p, g in zip(names, params, grads):
        wd = optim["weight_decay"] if p.dim() >= 2 else 0.0
        g = g * scale
        expected = p.detach() * (1 - optim["lr"] * wd) - optim["lr"] * g / (g.abs() + optim["eps"])
        torch.testing.assert_close(weights_k[name].detach(), expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(weights_1[name].detach(), expected, rtol=0, atol=1e-6)


# ---- proxies against the trainer ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("step")
    rows = load_wcxb()[:40]
    build_variant_mix(root / "a", "a", rows[:20], {"clean": 1.0}, max_doc_bytes=600)
    build_variant_mix(root / "b", "b", rows[20:], {"clean": 1.0}, max_doc_bytes=600)
    return root


def _config(sources, out, **kw) -> TrainConfig:
    base = dict(name="t", model=TINY, data={"paths": [str(sources / "a")], "seq_len": 32, "seed": 1},
                optim={"lr": 3e-3, "warmup_steps": 0}, steps=14, micro_batch=2, grad_accum=2, log_every=100,
                threads=1, out_dir=str(out))
    return TrainConfig(**(base | kw))


def _proxy(cfg: TrainConfig, sources) -> dict:
    """A proxy of ``cfg`` over the two sources, as many steps as ``cfg.steps``, scored on 3 documents of b."""
    a, b = open_shards([str(sources / "a")]), open_shards([str(sources / "b")])
    tokens = cfg.steps * cfg.data.seq_len * cfg.micro_batch * cfg.grad_accum
    return train_proxy(cfg, [a.datasets[0], b.datasets[0]], ["a", "b"], [0.5, 0.5], tokens, 0, a.tokenizer,
                       {"b": (b, np.arange(3), None)}, threads=1)


def _poison(monkeypatch, steps: set[int], grad_accum: int) -> None:
    """Fault injection: the training batches of ``steps`` (1-based) carry NaN positions (RoPE turns them into
    a NaN loss and NaN gradients); evaluation batches (read under no_grad) are left alone."""
    real = PackedLoader.__next__

    def poisoned(self):
        batch = real(self)
        if torch.is_grad_enabled() and -(-self.batches // grad_accum) in steps:
            batch["position_ids"] = torch.full(batch["position_ids"].shape, math.nan)
        return batch

    monkeypatch.setattr(PackedLoader, "__next__", poisoned)


def _outcome(run) -> tuple:
    """('done', skipped steps) or ('diverged', the error up to where it names the run's own checkpoints)."""
    try:
        result = run()
    except TrainingDiverged as e:
        return "diverged", "; ".join(str(e).split("; ")[:2])
    return "done", result["skipped_steps"]


NAN_STEP = "training diverged at step {}: loss nan, gradient norm nan (not finite)"


@pytest.mark.parametrize("policy, poisoned, expected", [
    ("skip", {3}, ("done", 1)),
    ("stop", {3}, ("diverged", NAN_STEP.format(3) + "; stopped before updating the weights")),
    ("skip", set(range(3, 15)), ("diverged", NAN_STEP.format(13) + "; the last 11 steps were all non-finite "
                                             "(on_nonfinite: skip stops after 10)")),
])
def test_a_proxy_follows_on_nonfinite_as_the_trainer_does(sources, tmp_path, monkeypatch, policy, poisoned, expected):
    cfg = _config(sources, tmp_path / "run", on_nonfinite=policy)
    _poison(monkeypatch, poisoned, cfg.grad_accum)
    trainer, proxy = _outcome(lambda: train(cfg, quiet=True)), _outcome(lambda: _proxy(cfg, sources))
    assert trainer == expected
    assert proxy == trainer
    if expected[0] == "done":
        record = _proxy(cfg, sources)
        assert math.isfinite(record["final_train_loss"]) and record["skipped_steps"] == 1


def _spy_attention(monkeypatch) -> list:
    """Records (training or evaluation, backend, compute dtype) of every attention call; the real one runs."""
    calls, real = [], model_module.doc_attention

    def spy(q, k, v, mask, backend):
        calls.append(("train" if torch.is_grad_enabled() else "eval", backend, q.dtype))
        return real(q, k, v, mask, backend)

    monkeypatch.setattr(model_module, "doc_attention", spy)
    return calls


def test_a_proxy_trains_and_scores_with_the_configured_autocast_and_backend_as_the_trainer_does(
        sources, tmp_path, monkeypatch):
    cfg = _config(sources, tmp_path / "run", steps=2, dtype="bfloat16", attention="sdpa",
                  eval_paths={"b": str(sources / "b")}, eval_docs=3)
    calls = _spy_attention(monkeypatch)
    train(cfg, quiet=True)
    trainer = set(calls)
    calls.clear()
    _proxy(cfg, sources)
    expected = {("train", "sdpa", torch.bfloat16), ("eval", "sdpa", torch.bfloat16)}
    assert trainer == expected
    assert set(calls) == trainer


@pytest.mark.skipif(torch.cuda.is_available(), reason="FlexAttention trains on CUDA")
def test_flex_on_a_cpu_is_refused_in_one_line_by_the_trainer_and_a_proxy_alike(sources, tmp_path):
    cfg = _config(sources, tmp_path / "run", attention="flex")
    refusals = []
    for run in (lambda: train(cfg, quiet=True), lambda: _proxy(cfg, sources)):
        with pytest.raises(ConfigError) as e:
            run()
        refusals.append(str(e.value))
    assert refusals[0] == refusals[1] and "\n" not in refusals[0]
    assert refusals[0].startswith("attention: flex needs a CUDA device to train")
    assert not (tmp_path / "run").exists()  # refused before the output folder was claimed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flex and varlen train on CUDA only")
@pytest.mark.parametrize("backend", ["flex", "varlen"])
def test_a_proxy_on_cuda_scores_with_the_configured_backend(sources, tmp_path, monkeypatch, backend):
    cfg = _config(sources, tmp_path / "run", steps=2, attention=backend)
    calls = _spy_attention(monkeypatch)
    _proxy(cfg, sources)
    assert {(phase, b) for phase, b, _ in calls} == {("train", backend), ("eval", backend)}
