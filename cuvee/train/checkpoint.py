"""Checkpoints hold everything needed to continue bit-exactly: model, optimizer, loader state(s), step, RNG.

Layout: ``<out_dir>/checkpoints/step_NNNNNNN.pt`` (written to a temp file, then renamed, so a crash never
leaves a truncated "latest" checkpoint). Only rank 0 writes; each rank's loader state is stored in a list.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

_NAME = re.compile(r"step_(\d+)\.pt$")


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    d = checkpoint_dir(out_dir)
    found = [(int(m.group(1)), p) for p in d.glob("step_*.pt") if (m := _NAME.search(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def save_checkpoint(out_dir: str | Path, step: int, payload: dict, keep: int) -> Path:
    d = checkpoint_dir(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step_{step:07d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for old in list_checkpoints(out_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():  # a run dir or its checkpoints/ dir: take the latest
        found = latest_checkpoint(path) or latest_checkpoint(path.parent)
        if found is None:
            raise FileNotFoundError(f"{path}: no step_*.pt checkpoints")
        path = found
    return torch.load(path, map_location="cpu", weights_only=False)


def average_state_dicts(state_dicts: list[dict]) -> dict:
    """Uniform average of parameters (checkpoint averaging, as in Llama 3's annealing ablations)."""
    if not state_dicts:
        raise ValueError("nothing to average")
    out = {}
    for key in state_dicts[0]:
        vals = [sd[key] for sd in state_dicts]
        out[key] = torch.stack([v.float() for v in vals]).mean(0).to(vals[0].dtype) if vals[0].is_floating_point() else vals[-1]
    return out
