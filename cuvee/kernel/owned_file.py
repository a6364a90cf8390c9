"""A user-named output file cuvee owns (a fastText model, ``classify apply -o FILE``): the file-sized twin of a
workdir, with the same promises.

The ``<file>.json`` cuvee writes beside it is its marker and holds its kind and plan: a file without it is someone
else's and is refused; a sibling ``.<name>.cuvee.lock`` keeps a second process out; a different plan is refused
unless ``fresh``. The file itself is written through :mod:`cuvee.kernel.atomic`, so a kill never leaves a cut file
under the real name; the temporaries a killed writer of this file (or of its companions) left are swept under the
lock, as a workdir's are.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cuvee.kernel.atomic import TEMP_SUFFIX
from cuvee.kernel.workdir import FolderError, FolderLock, fingerprint


@dataclass(frozen=True)
class OwnedFile:
    """What a command declares about the file it owns."""

    kind: str  # recorded in the marker
    command: str  # named in refusals ("classify train")
    what: str = "file"
    flag: str = "--output"
    companions: tuple[str, ...] = (".json",)  # the first is the marker


def marker(output: str | Path) -> Path:
    return Path(str(output) + ".json")


def open_owned_file(output: str | Path, decl: OwnedFile, plan: dict, held: ExitStack, *, fresh: bool = False) -> Path:
    """Hold ``output``'s sibling lock until ``held`` closes; refuse the file (and its companions) when cuvee did not
    write it as ``decl.kind``, or when its recorded plan differs and ``fresh`` is not set."""
    output = Path(output)
    if output.exists() and not output.is_file():
        raise FolderError(f"{decl.flag} {output} exists and is not a file")
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(output.parent, what=f"{decl.what} {output} (folder", lock_name=f".{output.name}.cuvee.lock")
    try:
        lock.acquire()
    except FolderError:
        raise FolderError(f"{decl.what} {output} is being written by another cuvee process; wait for it to finish, "
                          f"or choose another {decl.flag}") from None
    held.callback(lock.release)
    _check_owned(output, plan, fresh, decl)
    _sweep(output, decl)
    return output


def _sweep(output: Path, decl: OwnedFile) -> None:
    """Remove the kernel's temporaries of ``output`` and its companions (``.<name>.<pid>.cuvee-tmp``): only a killed
    writer leaves one, and under the lock no other writer of these names can be at work."""
    names = {output.name, *(output.name + c for c in decl.companions)}
    for p in output.parent.iterdir():
        if not (p.name.startswith(f".{output.name}") and p.name.endswith(TEMP_SUFFIX)):
            continue
        target, _, pid = p.name[1 : -len(TEMP_SUFFIX)].rpartition(".")
        if target in names and pid.isdigit() and p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)


def _check_owned(output: Path, plan: dict, fresh: bool, decl: OwnedFile) -> None:
    related = [Path(str(output) + c) for c in decl.companions]
    if not any(p.exists() for p in (output, *related)):
        return
    try:
        meta = json.loads(related[0].read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        meta = None
    if not (isinstance(meta, dict) and meta.get("kind") == decl.kind):
        raise FolderError(f"{output} (or its {' / '.join(decl.companions)}) exists and was not written by cuvee "
                          f"{decl.command}; cuvee replaces only its own files: choose another {decl.flag}")
    old = meta.get("plan")
    if fresh or (isinstance(old, dict) and fingerprint(old) == fingerprint(plan)):
        return
    raise FolderError(f"{output} was written with a different plan ({_differing(old, plan)} differ); use --fresh to "
                      f"replace it, or choose another {decl.flag}")


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
