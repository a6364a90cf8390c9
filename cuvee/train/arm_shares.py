"""What each anneal arm read, per seed: the token share of every mix source over the steps actually trained.

Measured by replaying the run's own loader (:func:`cuvee.train.loader.realised_shares`: same order, seed,
batch and accumulation), not taken from the mix's nominal weights, so a seed that read 10 % of a nominal 30 %
says so (issue #26). When the documents' sources cannot be identified, the one-line reason is given instead of
"unknown", with the mix output's whole-file shares as the only figures available.
"""

from __future__ import annotations

import math

import numpy as np

from cuvee.train.config import TrainConfig
from cuvee.train.loader import realised_shares
from cuvee.train.piece_blend import SourcesUnknownError, arm_sources
from cuvee.train.shards import UNKNOWN_SOURCE, ShardSet, open_shards


def measured_shares(cfg: TrainConfig) -> dict:
    """One arm and seed: ``method``, ``shares`` {source: share}, ``nominal`` {source: configured weight},
    ``tokens``, ``steps``, ``step_range`` {source: [lowest, highest] share within one optimizer step} and
    ``prefix_gap`` {source: largest |tokens read - weight x tokens| after any step, in tokens}."""
    shards = open_shards(cfg.data.paths)
    try:
        arm = arm_sources(shards)
    except SourcesUnknownError as e:  # its message is for a refused order: pieces; the report wants only why
        return _manifest_shares(shards, e.detail)
    rows = realised_shares(shards, cfg.steps, seq_len=cfg.data.seq_len, batch_size=cfg.micro_batch,
                           grad_accum=cfg.grad_accum, world_size=1, order=cfg.data.order, seed=cfg.data.seed,
                           window=cfg.data.window, add_eos=cfg.data.add_eos)
    if rows:
        names = list(rows[-1]["source_tokens"])
        cum = np.array([[r["source_tokens"][n] for n in names] for r in rows], dtype=np.float64)
        step = np.diff(np.vstack([np.zeros(len(names)), cum]), axis=0)
        share = step / np.maximum(step.sum(axis=1, keepdims=True), 1)
        nominal = dict(zip(arm.names, arm.weights))
        w = np.array([nominal.get(n, 0.0) for n in names])
        gap = np.abs(cum - np.outer(cum.sum(axis=1), w)).max(axis=0)
        return {"method": f"loader: realised over the {rows[-1]['step']} steps trained (seed {cfg.data.seed}, "
                          f"order {cfg.data.order})",
                "shares": rows[-1]["shares"], "nominal": {n: nominal.get(n, 0.0) for n in names},
                "tokens": rows[-1]["tokens"], "steps": rows[-1]["step"],
                "step_range": {n: [float(share[:, i].min()), float(share[:, i].max())] for i, n in enumerate(names)},
                "prefix_gap": {n: int(round(g)) for n, g in zip(names, gap)}}
    return _manifest_shares(shards, "the loader read no step")


def _manifest_shares(shards: ShardSet, why: str) -> dict:
    totals: dict[str, float] = {}
    for man in shards.manifests:
        for src in man.get("sources") or []:
            totals[src["name"]] = totals.get(src["name"], 0) + (src.get("realised_tokens") or 0)
    total = sum(totals.values())
    return {"method": f"not measured over the steps trained ({why}); the whole mix output's realised shares "
                      f"from manifest.json instead" if total else f"not measured ({why}); no manifest shares either",
            "shares": {k: v / total for k, v in totals.items()} if total else {}, "tokens": int(total),
            "nominal": None, "steps": None, "step_range": None, "prefix_gap": None}


def summarise(per_seed: dict[str, dict]) -> dict:
    """An arm over its seeds: token-weighted ``shares``, ``tokens`` summed, each seed's record (``per_seed``)
    and every source's lowest and highest per-seed share (``seed_range``)."""
    first = next(iter(per_seed.values()))
    names = [n for n in dict.fromkeys(k for r in per_seed.values() for k in r["shares"])]
    tokens = sum(r["tokens"] for r in per_seed.values())
    shares = {n: sum(r["shares"].get(n, 0.0) * r["tokens"] for r in per_seed.values()) / tokens if tokens else 0.0
              for n in names}
    method = first["method"].split(" (seed ")[0] + (f" of each of {len(per_seed)} seeds" if first["steps"] else "")
    return {"method": method, "shares": shares, "tokens": int(tokens), "per_seed": per_seed,
            "seed_range": {n: [min(r["shares"].get(n, 0.0) for r in per_seed.values()),
                               max(r["shares"].get(n, 0.0) for r in per_seed.values())] for n in names}}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def shares_markdown(report: dict) -> list[str]:
    """report.md's section: per arm and seed the shares read (against the configured weights, with the largest
    gap after any step), and per seed the effect on every eval source (control − candidate)."""
    lines = ["", "Mix sources read by each arm, token shares over the steps trained:", ""]
    for arm, sh in report["shares"].items():
        parts = ", ".join(f"{k} {_pct(v)}" for k, v in sh["shares"].items() if k != UNKNOWN_SOURCE or v)
        lines.append(f"- {arm}: {parts or 'none measured'} ({sh['method']})")
    seeds = [str(s) for s in report["seeds"]]
    sources = report.get("sources", {})
    lines += ["", "| seed | candidate read | control read | " + " | ".join(f"effect {n}" for n in sources) + " |",
              "|---" * (3 + len(sources)) + "|"]
    for i, seed in enumerate(seeds):
        cells = []
        for arm in ("candidate", "control"):
            r = report["shares"].get(arm, {}).get("per_seed", {}).get(seed)
            if r is None:
                cells.append("n/a")
                continue
            nominal, gap = r.get("nominal") or {}, r.get("prefix_gap") or {}
            cells.append(", ".join(f"{k} {_pct(v)}" + (f" (of {_pct(nominal[k])}; every step's prefix within "
                                                        f"{gap[k]:,} tokens)" if k in gap else "")
                                   for k, v in r["shares"].items()))
        for s in sources.values():
            cand, ctrl = s.get("candidate_per_seed") or [], s.get("control_per_seed") or []
            d = ctrl[i] - cand[i] if i < len(cand) and i < len(ctrl) else None
            cells.append("n/a" if d is None or not math.isfinite(d) else f"{d:+.4f}")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return lines
