"""Where ``cuvee classify train`` writes: a folder or file cuvee owns, locked, bound to the plan that made it.

A transformer head is a folder: ``folders.claim(kind="classifier")``, its lock, and its plan binding, like
every other cuvee folder. A fastText model is one user-named file (plus ``<file>.json`` and
``<file>.metrics.json``): the ``.json`` cuvee writes beside it is its marker and holds its plan; a file
without it is someone else's and is refused, a sibling ``.<name>.cuvee.lock`` keeps a second process out,
and a different plan is refused unless ``--fresh``. The model is written to a temporary name and renamed,
so a kill never leaves a cut model under the real name. ``cuvee classify apply -o FILE`` writes its documents
under the same contract (:func:`claim_file` with its own kind; its ``.json`` also says whether the file is complete).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
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


def apply_plan(model: str, input_files: list[str], settings: dict) -> dict:
    """What decides ``classify apply``'s output: the model's files, the input files and the settings."""
    files = sorted(str(f) for f in Path(model).iterdir() if f.is_file()) if os.path.isdir(model) else [model]
    return {"command": "classify apply", "settings": settings, "model": [_file_facts(f) for f in files],
            "inputs": [_file_facts(f) for f in input_files]}


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
    return claim_file(output, plan, fresh, kind="fasttext", command="classify train", what="model file",
                      companions=(".json", ".metrics.json"))


def claim_file(output: str | Path, plan: dict, fresh: bool, *, kind: str, command: str, what: str,
               companions: tuple[str, ...] = (".json",), flag: str = "--output") -> FolderLock:
    """Hold ``output``'s sibling lock; refuse it (and its ``companions``, the first being the ``.json`` marker)
    when cuvee did not write it as ``kind``, or when its recorded plan differs and ``fresh`` is not set.
    ``flag`` is the command's option for the file, named in the refusals."""
    output = Path(output)
    if output.exists() and not output.is_file():
        raise FolderError(f"{flag} {output} exists and is not a file")
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(output.parent, what=f"{what} {output} (folder", lock_name=f".{output.name}.cuvee.lock")
    try:
        lock.acquire()
    except FolderError:
        raise FolderError(f"{what} {output} is being written by another cuvee process; wait for it to finish, "
                          f"or choose another {flag}") from None
    try:
        _check_owned(output, plan, fresh, kind, command, companions, flag)
    except BaseException:
        lock.release()
        raise
    return lock


def _check_owned(output: Path, plan: dict, fresh: bool, kind: str, command: str, companions: tuple[str, ...],
                 flag: str) -> None:
    related = [Path(str(output) + c) for c in companions]
    if not any(p.exists() for p in (output, *related)):
        return
    try:
        meta = json.loads(related[0].read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        meta = None
    if not (isinstance(meta, dict) and meta.get("kind") == kind):
        raise FolderError(f"{output} (or its {' / '.join(companions)}) exists and was not written by cuvee {command}; "
                          f"cuvee replaces only its own files: choose another {flag}")
    old = meta.get("plan")
    if fresh or (isinstance(old, dict) and fingerprint(old) == fingerprint(plan)):
        return
    raise FolderError(f"{output} was written with a different plan ({_differing(old, plan)} differ); use --fresh to "
                      f"replace it, or choose another {flag}")


def write_json(path: Path, obj: dict) -> None:
    """``path`` replaced whole (temporary name, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def replacing_text(output: Path) -> Iterator[io.TextIOBase]:
    """A UTF-8 text file (gzip for ``.gz``) written under a temporary name and renamed to ``output`` only when
    the block ends without an error: a kill or a failure never leaves a cut file under the real name."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw:
            gz = gzip.GzipFile(filename=output.name, mode="wb", fileobj=raw) if output.name.endswith(".gz") else None
            with io.TextIOWrapper(gz or raw, encoding="utf-8") as f:
                yield f
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


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
