"""The annotations JSONL that ``cuvee classify annotate -o FILE`` appends to: cuvee's own, or refused.

The file is named by the user, so it may be theirs. cuvee appends to it only when every record in it is
one cuvee wrote for this annotator (the fields of :data:`OWN_FIELDS`, the same model and prompt hash);
any other content is refused in one line, before any request, and never rewritten. It is a resume ledger
(:mod:`cuvee.kernel.ledger`): the only repair is of cuvee's own last write, a torn last line cut off and
redone, a complete last record that lost its newline given it back. A sibling lock file
(``.<name>.cuvee.lock``) keeps two annotate processes off the same file.

The file is also bound to its plan (the kernel's owned file, as ``classify apply -o``): ``<out>.json`` records
the annotator, the sample settings and the stamped input files; a rerun with another plan (an input rewritten,
another input file) is refused untouched unless ``--fresh``, and an annotated id whose text changed is refused
even when the stamps agree.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack
from pathlib import Path

from cuvee.kernel import ledger
from cuvee.kernel.errors import UserError
from cuvee.kernel.owned_file import OwnedFile, open_owned_file
from cuvee.kernel.workdir import FolderError

OWN_FIELDS = ("id", "text_sha256", "score", "answer", "model", "prompt", "prompt_sha256", "prompt_tokens",
              "completion_tokens")
KIND = "classify-annotate"  # the kind in the <out>.json marker
ADVICE = "; cuvee appends only to annotation files it wrote: use another --out"
ANNOTATIONS_FILE = OwnedFile(KIND, "classify annotate", "annotations file", "--out", (".json", ".summary.json"))


class AnnotateError(UserError):
    """A refusal or failure of ``classify annotate`` the user has to act on (a file cuvee did not write, a
    changed input, a prompt that is not a template): one line."""


def read_done(path: str | Path, model: str | None = None,
              prompt_sha256: str | None = None) -> tuple[dict[str, dict], ledger.Contents]:
    """Records already in ``path`` by id, and the ledger contents to open it with; refuses anything that is not
    a cuvee annotation for ``model`` / ``prompt_sha256`` (None: any). Changes nothing."""
    contents = ledger.read(path, ADVICE)
    done: dict[str, dict] = {}
    for n, rec in enumerate(contents.records, 1):
        missing = [k for k in OWN_FIELDS if k not in rec]
        if missing:
            raise AnnotateError(f"{path}: line {n} is not a cuvee annotation (no {', '.join(missing[:3])}){ADVICE}")
        if (model is not None and rec["model"] != model) or \
                (prompt_sha256 is not None and rec["prompt_sha256"] != prompt_sha256):
            raise AnnotateError(f"{path} holds annotations by model {rec['model']!r} / prompt "
                                f"{str(rec['prompt_sha256'])[:12]}; this run is {model!r} / {str(prompt_sha256)[:12]}: "
                                "use another --out")
        done[str(rec["id"])] = rec
    return done, contents


def check_texts(path: Path, done: dict[str, dict], sample: list) -> None:
    """Refuse when a sampled document already annotated in ``path`` now has another text: its record (score,
    answer) would stand for a text that is no longer in the input."""
    for doc in sample:
        rec = done.get(doc.id)
        if rec is None:
            continue
        now = hashlib.sha256(doc.text.encode("utf-8")).hexdigest()
        if rec.get("text_sha256") != now:
            raise AnnotateError(f"{path}: document {doc.id!r} was annotated from another text (text_sha256 "
                                f"{str(rec.get('text_sha256'))[:12]} there, {now[:12]} in the input now); the input "
                                "changed since: use another --out, or --fresh to annotate it again")


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


def plan(input_files: list[str], model: str, prompt: str, prompt_sha256: str, settings: dict) -> dict:
    """What the file's records stand for: the annotator, the sample settings and the input files, each stamped
    (size, mtime, head/tail SHA-256): a rewrite or another input set is another plan. ``--n`` is left out on
    purpose: a larger sample extends a smaller one (same seed), so the file can be grown."""
    from cuvee.kernel.stamps import stamps

    return {"command": "classify annotate", "model": model, "prompt": prompt, "prompt_sha256": prompt_sha256,
            "settings": settings, "inputs": stamps(input_files)}


def marker(out: Path) -> Path:
    """``<out>.json``: cuvee's mark on the file and the plan it was written for (as ``classify apply``'s)."""
    return Path(str(out) + ".json")


def claim(out: Path, plan: dict, fresh: bool) -> ExitStack:
    """Hold ``out``'s sibling lock (``.<name>.cuvee.lock``) until the returned stack closes; refuse, untouched, a
    file cuvee did not write or one written for another plan (the kernel's owned file). With ``fresh``, cuvee's own
    file (and its summary) is removed first; the marker is written by :func:`bind` once every check passed."""
    if out.is_file() and not marker(out).exists() and _own_records(out):
        raise AnnotateError(f"{out} holds annotations from a cuvee that did not record their plan (no "
                            f"{marker(out).name}), so its inputs cannot be checked: move it away, or use another --out")
    with ExitStack() as held:
        try:
            open_owned_file(out, ANNOTATIONS_FILE, plan, held, fresh=fresh)
        except FolderError as e:
            raise AnnotateError(str(e)) from None
        if fresh:
            read_done(out)  # a cuvee marker over a file that is not cuvee's annotations: still refused
            out.unlink(missing_ok=True)  # the records first: the old marker must never describe new records
            Path(str(out) + ".summary.json").unlink(missing_ok=True)
        return held.pop_all()


def bind(out: Path, plan: dict) -> None:
    """Record ``plan`` as the one ``out`` is written for, before the first record is appended."""
    from cuvee.kernel.atomic import write_json

    write_json(marker(out), {"kind": KIND, "plan": plan})


def _own_records(out: Path) -> bool:
    try:
        return bool(read_done(out)[0])
    except UserError:
        return False
