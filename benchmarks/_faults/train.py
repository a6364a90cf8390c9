"""``cuvee train CONFIG``: kill -9 between and during checkpoints, rerun (it resumes from its last checkpoint).

What the trainer promises (cuvee/train/trainer.py, tests/test_train_trainer.py): resume is exact on CPU (the
resumed losses are bit-identical to an uninterrupted run's) and a resumed ``log.jsonl`` never repeats a step.
So each rerun must end at the last step with: every step logged once, each step's loss equal to the
reference's, a final checkpoint that loads (weights only) with weights equal to the reference's."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import yaml

from _faults.common import FileSave, Trigger, cuvee, lock_held
from _faults.driver import Scenario

STEPS = 150
CKPT = 30


def write_config(path: Path, data: Path, steps: int = STEPS, ckpt: int = CKPT) -> Path:
    cfg = {"name": "fi", "model": {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
           "data": {"paths": [str(data)], "seq_len": 64, "seed": 3},
           "optim": {"lr": 3.0e-3, "warmup_steps": 5}, "steps": steps, "micro_batch": 4, "log_every": 1,
           "ckpt_every": ckpt, "keep_checkpoints": 2, "threads": 1, "out_dir": str(path.parent / "unused")}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def train_steps(out: Path) -> list[tuple[int, float]]:
    """(step, loss) of every complete train line of ``log.jsonl``."""
    rows = []
    try:
        data = (out / "log.jsonl").read_bytes()
    except OSError:
        return rows
    for line in data.split(b"\n"):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("event") == "train":
            rows.append((r["step"], r["loss"]))
    return rows


class TrainWatch:
    def __init__(self, out: Path):
        self.out = out

    def step(self) -> int:
        try:
            with open(self.out / "log.jsonl", "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 600))
                tail = f.read().split(b"\n")
        except OSError:
            return 0
        for line in reversed(tail):
            try:
                return int(json.loads(line).get("step", 0))
            except (ValueError, AttributeError):
                continue
        return 0

    def ckpts(self) -> list[str]:
        try:
            return sorted(p.name for p in (self.out / "checkpoints").iterdir())
        except OSError:
            return []

    def tick(self, t: float) -> None:
        pass

    def state(self) -> dict:
        running = (f"step {self.step()} logged" if self.step() else "bound" if (self.out / ".cuvee-plan.json").exists()
                   else "startup")
        return {"running": running, "checkpoints": ",".join(c.replace("step_", "").lstrip("0") for c in self.ckpts())}


class Train(Scenario):
    name = "train"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        """``quick``: 40 steps, a checkpoint every 10 (CI); else 150 and 30."""
        from cuvee.train.demo_data import build_variant_mix, load_wcxb

        self.tmp = tmp
        self.steps, self.ckpt = (40, 10) if quick else (STEPS, CKPT)
        rows = load_wcxb()
        tmp.mkdir(parents=True, exist_ok=True)
        build_variant_mix(tmp / "data", "fi", rows[:60], {"clean": 1.0}, seed=seed, max_doc_bytes=800)
        build_variant_mix(tmp / "data_other", "fi", rows[60:120], {"clean": 1.0}, seed=seed, max_doc_bytes=800)
        self.config = write_config(tmp / "train.yaml", tmp / "data", self.steps, self.ckpt)

    def argv(self, out: Path) -> list[str]:
        return cuvee("train", self.config, "--set", f"out_dir={out}")

    def watch(self, out: Path) -> TrainWatch:
        return TrainWatch(out)

    def summary(self, ref: Path) -> str:
        steps = train_steps(ref)
        return (f"{self.steps} steps of a 2-layer dim-32 byte-level model on CPU, checkpoint every {self.ckpt} (keep 2); "
                f"final loss {steps[-1][1]:.4f}")

    def fixed_triggers(self, w: TrainWatch) -> list:
        def at(k):
            return lambda s, t, ctx: s.step() >= k

        trig = [
            Trigger("plan bound", lambda s, t, ctx: (s.out / ".cuvee-plan.json").exists()),
            Trigger("first step logged", at(1)),
            Trigger(f"step {self.ckpt - 1} (just before the first checkpoint)", at(self.ckpt - 1)),
            Trigger(f"first checkpoint (step {self.ckpt}) written", lambda s, t, ctx: any(c.endswith(".pt") for c in s.ckpts())),
            Trigger(f"step {self.steps // 2 + self.ckpt // 2} (between checkpoints)", at(self.steps // 2 + self.ckpt // 2)),
            Trigger(f"step {self.steps - 1} (near the end)", at(self.steps - 1)),
            Trigger(f"step {self.steps} logged (final checkpoint, exit)", at(self.steps)),
        ]
        return trig

    def random_trigger(self, rng: random.Random) -> Trigger:
        k = rng.randint(2, self.steps - 1)
        return Trigger(f"step {k} (random)", lambda s, t, ctx: s.step() >= k)

    def mid_trigger(self, w: TrainWatch):
        return Trigger(f"step {self.steps // 2}", lambda s, t, ctx: s.step() >= self.steps // 2)

    def compare(self, ref: Path, out: Path) -> dict:
        want = dict(train_steps(ref))
        got = train_steps(out)
        seen: dict = {}
        for s, _loss in got:
            seen[s] = seen.get(s, 0) + 1
        loads, same = _final_weights(ref, out, self.steps)
        ckdir = out / "checkpoints"
        return {"dup": sum(c - 1 for c in seen.values() if c > 1), "loss": sum(1 for s in want if s not in seen),
                "extra": sum(1 for s in seen if s not in want),
                "changed": sum(1 for s, loss in got if s in want and loss != want[s]),
                "checks": {f"final checkpoint (step {self.steps}) loads": loads, "final weights = reference": same,
                           "no .tmp left": not (ckdir.exists() and any(ckdir.glob("*.tmp")))}}

    def changes(self):
        def shard_rewritten():
            path = self.tmp / "data" / "fi_00000.bin"
            saved = FileSave(path)
            tok = np.frombuffer(saved.data, dtype=np.uint16).copy()
            tok = tok[::-1].copy()  # the same tokens in reverse order: same size, valid ids, other text everywhere
            path.write_bytes(tok.tobytes())
            os.utime(path, ns=(saved.times[0], saved.times[1] + 1_000_000_000))
            return saved.restore

        def other_mix():
            data, other, hold = self.tmp / "data", self.tmp / "data_other", self.tmp / "data_held"
            data.rename(hold)
            other.rename(data)

            def restore():
                data.rename(other)
                hold.rename(data)

            return restore

        return [("a training shard (.bin) rewritten at the same size, manifest untouched", shard_rewritten, None),
                ("another mix (manifest and shards) at the same data path", other_mix, None)]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and TrainWatch(out).step() >= 1


def _final_weights(ref: Path, out: Path, steps: int = STEPS) -> tuple[bool, bool]:
    """(the final checkpoint loads as data only and is at the last step, its weights equal the reference's)."""
    import torch

    from cuvee.train.checkpoint import load_checkpoint

    path = out / "checkpoints" / f"step_{steps:07d}.pt"
    try:
        got = load_checkpoint(path)
    except Exception:  # noqa: BLE001 - any failure to load is the failed check
        return False, False
    want = load_checkpoint(ref / "checkpoints" / f"step_{steps:07d}.pt")
    same = (got["step"] == steps and set(got["model"]) == set(want["model"])
            and all(torch.equal(got["model"][k], want["model"][k]) for k in want["model"]))
    return got["step"] == steps, same
