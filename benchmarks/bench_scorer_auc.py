"""ROC-AUC of every shipped or trainable quality scorer on the WCXB held-out pages, plus fastText docs/s per core.

Labels: WCXB main content (positive) vs. the same pages' boilerplate (negative), split by page exactly as
the shipped demo model's training (:func:`cuvee.classifiers.demo.build_examples` / ``is_held_out``: 20 % of
the WCXB TEST pages never reach training). Scorers:

* the shipped demo fastText model (``cuvee/assets/models/demo_quality.ftz``);
* a fastText model trained by ``cuvee classify train`` (DCLM defaults) on the train split;
* a transformer head (``cuvee classify train --kind transformer``, bundled all-MiniLM-L6-v2, frozen) on a
  stratified random subset of the train split (``--transformer-train``, to keep it to minutes on 2 cores);
* document length in characters (baseline, no training).

AUC intervals: percentile bootstrap over held-out examples (``--boot`` resamples, seed 0). Throughput: the
fastText scorer (one thread, what one pipeline worker does) over every example text, ``--repeat`` runs
in one invocation, model load timed separately.

    python benchmarks/bench_scorer_auc.py [--shared ../shared/data] [--transformer-train 800] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def bootstrap_auc(labels: np.ndarray, scores: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    from cuvee.classifiers.metrics import roc_auc

    rng = np.random.default_rng(seed)
    n = len(labels)
    vals = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        a = roc_auc(labels[idx], scores[idx])
        if not np.isnan(a):
            vals.append(a)
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def write_jsonl(path: Path, texts, labels) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for t, lab in zip(texts, labels):
            f.write(json.dumps({"text": t, "label": lab}, ensure_ascii=False) + "\n")


def cli(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cuvee.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--transformer-train", type=int, default=800, help="training examples for the transformer head (stratified sample)")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-transformer", action="store_true")
    args = ap.parse_args()

    from cuvee.classifiers.demo import build_examples
    from cuvee.classifiers.examples import POSITIVE
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.metrics import roc_auc
    from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

    t0 = time.perf_counter()
    train, valid, info = build_examples(Path(args.shared))
    print(f"examples: {len(train)} train, {len(valid)} held out ({info}); built in {time.perf_counter() - t0:.0f} s", flush=True)
    y = np.array([lab == POSITIVE for lab in valid.labels])

    results: list[tuple[str, np.ndarray, str]] = []
    results.append(("shipped demo fastText (demo_quality.ftz)", FastTextScorer(DEMO_FASTTEXT).score_batch(valid.texts), "none (shipped)"))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_jsonl(tmp / "train.jsonl", train.texts, train.labels)
        ft_path = tmp / "ft.bin"
        secs = cli("classify", "train", "--data", str(tmp / "train.jsonl"), "-o", str(ft_path), "--valid-fraction", "0")
        results.append(("fastText, `cuvee classify train` (DCLM defaults)", FastTextScorer(ft_path).score_batch(valid.texts),
                        f"{len(train)} ex, {secs:.0f} s"))

        if not args.skip_transformer:
            rng = random.Random(0)
            by = {}
            for t, lab in zip(train.texts, train.labels):
                by.setdefault(lab, []).append(t)
            sub_t, sub_l = [], []
            for lab, ts in sorted(by.items()):
                for t in rng.sample(ts, min(len(ts), args.transformer_train // len(by))):
                    sub_t.append(t)
                    sub_l.append(lab)
            write_jsonl(tmp / "train_small.jsonl", sub_t, sub_l)
            head = tmp / "head"
            secs = cli("classify", "train", "--kind", "transformer", "--data", str(tmp / "train_small.jsonl"), "-o", str(head),
                       "--valid-fraction", "0")
            from cuvee.classifiers.transformer_model import TransformerScorer

            t1 = time.perf_counter()
            scores = TransformerScorer(head).score_batch(valid.texts)
            results.append(("transformer head (all-MiniLM-L6-v2 frozen, 256 tokens)", scores,
                            f"{len(sub_t)} ex, {secs:.0f} s (+{time.perf_counter() - t1:.0f} s to score)"))

        lengths = np.array([len(t) for t in valid.texts], dtype=np.float64)
        results.append(("document length (chars), baseline", lengths, "none"))

        print("\n| scorer | training | n_test (pos/neg) | ROC-AUC | bootstrap 95 % CI |")
        print("|---|---|---:|---:|---|")
        for name, scores, training in results:
            auc = roc_auc(y, scores)
            lo, hi = bootstrap_auc(y, np.asarray(scores, dtype=np.float64), args.boot)
            print(f"| {name} | {training} | {len(y)} ({int(y.sum())}/{int((~y).sum())}) | {auc:.3f} | {lo:.3f}-{hi:.3f} |", flush=True)

        # throughput of the fastText scorer: one thread, every example text
        texts = train.texts + valid.texts
        chars = sum(len(t) for t in texts)
        rows = []
        for label, path in (("demo_quality.ftz (quantized)", DEMO_FASTTEXT), ("trained ft.bin (not quantized)", ft_path)):
            t1 = time.perf_counter()
            scorer = FastTextScorer(path)
            scorer.score_batch(["warm up"])
            load = time.perf_counter() - t1
            rates = []
            for _ in range(args.repeat):
                t1 = time.perf_counter()
                for i in range(0, len(texts), 256):
                    scorer.score_batch(texts[i : i + 256])
                rates.append(len(texts) / (time.perf_counter() - t1))
            rows.append((label, load, rates))
        print(f"\nfastText scorer throughput, 1 thread, {len(texts)} documents ({chars / len(texts):,.0f} chars/doc), "
              f"{args.repeat} runs, batch 256, load average {os.getloadavg()[0]:.1f}")
        print("| model | load (s) | docs/s per core median | min | max |")
        print("|---|---:|---:|---:|---:|")
        for label, load, rates in rows:
            print(f"| {label} | {load:.3f} | {np.median(rates):,.0f} | {min(rates):,.0f} | {max(rates):,.0f} |")


if __name__ == "__main__":
    main()
