"""The annotations JSONL that ``cuvee classify annotate -o FILE`` appends to: cuvee's own, or refused.

The file is named by the user, so it may be theirs. cuvee appends to it only when every record in it is
one cuvee wrote for this annotator (the fields of :data:`OWN_FIELDS`, the same model and prompt hash);
any other content is refused in one line, before any request, and never rewritten. The only repair is of
cuvee's own last write: a final line cut by a kill (an unparsable prefix of a record) is cut off and redone,
and a complete last record that lost its newline gets it back. A sibling lock file
(``.<name>.cuvee.lock``) keeps two annotate processes off the same file.
"""

from __future__ import annotations

import json
from pathlib import Path

from cuvee.classifiers.llm_http import AnnotateError
from cuvee.folders import FolderError, FolderLock

OWN_FIELDS = ("id", "text_sha256", "score", "answer", "model", "prompt", "prompt_sha256", "prompt_tokens",
              "completion_tokens")
RECORD_HEAD = b'{"id": '  # how every record cuvee writes begins (json.dumps, "id" first)


def _torn(line: bytes) -> bool:
    """A prefix of a record cuvee was writing when it was killed (not JSON, begins like a record)."""
    head = line[: len(RECORD_HEAD)]
    return RECORD_HEAD.startswith(head) if head else False


def _check_record(path: Path, n: int, rec, model: str | None, prompt_sha256: str | None) -> None:
    missing = [k for k in OWN_FIELDS if not isinstance(rec, dict) or k not in rec]
    if missing:
        raise AnnotateError(f"{path}: line {n} is not a cuvee annotation (no {', '.join(missing[:3])}); cuvee appends "
                            f"only to annotation files it wrote: use another --out")
    if (model is not None and rec["model"] != model) or (prompt_sha256 is not None and rec["prompt_sha256"] != prompt_sha256):
        raise AnnotateError(f"{path} holds annotations by model {rec['model']!r} / prompt "
                            f"{str(rec['prompt_sha256'])[:12]}; this run is {model!r} / {str(prompt_sha256)[:12]}: "
                            "use another --out")


def load_done(path: str | Path, model: str | None = None, prompt_sha256: str | None = None) -> tuple[dict[str, dict], int]:
    """Records already in ``path`` by id, and how many torn lines were cut (0 or 1).

    Refuses (AnnotateError) a file with any line that is not a cuvee annotation for ``model`` / ``prompt_sha256``
    (None: any), before changing a byte of it."""
    path = Path(path)
    if not path.exists():
        return {}, 0
    if not path.is_file():
        raise AnnotateError(f"{path}: not a file; give --out a JSONL file path")
    data = path.read_bytes()
    lines = data.split(b"\n")  # the last element is what follows the last newline ("" when the file ends in one)
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    done: dict[str, dict] = {}
    keep, dropped = len(data), 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i == len(lines) - 1 and _torn(line.strip()):
                keep = data.rfind(line)
                dropped = 1
                continue
            raise AnnotateError(f"{path}: line {i + 1} is not JSON; not an annotations file cuvee wrote: "
                                "use another --out") from None
        _check_record(path, i + 1, rec, model, prompt_sha256)
        done[str(rec["id"])] = rec
    if keep != len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    elif data and not data.endswith(b"\n"):  # cuvee's own last record, cut just before its newline
        with open(path, "ab") as f:
            f.write(b"\n")
    return done, dropped


def check_summary(path: Path) -> None:
    """Refuse to overwrite ``<out>.summary.json`` unless cuvee wrote it."""
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        old = None
    if not (isinstance(old, dict) and "prompt_sha256" in old and "annotated" in old):
        raise AnnotateError(f"{path} exists and is not a summary cuvee wrote; move it away or use another --out")


def lock(out: Path) -> FolderLock:
    """The exclusive lock on ``out`` (a sibling ``.<name>.cuvee.lock``), held for the whole run."""
    try:
        return FolderLock(out.parent, what="folder of", lock_name=f".{out.name}.cuvee.lock").acquire()
    except FolderError as e:
        if "in use" in str(e):
            raise AnnotateError(f"{out} is being written by another cuvee annotate process; wait for it to finish, "
                                "or use another --out") from None
        raise AnnotateError(str(e)) from None
