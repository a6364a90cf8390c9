"""GPU training throughput and MFU with document masking (run on a GPU machine; results in RESULTS.md, "GPU").

For each model size (~125M, ~1B) and sequence length (2048, 4096), trains a few steps on packed
document-masked batches and reports tokens/s and MFU (cuvee.train.mfu: 6N + 12*L*d*S FLOPs per token,
peak bf16 FLOPs per GPU type). Attention backends compared on the same batches: cuvee FlexAttention
(document block mask), varlen FlashAttention (cu_seqlens), and - the peer - Hugging Face
LlamaForCausalLM (SDPA, the same shapes) with an *unmasked* causal attention, i.e. what you get
without document masking. Target: MFU >= 45 % on one H100 for ~1B.

    python benchmarks/bench_train_gpu.py [--sizes 125m 1b] [--seq-len 2048 4096] [--steps 20] [--repeats 3] [--compile]

Input: random token documents with lengths drawn from a log-normal around 600 tokens (web-like), so
the numbers do not depend on any data being present on the GPU machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def fake_batch(batch: int, seq_len: int, vocab: int, rng) -> dict:
    ids = torch.from_numpy(rng.integers(0, vocab, (batch, seq_len)))
    doc_ids = np.zeros((batch, seq_len), dtype=np.int64)
    pos = np.zeros((batch, seq_len), dtype=np.int64)
    for r in range(batch):
        at, d = 0, 0
        while at < seq_len:
            n = min(seq_len - at, max(1, int(rng.lognormal(np.log(600), 1.0))))
            doc_ids[r, at : at + n], pos[r, at : at + n] = d, np.arange(n)
            at, d = at + n, d + 1
    labels = ids.roll(-1, 1)
    return {"input_ids": ids, "labels": labels, "doc_ids": torch.from_numpy(doc_ids), "position_ids": torch.from_numpy(pos)}


def run_cuvee(size: str, seq_len: int, batch: int, steps: int, backend: str, compile_: bool, vocab: int, repeats: int = 1):
    from cuvee.train.attention import build_doc_mask
    from cuvee.train.config import TrainConfig
    from cuvee.train.mfu import flops_per_token, mfu, peak_flops
    from cuvee.train.model import Llama

    mcfg = TrainConfig(model={"preset": size, "vocab_size": vocab, "max_seq_len": seq_len}, data={"paths": ["-"]}).resolved_model()
    model = Llama(mcfg).cuda()
    if compile_:
        for layer in model.layers:
            layer.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rng = np.random.default_rng(0)
    batches = [{k: v.cuda() for k, v in fake_batch(batch, seq_len, vocab, rng).items()} for _ in range(4)]
    fpt = flops_per_token(model.num_params(exclude_embeddings=True), mcfg.n_layers, mcfg.dim, seq_len)
    peak = peak_flops(torch.cuda.get_device_name())

    def step(b):
        mask = build_doc_mask(b["doc_ids"], backend)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(b["input_ids"], b["position_ids"], b["doc_ids"], b["labels"], backend=backend, mask=mask,
                         loss_chunk_tokens=8192)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.perf_counter()
    for i in range(3):  # warmup / compile
        step(batches[i % 4])
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t
    torch.cuda.reset_peak_memory_stats()
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        for i in range(steps):
            step(batches[i % 4])
        torch.cuda.synchronize()
        rates.append(steps * batch * seq_len / (time.perf_counter() - t))
    tok_s = sorted(rates)
    mem = torch.cuda.max_memory_allocated() / 2**30
    model = opt = None  # frees the GPU memory before empty_cache (step() closes over both)
    torch.cuda.empty_cache()
    return tok_s, [mfu(r, fpt, peak) for r in tok_s], mem, warm_s


def check_backends_agree(vocab: int, seq_len: int = 2048, batch: int = 2) -> None:
    """Before any timing: the same weights and batch give the same loss under every backend (sdpa's explicit
    dense mask is the reference), and a loss that differs from plain causal attention (the mask is active)."""
    from cuvee.train.attention import build_doc_mask
    from cuvee.train.config import TrainConfig
    from cuvee.train.model import Llama

    torch.manual_seed(0)
    mcfg = TrainConfig(model={"preset": "125m", "vocab_size": vocab, "max_seq_len": seq_len}, data={"paths": ["-"]}).resolved_model()
    model = Llama(mcfg).cuda()
    b = {k: v.cuda() for k, v in fake_batch(batch, seq_len, vocab, np.random.default_rng(1)).items()}
    losses, grads = {}, {}
    for be in ["sdpa", "flex", "varlen"]:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(b["input_ids"], b["position_ids"], b["doc_ids"], b["labels"], backend=be,
                         mask=build_doc_mask(b["doc_ids"], be))
        loss.backward()
        losses[be] = loss.item()
        grads[be] = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
        model.zero_grad(set_to_none=True)
    one_doc = torch.zeros_like(b["doc_ids"])  # plain causal attention over the whole row
    pos = torch.arange(seq_len, device="cuda").expand(batch, -1)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        plain = model(b["input_ids"], pos, one_doc, b["labels"], backend="sdpa", mask=build_doc_mask(one_doc, "sdpa")).item()
    ref = grads["sdpa"]
    rel = {be: ((g - ref).norm() / ref.norm()).item() for be, g in grads.items()}
    docs = int(b["doc_ids"][:, -1].float().mean().item()) + 1
    rounded = {k: round(v, 5) for k, v in losses.items()}
    diffs = {k: f"{v:.1e}" for k, v in rel.items()}
    print(f"backend agreement (125m, S={seq_len}, {docs} docs/row avg): loss {rounded}; grad rel. diff vs sdpa {diffs}; "
          f"plain causal loss {plain:.5f}", flush=True)
    del model
    torch.cuda.empty_cache()


def run_hf(size: str, seq_len: int, batch: int, steps: int, vocab: int, repeats: int = 1):
    """Peer: transformers LlamaForCausalLM, same shapes, plain causal SDPA (no document masking)."""
    from transformers import LlamaForCausalLM

    from cuvee.train.config import TrainConfig
    from cuvee.train.hf_export import hf_config
    from cuvee.train.mfu import flops_per_token, mfu, peak_flops

    mcfg = TrainConfig(model={"preset": size, "vocab_size": vocab, "max_seq_len": seq_len}, data={"paths": ["-"]}).resolved_model()
    hcfg = hf_config(mcfg)
    hcfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(hcfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rng = np.random.default_rng(0)
    b = {k: v.cuda() for k, v in fake_batch(batch, seq_len, vocab, rng).items()}
    # cuvee's convention (cuvee.train.mfu): N counts the output projection and not the input embedding; with
    # tied embeddings the one shared matrix is the output projection, so it stays in
    n_non_emb = sum(p.numel() for p in model.parameters())
    if not mcfg.tie_embeddings:
        n_non_emb -= model.model.embed_tokens.weight.numel()
    fpt = flops_per_token(n_non_emb, mcfg.n_layers, mcfg.dim, seq_len)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=b["input_ids"], labels=b["input_ids"]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rates.append(steps * batch * seq_len / (time.perf_counter() - t))
    model = opt = None  # frees the GPU memory before empty_cache (step() closes over both)
    torch.cuda.empty_cache()
    peak = peak_flops(torch.cuda.get_device_name())
    return sorted(rates), [mfu(r, fpt, peak) for r in sorted(rates)]


def _median(xs: list[float]) -> float:
    return xs[len(xs) // 2]


def _spread(rates: list[float]) -> str:
    """tok/s as median [min-max] over the repeats (one repeat: the single figure)."""
    med = f"{_median(rates):>10,.0f}"
    return med if len(rates) == 1 else f"{med} [{rates[0]:,.0f}-{rates[-1]:,.0f}]"


def _pct(utils: list[float | None]) -> str:
    vals = [100 * (u or 0) for u in utils]
    med = f"{_median(vals):>5.1f}%"
    return med if len(vals) == 1 else f"{med} [{vals[0]:.1f}-{vals[-1]:.1f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["125m", "1b"])
    ap.add_argument("--seq-len", nargs="+", type=int, default=[2048, 4096])
    ap.add_argument("--tokens-per-step", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backends", nargs="+", default=["flex", "varlen"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--vocab", type=int, default=100352)  # cl100k padded to a multiple of 128
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="timed loops of --steps steps each (median, min, max)")
    ap.add_argument("--no-check", action="store_true", help="skip the backend agreement check")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_train_gpu.py needs a CUDA GPU")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, compile={args.compile}, "
          f"steps={args.steps}, tokens/step={args.tokens_per_step}", flush=True)
    if not args.no_check:
        check_backends_agree(args.vocab)
    print(f"{'size':>5} {'seq':>5} {'backend':>8} | {'tok/s median [min-max]':>10} | {'MFU':>6} | {'mem GiB':>7} | {'warmup s':>8} | vs HF (no doc mask)",
          flush=True)
    for size in args.sizes:
        for s in args.seq_len:
            batch = max(1, args.tokens_per_step // s)
            hf = None
            if not args.no_hf:
                try:
                    hf = run_hf(size, s, batch, args.steps, args.vocab, args.repeats)
                    print(f"{size:>5} {s:>5} {'HF sdpa':>8} | {_spread(hf[0])} | {_pct(hf[1])} |", flush=True)
                except Exception as e:  # noqa: BLE001 - the peer failing must not hide cuvee's rows
                    print(f"{size:>5} {s:>5} {'HF sdpa':>8} | failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
            for be in args.backends:
                try:
                    tok_s, util, mem, warm_s = run_cuvee(size, s, batch, args.steps, be, args.compile, args.vocab, args.repeats)
                except Exception as e:  # noqa: BLE001 - report and go on with the other backends
                    print(f"{size:>5} {s:>5} {be:>8} | failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
                    continue
                ratio = f"{_median(tok_s) / _median(hf[0]):.2f}x" if hf else "-"
                print(f"{size:>5} {s:>5} {be:>8} | {_spread(tok_s)} | {_pct(util)} | {mem:>7.1f} | "
                      f"{warm_s:>8.1f} | {ratio}", flush=True)


if __name__ == "__main__":
    main()
