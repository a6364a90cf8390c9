"""GPU training throughput and MFU with document masking (run on a GPU machine; none was lent when written).

For each model size (~125M, ~1B) and sequence length (2048, 4096), trains a few steps on packed
document-masked batches and reports tokens/s and MFU (cuvee.train.mfu: 6N + 12*L*d*S FLOPs per token,
peak bf16 FLOPs per GPU type). Attention backends compared on the same batches: cuvee FlexAttention
(document block mask), varlen FlashAttention (cu_seqlens), and - the peer - Hugging Face
LlamaForCausalLM (SDPA, the same shapes) with an *unmasked* causal attention, i.e. what you get
without document masking. Target: MFU >= 45 % on one H100 for ~1B.

    python benchmarks/bench_train_gpu.py [--sizes 125m 1b] [--seq-len 2048 4096] [--steps 20] [--compile]

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


def run_cuvee(size: str, seq_len: int, batch: int, steps: int, backend: str, compile_: bool, vocab: int):
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

    for i in range(3):  # warmup / compile
        step(batches[i % 4])
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(steps):
        step(batches[i % 4])
    torch.cuda.synchronize()
    tok_s = steps * batch * seq_len / (time.perf_counter() - t)
    mem = torch.cuda.max_memory_allocated() / 2**30
    del model, opt
    torch.cuda.empty_cache()
    return tok_s, mfu(tok_s, fpt, peak), mem, fpt


def run_hf(size: str, seq_len: int, batch: int, steps: int, vocab: int):
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
    n_non_emb = sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()
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
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    tok_s = steps * batch * seq_len / (time.perf_counter() - t)
    del model, opt
    torch.cuda.empty_cache()
    return tok_s, mfu(tok_s, fpt, peak_flops(torch.cuda.get_device_name()))


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
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_train_gpu.py needs a CUDA GPU")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, compile={args.compile}")
    print(f"{'size':>5} {'seq':>5} {'backend':>8} | {'tok/s':>10} | {'MFU':>6} | {'mem GiB':>7} | vs HF (no doc mask)")
    for size in args.sizes:
        for s in args.seq_len:
            batch = max(1, args.tokens_per_step // s)
            hf = None if args.no_hf else run_hf(size, s, batch, args.steps, args.vocab)
            if hf:
                print(f"{size:>5} {s:>5} {'HF sdpa':>8} | {hf[0]:>10,.0f} | {100 * (hf[1] or 0):>5.1f}% |")
            for be in args.backends:
                try:
                    tok_s, util, mem, _ = run_cuvee(size, s, batch, args.steps, be, args.compile, args.vocab)
                except Exception as e:  # noqa: BLE001 - report and go on with the other backends
                    print(f"{size:>5} {s:>5} {be:>8} | failed: {type(e).__name__}: {str(e)[:120]}")
                    continue
                ratio = f"{tok_s / hf[0]:.2f}x" if hf else "-"
                print(f"{size:>5} {s:>5} {be:>8} | {tok_s:>10,.0f} | {100 * (util or 0):>5.1f}% | {mem:>7.1f} | {ratio}")


if __name__ == "__main__":
    main()
