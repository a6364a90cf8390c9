"""Issue #26 on CPU: how much of a 30 % candidate each seed of an anneal really reads, and the seed noise of the
effect, with the loader's ``order: window`` (the mixer's order shuffled within windows of documents) against
``order: pieces`` (each source's pieces re-blended at the mix's weights: cuvee/train/piece_blend.py).

    python benchmarks/bench_anneal_shares.py --seeds 6 --work runs/bench_anneal_shares

The issue's scenario, on real bundled text (data/curated WCXB pages, human-reviewed main content, truncated to
4,000 bytes, byte-level tokenizer ``bytes256.tiktoken``; mixes written by ``cuvee mix``'s run_mix):

* candidate arm: 30 % ``cand`` = 86 whole pages + 70 % ``default`` (other pages), one mixer output;
* control arm:   30 % ``ctrl`` = the same 86 pages with their words shuffled + 70 % the same default;
* base: the tiny model's shape (configs/train/tiny.yaml) trained on a third set of pages, 200 steps (WSD),
  branched at step 100 (stable phase); each arm anneals 40,960 tokens (40 steps of 8 x 128) per seed;
* eval: 60 held-out pages (cuvee.train.demo_data.split_heldout), bits per byte; no decontamination (the
  split is disjoint by construction and the check would only add time).

Per order it prints: each seed's share of ``cand`` in the candidate arm measured over the steps trained (the
report's ``shares``), their range, the per-seed effects (control - candidate bpb), their mean, the seed standard
error of the effect (sd / sqrt(seeds)), the verdict, and the mean tokens per attention segment the candidate arm's
rows hold (pieces are masked as documents, so this is the context the model gets). Whole run: a few minutes on
one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cuvee.mixer import run_mix
from cuvee.train.anneal import AnnealConfig, run_anneal
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import load_wcxb, split_heldout
from cuvee.train.loader import PackedLoader
from cuvee.train.shards import open_shards
from cuvee.train.trainer import train

MAX_DOC_BYTES = 4000
CAND_DOCS = 86
SHARE = 0.3
MODEL = {"dim": 96, "n_layers": 3, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 128, "rope_theta": 500000.0}


def _text(row) -> str:
    return (row.get("main_content") or "").encode("utf-8")[:MAX_DOC_BYTES].decode("utf-8", "ignore")


def _jsonl(path: Path, texts: list[str]) -> str:
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{path.stem}-{i}", "text": t}) + "\n")
    return str(path)


def _mix(out: Path, name: str, sources: list[dict], target: int) -> str:
    if not (out / "manifest.json").exists():
        run_mix({"name": name, "target_tokens": target, "seed": 7, "tokenizer": "bytes256.tiktoken",
                 "shard_tokens": 1 << 20, "sources": sources}, out_dir=str(out))
    return str(out)


def prepare(work: Path) -> dict:
    """Arms, base mix and eval set (cached under <work>/data)."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    rows, heldout = split_heldout(load_wcxb())
    rows = [r for r in rows if len(_text(r).encode()) >= 1000]
    random.Random(0).shuffle(rows)
    cand = [_text(r) for r in rows[:CAND_DOCS]]
    rng = random.Random(1)
    ctrl = []
    for t in cand:
        words = t.split()
        rng.shuffle(words)
        ctrl.append(" ".join(words))
    cand_tokens = sum(len(t.encode()) + 1 for t in cand)
    target = int(cand_tokens / SHARE * 0.98)  # the 86 pages are 30 % of the arm (max_epochs 1)
    default = [_text(r) for r in rows[CAND_DOCS:CAND_DOCS + 400]]
    base = [_text(r) for r in rows[CAND_DOCS + 400:CAND_DOCS + 800]]
    held = [_text(r) for r in heldout if _text(r).strip()][:60]
    paths = {k: _jsonl(data / f"{k}.jsonl", v) for k, v in
             (("cand", cand), ("ctrl", ctrl), ("default", default), ("base", base), ("held", held))}
    arms = {arm: _mix(data / f"arm_{arm}", f"arm_{arm}",
                      [{"name": arm, "paths": paths[arm], "weight": SHARE},
                       {"name": "default", "paths": paths["default"], "weight": 1 - SHARE}], target)
            for arm in ("cand", "ctrl")}
    base_tokens = sum(len(t.encode()) + 1 for t in base)
    arms["base"] = _mix(data / "base", "base", [{"name": "base", "paths": paths["base"], "weight": 1.0}], base_tokens)
    arms["held"] = _mix(data / "held", "held", [{"name": "held", "paths": paths["held"], "weight": 1.0}],
                        sum(len(t.encode()) + 1 for t in held))
    arms["target"] = target
    return arms


