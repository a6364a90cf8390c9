"""Where a card is written, which cuvee folder is held meanwhile, and which files it may replace.

Why: the card goes into folders that hold other things (by default the run's output folder, which is a
Hugging Face dataset repository in the making, where a user may already keep their own README.md). A folder of
its own (``--out DIR``, or ``<run>/card``) is opened through the kernel's preamble as kind ``card``
(:mod:`cuvee.kernel.workdir`: claim, lock, bind, sweep); the run's output folder belongs to the run, so the run's
folder is locked while the card is written (a ``cuvee run`` working there at the same moment is refused, and the
other way round). In every case ``.cuvee-card.json`` records the SHA-256 of each file the card wrote, and a file
is replaced or removed only while it still has a recorded hash: a file cuvee did not write, or one edited since,
stops the card before anything is written. Every file goes through the kernel's atomic write.
"""

from __future__ import annotations

import hashlib
import json
import re
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cuvee.kernel.atomic import write_bytes
from cuvee.kernel.workdir import FolderError, Workdir, locked, open_workdir, owner

RECORD = ".cuvee-card.json"
CARD_FOLDER = Workdir("card", "card folder")
CARD_FILE = re.compile(r"(README\.md|card\.html|card_images/[A-Za-z0-9_-]+\.png)")  # all a card ever writes


@dataclass(frozen=True)
class Place:
    folder: Path  # where README.md, card.html and card_images/ go
    lock_folder: Path  # the cuvee folder whose lock is held while writing
    what: str  # for messages
    own: bool = False  # a card folder (else the run's output folder)

    def hold(self, held: ExitStack) -> None:
        """Until ``held`` closes: the card's own folder opened through the kernel's preamble (its binding says only
        that it holds a card), or the run's folder locked (its plan is the run's, not the card's to bind)."""
        if self.own:
            open_workdir(self.folder, CARD_FOLDER, {"command": "card"}, held)
        else:
            held.enter_context(locked(self.lock_folder, self.what))


def _inside(p: Path, parent: Path) -> bool:
    try:
        return p.resolve().is_relative_to(parent.resolve())
    except OSError:
        return False


def choose(run_dir: Path, output_root: Path | None, out_dir: str | Path | None, described: Path | None = None,
           what: str = "folder") -> Place:
    """The card's folder: ``out_dir``, else the mix or training folder the card describes (``described``, under its
    own lock), else the run's output folder, else ``<run_dir>/card``; for the output folder, the cuvee run folder
    that owns it."""
    if described is not None and out_dir is None:
        mark = owner(described)
        if mark is None or mark["kind"] not in ("mix", "train"):
            raise FolderError(f"{what} {described} is not a folder cuvee mix or cuvee train created (no "
                              f".cuvee-owner.json of either kind); write the card elsewhere with --out DIR")
        return Place(described, described, what)
    if output_root is not None and (out_dir is None or Path(out_dir).resolve() == output_root.resolve()):
        for cand in (output_root, run_dir):
            mark = owner(cand)
            if mark is not None and (cand == output_root or _inside(output_root, run_dir)):
                if mark["kind"] != "run":
                    raise FolderError(f"output folder {output_root} belongs to a cuvee {mark['kind']} folder, not a "
                                      f"run; write the card elsewhere with --out DIR")
                return Place(output_root, cand, "run folder" if cand == run_dir else "output folder")
        raise FolderError(f"output folder {output_root} is not in a folder cuvee created for a run (no "
                          f".cuvee-owner.json); write the card elsewhere with --out DIR")
    folder = Path(out_dir) if out_dir is not None else run_dir / "card"
    return Place(folder, folder, CARD_FOLDER.what, own=True)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_record(folder: Path) -> dict[str, list[str]]:
    p = folder / RECORD
    if not p.exists():
        return {}
    try:
        files = json.loads(p.read_text())["files"]
        if isinstance(files, dict) and all(isinstance(v, list) and CARD_FILE.fullmatch(str(k))
                                           for k, v in files.items()):
            return {str(k): [str(x) for x in v] for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise FolderError(f"{p} is unreadable, so cuvee cannot tell which card files it wrote; delete the card "
                      f"files (README.md, card.html, card_images/, {RECORD}) or write the card elsewhere with --out")


def _write_record(folder: Path, files: dict[str, list[str]]) -> None:
    write_bytes(folder / RECORD, json.dumps({"files": files}, indent=2, sort_keys=True).encode())


def _check(folder: Path, rel: str, recorded: dict[str, list[str]]) -> None:
    path = folder / rel
    for parent in list(Path(rel).parents)[:-1]:  # card_images/ must be a plain folder in this folder
        d = folder / parent
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            raise FolderError(f"{d} is not a plain folder; cuvee will not write the card through it")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise FolderError(f"{path} is not a plain file; cuvee will not replace it with the card")
    if path.exists() and _file_sha(path) not in recorded.get(rel, []):
        why = "was edited since cuvee wrote it" if rel in recorded else "was not written by cuvee"
        raise FolderError(f"{path} {why}; move it away, or write the card elsewhere with --out DIR")


def write_files(folder: Path, files: dict[str, bytes]) -> dict[str, Path]:
    """Write ``files`` (path relative to ``folder`` -> bytes) and remove the card files of an earlier card that
    are not written again; refuse, before writing anything, if one of them is not cuvee's own (see above)."""
    if bad := [rel for rel in files if not CARD_FILE.fullmatch(rel)]:
        raise ValueError(f"not a card file name: {bad[0]!r}")
    recorded = _read_record(folder)
    for rel in sorted(set(files) | set(recorded)):
        _check(folder, rel, recorded)
    new = {rel: _sha(data) for rel, data in files.items()}
    # first record both the old and the new hashes: a crash half-way leaves files this record still owns
    _write_record(folder, {rel: sorted(set(recorded.get(rel, [])) | ({new[rel]} if rel in new else set()))
                           for rel in set(recorded) | set(new)})
    written: dict[str, Path] = {}
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, data)
        written[rel] = path
    for rel in set(recorded) - set(files):
        (folder / rel).unlink(missing_ok=True)
    _write_record(folder, {rel: [h] for rel, h in new.items()})
    return written
