"""Where ``cuvee classify train`` writes: a folder or file cuvee owns, locked, bound to the plan that made it.

A transformer head is a folder: ``folders.claim(kind="classifier")``, its lock, and its plan binding, like
every other cuvee folder. A fastText model is one user-named file (plus ``<file>.json`` and
``<file>.metrics.json``): the ``.json`` cuvee writes beside it is its marker and holds its plan; a file
without it is someone else's and is refused, a sibling ``.<name>.cuvee.lock`` keeps a second process out,
and a different plan is refused unless ``--fresh``. The model is written to a temporary name and renamed,
so a kill never leaves a cut model under the real name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cuvee.folders import FolderError, FolderLock, bind, claim, empty_owned, fingerprint


def _file_facts(p: str) -> dict:
    try:
        st = os.stat(p)
    except OSError:
        return {"path": p}
    return {"path": p, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns} if os.path.isfile(p) else {"path": p}


def train_plan(sources: dict[str, list[str]], settings: dict) -> dict:
    """What decides a trained model: its settings and the input files (size and mtime where they are files)."""
    return {"command": "classify train", "settings": settings,
            "inputs": {k: [_file_facts(str(p)) for p in v] for k, v in sources.items() if v}}


def claim_head_folder(output: str | Path, plan: dict, fresh: bool) -> FolderLock:
    """Claim, lock and bind a transformer head folder; returns the held lock."""
    folder = claim(output, "classifier", what="classifier folder")
    lock = FolderLock(folder, what="classifier folder").acquire()
    try:
        if fresh:
            empty_owned(folder, "classifier", what="classifier folder")
        bind(folder, plan, what="classifier folder")
    except BaseException:
        lock.release()
        raise
    return lock


def sidecar(output: Path) -> Path:
    return Path(str(output) + ".json")


def claim_model_file(output: str | Path, plan: dict, fresh: bool) -> FolderLock:
    """Lock a fastText model file's sibling lock; refuse a file cuvee did not write, or another plan without --fresh."""
    output = Path(output)
    if output.exists() and not output.is_file():
        raise FolderError(f"--output {output} exists and is not a file")
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(output.parent, what=f"model file {output} (folder", lock_name=f".{output.name}.cuvee.lock")
    try:
        lock.acquire()
    except FolderError:
        raise FolderError(f"model file {output} is being written by another cuvee process; wait for it to finish, "
                          "or choose another --output") from None
    try:
        _check_owned(output, plan, fresh)
    except BaseException:
        lock.release()
        raise
    return lock


def _check_owned(output: Path, plan: dict, fresh: bool) -> None:
    side, metrics = sidecar(output), Path(str(output) + ".metrics.json")
    if not any(p.exists() for p in (output, side, metrics)):
        return
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        meta = None
    if not (isinstance(meta, dict) and meta.get("kind") == "fasttext"):
        raise FolderError(f"{output} (or its .json / .metrics.json) exists and was not written by cuvee classify "
                          "train; cuvee replaces only its own models: choose another --output")
    old = meta.get("plan")
    if fresh or (isinstance(old, dict) and fingerprint(old) == fingerprint(plan)):
        return
    raise FolderError(f"{output} was trained with a different plan ({_differing(old, plan)} differ); use --fresh to "
                      "replace it, or choose another --output")


def _differing(old, new: dict) -> str:
    """The plan keys (one level into sections) that differ, for the refusal message."""
    if not isinstance(old, dict):
        return "no recorded plan"
    new = json.loads(json.dumps(new, default=str))
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)]
        elif a != b:
            out.append(k)
    return ", ".join(out[:6]) or "fingerprints"
