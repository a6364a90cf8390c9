"""Learning-rate schedules: linear warmup, then cosine, warmup-stable-decay (WSD), constant or linear decay."""

from __future__ import annotations

import math

from cuvee.train.config import OptimConfig


def lr_at(step: int, total_steps: int, o: OptimConfig, peak_lr: float | None = None) -> float:
    """LR for optimizer step ``step`` (0-based) of ``total_steps``.

    * cosine:   warmup, then cosine from peak to ``min_lr_ratio * peak`` at the last step;
    * wsd:      warmup, constant, then linear to ``min_lr_ratio * peak`` over the last ``decay_frac`` of steps
                (MiniCPM / "scaling laws beyond fixed budgets": the stable phase can be branched to anneal);
    * linear:   warmup, then linear to ``min_lr_ratio * peak`` (``cuvee anneal`` uses this with ratio 0);
    * constant: warmup, then peak.
    """
    peak = o.lr if peak_lr is None else peak_lr
    floor = peak * o.min_lr_ratio
    if o.warmup_steps and step < o.warmup_steps:
        return peak * (step + 1) / o.warmup_steps
    if o.schedule == "constant":
        return peak
    decay_steps = max(1, total_steps - o.warmup_steps)
    t = min(1.0, (step - o.warmup_steps + 1) / decay_steps)  # reaches 1.0 at the final step
    if o.schedule == "cosine":
        return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * t))
    if o.schedule == "linear":
        return peak + (floor - peak) * t
    if o.schedule == "wsd":
        decay_start = total_steps - max(1, round(o.decay_frac * total_steps))
        if step < decay_start:
            return peak
        return peak + (floor - peak) * (step - decay_start + 1) / (total_steps - decay_start)
    raise ValueError(f"unknown schedule {o.schedule!r}")