def base_checkpoint(work: Path, base: str) -> str:
    cfg = TrainConfig(name="base", model=MODEL, data={"paths": [base], "seq_len": 128, "seed": 1234},
                      optim={"lr": 3e-3, "warmup_steps": 20, "schedule": "wsd", "decay_frac": 0.2, "min_lr_ratio": 0.1},
                      steps=200, micro_batch=8, ckpt_every=100, keep_checkpoints=3, out_dir=str(work / "base_run"),
                      threads=1, vocab_multiple=1, log_every=50)
    ckpt = work / "base_run" / "checkpoints" / "step_0000100.pt"
    if not ckpt.exists():
        train(cfg, quiet=True)
    return str(ckpt)


def tokens_per_segment(arm: str, order: str, seeds: list[int], steps: int) -> float:
    """Mean tokens per attention segment (a document, piece or row part) over the steps an anneal trains."""
    shards, tokens, segments = open_shards(arm), 0, 0
    for seed in seeds:
        loader = PackedLoader(shards, 128, 8, seed=seed, order=order)
        for _ in range(steps):
            ids = next(loader)["doc_ids"].numpy()
            tokens, segments = tokens + ids.size, segments + int((ids.max(axis=1) + 1).sum())
    return tokens / segments


def run_order(work: Path, arms: dict, ckpt: str, order: str, seeds: list[int], tokens: int) -> dict:
    ac = AnnealConfig(name=f"shares_{order}", checkpoint=ckpt, candidate=[arms["cand"]], control=[arms["ctrl"]],
                      tokens=tokens, eval={"held": arms["held"]}, eval_docs=60, seeds=seeds, average_last=3,
                      decontaminate=False, order=order, out_dir=str(work / f"anneal_{order}"), threads=1)
    t0 = time.perf_counter()
    report = run_anneal(ac, quiet=True, fresh=True)
    per_seed = report["shares"]["candidate"]["per_seed"]
    shares = [per_seed[str(s)]["shares"]["cand"] for s in seeds]
    src = report["sources"]["held"]
    effects = list(src["per_seed_effect"])
    return {"order": order, "shares": shares, "effects": effects, "mean": statistics.mean(effects),
            "seed_se": statistics.stdev(effects) / len(effects) ** 0.5, "verdict": src["verdict"],
            "gap": max(per_seed[str(s)]["prefix_gap"]["cand"] for s in seeds), "wall_s": time.perf_counter() - t0,
            "segment": tokens_per_segment(arms["cand"], order, seeds, -(-tokens // (128 * 8)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6, help="seeds per order (>= 4)")
    ap.add_argument("--tokens", type=int, default=40_960)
    ap.add_argument("--work", default="runs/bench_anneal_shares")
    ap.add_argument("--fresh", action="store_true", help="rebuild the data and the base checkpoint")
    args = ap.parse_args()
    if args.seeds < 2:
        sys.exit("--seeds: at least 2 (the seed error needs two)")
    work = Path(args.work)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    t0 = time.perf_counter()
    arms = prepare(work)
    ckpt = base_checkpoint(work, arms["base"])
    print(f"data + base checkpoint: {time.perf_counter() - t0:.0f} s; arms of {arms['target']:,} tokens, "
          f"{CAND_DOCS} candidate pages = {100 * SHARE:.0f} %; anneal {args.tokens:,} tokens per run", flush=True)
    seeds = list(range(args.seeds))
    rows = [run_order(work, arms, ckpt, order, seeds, args.tokens) for order in ("window", "pieces")]
    print(f"\n| order | candidate share per seed (nominal {100 * SHARE:.0f} %) | range | largest prefix gap (tokens) | "
          f"effect per seed (control - candidate, bpb) | mean effect | seed SE | verdict | tokens per segment | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['order']} | {', '.join(f'{100 * s:.1f}' for s in r['shares'])} | "
              f"{100 * min(r['shares']):.1f}-{100 * max(r['shares']):.1f} % | {r['gap']:,} | "
              f"{', '.join(f'{e:+.4f}' for e in r['effects'])} | {r['mean']:+.4f} | {r['seed_se']:.4f} | "
              f"{r['verdict']} | {r['segment']:.0f} | {r['wall_s']:.0f} s |")
    w, p = rows
    print(f"\nseed SE ratio window / pieces: {w['seed_se'] / p['seed_se']:.2f}x; candidate share range "
          f"{100 * (max(w['shares']) - min(w['shares'])):.1f} vs {100 * (max(p['shares']) - min(p['shares'])):.1f} points")


if __name__ == "__main__":
    main()
