"""Throughput of the ``perplexity`` stage's scorer (ccNet bits per byte) on CPU, one thread: documents/s per core.

Documents: real page texts (WCXB human-reviewed main content, data/curated), cut to the first ``--max-chars``
characters as the example recipe does (recipes/ccnet_perplexity.yaml). Models: cuvee checkpoints in a
``cuvee train`` folder layout, loaded through the stage's own loader (``checkpoints/step_*.pt`` with
``weights_only=True``), byte-level tokenizer:

* ``tiny``: the shape of configs/train/tiny.yaml (dim 96, 3 layers, window 128, ~0.2M parameters);
* ``10m``:  dim 320, 8 layers, 8/4 heads, window 512 (~10M parameters).

Weights are random (``Llama.reset_parameters``): the cost of a forward does not depend on their values, and
no training run is needed. Each size: model load time (apart), then 3 runs of the scorer over the same
documents in batches of ``--batch-size``; median / min / max docs/s. GPU: not measured here.

    python benchmarks/bench_perplexity.py [--docs 200] [--docs-10m 40] [--max-chars 5000] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]

SIZES = {
    "tiny": dict(dim=96, n_layers=3, n_heads=4, n_kv_heads=2, max_seq_len=128),
    "10m": dict(dim=320, n_layers=8, n_heads=8, n_kv_heads=4, max_seq_len=512),
}


def make_run_folder(root: Path, name: str, shape: dict) -> tuple[Path, int]:
    """A `cuvee train`-shaped output folder holding one checkpoint of a randomly initialised model."""
    from cuvee.train.checkpoint import save_checkpoint
    from cuvee.train.config import ModelConfig
    from cuvee.train.demo_data import BYTE_TOKENIZER
    from cuvee.train.model import Llama

    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=BYTE_TOKENIZER["vocab_size"], **shape)
    model = Llama(mcfg)
    out = root / name
    payload = {"step": 1, "tokens_seen": 0, "model": model.state_dict(), "model_config": mcfg.model_dump(),
               "tokenizer": dict(BYTE_TOKENIZER), "config": {"data": {"seq_len": shape["max_seq_len"]}}}
    save_checkpoint(out, 1, payload, keep=1)
    return out, model.num_params()


def bench(folder: Path, texts: list[str], batch_size: int, max_chars: int, runs: int = 3) -> dict:
    from cuvee.classifiers.perplexity import PerplexityScorer

    scorer = PerplexityScorer(str(folder), device="cpu", max_chars=max_chars)
    t0 = time.perf_counter()
    scorer.load()
    load_s = time.perf_counter() - t0
    scorer.score_batch(texts[:2])  # warm-up (first-call allocations)
    rates, scores = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = []
        for i in range(0, len(texts), batch_size):
            out.extend(scorer.score_batch(texts[i : i + batch_size]))
        rates.append(len(texts) / (time.perf_counter() - t0))
        scores = out
    nbytes = sum(len(t[:max_chars].encode()) for t in texts)
    return {"load_s": load_s, "rates": rates, "bytes_per_doc": nbytes / len(texts),
            "median_bpb": statistics.median(scores)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200, help="documents for the tiny model")
    ap.add_argument("--docs-10m", type=int, default=40, help="documents for the ~10M model")
    ap.add_argument("--max-chars", type=int, default=5000)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from cuvee.train.demo_data import load_wcxb

    texts = [r["main_content"] for r in load_wcxb() if r.get("main_content")]
    print(f"{len(texts)} WCXB main-content pages available; torch {torch.__version__}, 1 thread, CPU "
          f"(no GPU on this machine); max_chars={args.max_chars}, batch_size={args.batch_size}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, n_docs in (("tiny", args.docs), ("10m", args.docs_10m)):
            folder, n_params = make_run_folder(Path(tmp), name, SIZES[name])
            r = bench(folder, texts[:n_docs], args.batch_size, args.max_chars)
            rows.append((name, n_params, SIZES[name]["max_seq_len"], n_docs, r))

    print()
    print("| model | params | window | docs | bytes/doc | load (s) | docs/s/core median | min | max | KB/s/core (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n_params, window, n_docs, r in rows:
        med = statistics.median(r["rates"])
        print(f"| {name} | {n_params / 1e6:.2f}M | {window} | {n_docs} | {r['bytes_per_doc']:.0f} | {r['load_s']:.3f} | "
              f"{med:.1f} | {min(r['rates']):.1f} | {max(r['rates']):.1f} | {med * r['bytes_per_doc'] / 1e3:.1f} |")


if __name__ == "__main__":
    main()
