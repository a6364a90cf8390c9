"""``cuvee classify train`` (a fastText model file, a transformer head folder) and ``cuvee classify apply``: kill -9
before, during and after the model or output file is written, rerun; the product must be the reference's (fastText
trains in a fresh child process, deterministically; a head's weights are compared as tensors, its ``head.pt``
archive carries the temporary's name) and no temporary may be left beside it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from _faults.common import (
    FileWatch,
    FolderWatch,
    Trigger,
    compare_products,
    cuvee,
    lock_held,
    product,
    rewrite_same_size,
    t_into_work,
    temporaries,
    without_keys,
)
from _faults.driver import Scenario

GOOD = ["committee", "reviewed", "evidence", "published", "detailed", "report", "students", "science"]
BAD = ["click", "here", "buy", "cheap", "deals", "free", "shipping", "login"]


def write_labelled(path: Path, seed: int, n: int, words: int) -> Path:
    rng = random.Random(seed)
    rows = [{"text": " ".join(rng.choice(v + GOOD[:2]) for _ in range(words)), "label": lab}
            for _ in range(n) for v, lab in ((GOOD, "hq"), (BAD, "lq"))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def flip_label(data: bytes) -> bytes:
    """The first record's label hq <-> lq: same size, another training set."""
    i = data.index(b'"label": "') + 10
    return data[:i] + (b"lq" if data[i:i + 2] == b"hq" else b"hq") + data[i + 2:]


def _tensors(data: bytes) -> bytes:
    """A torch file as its tensors' bytes (the zip archive's name is the temporary's, which differs per process)."""
    import io

    import torch

    state = torch.load(io.BytesIO(data), weights_only=True)
    return b"".join(k.encode() + state[k].numpy().tobytes() for k in sorted(state))


class _OwnedFile(Scenario):
    """A command writing one user-named file (and its ``<file>.json`` marker) that cuvee owns."""

    output_is_file = True
    refuse_after = ("done",)  # a kill leaves no finished file to resume: another plan is a new file by design
    file_name = "out"

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.work_s = 1.0

    def out(self, tmp: Path, tag) -> Path:
        return tmp / str(tag) / self.file_name

    def footprint(self, out: Path) -> Path:
        return out.parent

    def watch(self, out: Path) -> FileWatch:
        return FileWatch(out)

    def norm(self, out: Path):
        return lambda name, data: without_keys(data, (), out.parent) if name.endswith(".json") else data

    def compare(self, ref: Path, out: Path) -> dict:
        mine = lambda rel: not rel.startswith(self.file_name)  # noqa: E731 - the product is the file and its companions
        return {**compare_products(product(ref.parent, mine, self.norm(ref)), product(out.parent, mine, self.norm(out))),
                "checks": {"no temporary left": not FileWatch(out).state()["tmp"]}}

    def fixed_triggers(self, w: FileWatch) -> list:
        self.work_s = w.work_s()
        return [Trigger("lock taken", lambda s, t, ctx: s.bound()), t_into_work(0.5 * self.work_s),
                Trigger("its temporary being written", lambda s, t, ctx: bool(s.state()["tmp"])),
                Trigger(f"{self.file_name} written", lambda s, t, ctx: s.file.exists())]

    def mid_trigger(self, w: FileWatch):
        return t_into_work(0.4 * w.work_s())

    def busy(self, out: Path) -> bool:
        return lock_held(FileWatch(out).lock)

    def summary(self, ref: Path) -> str:
        return ", ".join(f"{n} ({len(d):,} B)" for n, d in product(ref.parent).items())


class ClassifyTrain(_OwnedFile):
    name = "classify train"
    file_name = "model.bin"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        super().__init__(tmp)
        self.data = write_labelled(tmp / "in" / "labelled.jsonl", seed, 3000, 40)
        self.other = write_labelled(tmp / "in" / "other.jsonl", seed + 1, 3000, 40)

    def argv(self, out: Path, data: Path | None = None) -> list[str]:
        return cuvee("classify", "train", "--data", data or self.data, "-o", out, "--epoch", 5, "--dim", 16,
                     "--bucket", 100000, "--threads", 1)

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.data, flip_label).restore

        return [("the labelled file rewritten at the same size (one label flipped)", rewritten, None),
                ("another labelled file", lambda: (lambda: None), lambda out: self.argv(out, self.other))]


class ClassifyApply(_OwnedFile):
    name = "classify apply"
    file_name = "kept.jsonl"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        super().__init__(tmp)
        self.docs = write_labelled(tmp / "in" / "docs.jsonl", seed, 2000, 60)
        self.other = write_labelled(tmp / "in" / "other.jsonl", seed + 1, 2000, 60)

    def argv(self, out: Path, docs: Path | None = None) -> list[str]:
        return cuvee("classify", "apply", "-m", "demo", "-i", docs or self.docs, "-o", out, "--top-percent", 50)

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.docs, lambda b: b.replace(b"committee", b"COMMITTEE", 1)).restore

        return [("the input file rewritten at the same size (one word)", rewritten, None),
                ("another input file", lambda: (lambda: None), lambda out: self.argv(out, self.other))]


class ClassifyHead(Scenario):
    """``classify train --kind transformer``: a head folder (kind classifier) over the shipped MiniLM encoder."""

    name = "classify train --kind transformer"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        self.tmp = tmp
        self.data = write_labelled(tmp / "in" / "labelled.jsonl", seed, 100, 12)
        self.other = write_labelled(tmp / "in" / "other.jsonl", seed + 1, 100, 12)
        self.work_s = 5.0

    def argv(self, out: Path, data: Path | None = None) -> list[str]:
        return cuvee("classify", "train", "--kind", "transformer", "--data", data or self.data, "-o", out,
                     "--epoch", 50, "--max-length", 16, "--threads", 1)

    def watch(self, out: Path) -> FolderWatch:
        return FolderWatch(out)

    def norm(self, out: Path):
        def norm(name, data):
            return _tensors(data) if name.endswith(".pt") else without_keys(data, (), out) if name.endswith(".json") \
                else data

        return norm

    def compare(self, ref: Path, out: Path) -> dict:
        return {**compare_products(product(ref, norm=self.norm(ref)), product(out, norm=self.norm(out))),
                "checks": {"no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: FolderWatch) -> list:
        self.work_s = w.work_s()
        return [Trigger("plan bound", lambda s, t, ctx: s.bound()), t_into_work(0.5 * self.work_s),
                Trigger("head.pt written", lambda s, t, ctx: s.has("head.pt"))]

    def random_trigger(self, rng: random.Random):
        return t_into_work(rng.uniform(0.0, self.work_s))

    def mid_trigger(self, w: FolderWatch):
        return t_into_work(0.4 * w.work_s())

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.data, flip_label).restore

        return [("the labelled file rewritten at the same size (one label flipped)", rewritten, None),
                ("another labelled file", lambda: (lambda: None), lambda out: self.argv(out, self.other))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()

    def summary(self, ref: Path) -> str:
        return "200 labelled rows, MiniLM (shipped) + logistic head: " + ", ".join(product(ref))
