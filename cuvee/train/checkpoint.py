"""Checkpoints hold everything needed to continue bit-exactly: model, optimizer, loader state(s), step, RNG.

Layout: ``<out_dir>/checkpoints/step_NNNNNNN.pt`` (written to a temp file, then renamed, so a crash never
leaves a truncated "latest" checkpoint). Only rank 0 writes; each rank's loader state is stored in a list.

Checkpoints are loaded with ``weights_only=True``: a checkpoint is data (tensors, numbers, strings, plain
containers), never code, so a crafted ``.pt`` dropped into a run folder or passed to ``cuvee anneal`` cannot
execute anything. Everything the trainer saves stays within that vocabulary.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import re
from pathlib import Path

import torch

from cuvee.kernel.atomic import replacing
from cuvee.kernel.errors import UserError

_NAME = re.compile(r"step_(\d+)\.pt$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint cuvee refuses to load (not plain data, or unreadable); the message says what to do."""


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
    with replacing(path) as tmp:
        torch.save(payload, tmp)
    for old in list_checkpoints(out_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or the latest one of a run dir (or its checkpoints/ dir)."""
    path = Path(path)
    if path.is_dir():
        found = latest_checkpoint(path) or latest_checkpoint(path.parent)
        if found is None:
            raise FileNotFoundError(f"{path}: no step_*.pt checkpoints")
        path = found
    return path


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint as data only (``weights_only=True``); anything else raises :class:`CheckpointError`."""
    path = resolve_checkpoint(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, OSError) as e:
        code = re.search(r"unsupported GLOBAL (\S+)", str(e), re.IGNORECASE)
        why = (f"it refers to {code.group(1)}, which is code, not data" if code
               else "it is not a readable torch checkpoint (truncated or corrupt?)")
        raise CheckpointError(
            f"refusing checkpoint {path}: {why}. A cuvee checkpoint holds only tensors and plain values and is "
            f"never unpickled as code; delete the file, or start over with --fresh or another output folder"
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"checkpoint {path} is not a cuvee checkpoint (no model state)")
    return state


def checkpoint_identity(path: str | Path) -> dict:
    """What a run initialised from ``path`` depends on: the file's name, size and sha256."""
    path = resolve_checkpoint(path).resolve()
    st = path.stat()
    return {"file": path.name, "bytes": st.st_size, "sha256": _sha256(str(path), st.st_size, st.st_mtime_ns)}


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:  # size/mtime in the key: a rewritten file is re-hashed
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def average_state_dicts(state_dicts: list[dict]) -> dict:
    """Uniform average of parameters (checkpoint averaging, as in Llama 3's annealing ablations)."""
    if not state_dicts:
        raise ValueError("nothing to average")
    out = {}
    for key in state_dicts[0]:
        vals = [sd[key] for sd in state_dicts]
        out[key] = torch.stack([v.float() for v in vals]).mean(0).to(vals[0].dtype) if vals[0].is_floating_point() else vals[-1]
    return out
