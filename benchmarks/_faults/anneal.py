"""``cuvee anneal CONFIG --out DIR``: kill -9 while the arms train (each arm a training folder under ``runs/``) and
while the report is written, rerun; every arm must end with the reference's losses, each step logged once, and the
report must be the reference's (timings and the folder's path aside)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import yaml

from _faults.common import (
    REPO,
    FileSave,
    FolderWatch,
    Trigger,
    compare_products,
    cuvee,
    env,
    lock_held,
    product,
    t_into_work,
    temporaries,
    without_keys,
)
from _faults.driver import Scenario
from _faults.train import train_steps, write_config

SEEDS = (0, 1)


def arms_of(seeds) -> list[str]:
    return [f"{arm}_seed{s}" for s in seeds for arm in ("candidate", "control")]
TIMINGS = ("wall_s", "cpu_s", "seconds", "time", "timing_s", "elapsed_s", "tokens_per_s", "mfu", "created")


def _steps_signature(out: Path, arms: list[str]) -> bytes:
    """Every arm's (step, loss) as JSON: what a resumed arm must repeat exactly."""
    return json.dumps({arm: train_steps(out / "runs" / arm) for arm in arms}).encode()


class AnnealWatch(FolderWatch):
    def __init__(self, out: Path, arms: list[str]):
        super().__init__(out)
        self.arms = arms

    def arms_bound(self) -> list[str]:
        return [a for a in self.arms if (self.out / "runs" / a / ".cuvee-plan.json").exists()]

    def state(self) -> dict:
        bound = self.arms_bound()
        running = ("report written" if self.has("report.json") else f"arm {bound[-1]}" if bound else
                   "bound" if self.bound() else "startup")
        return {"running": running, "arms begun": ",".join(bound)}


class Anneal(Scenario):
    name = "anneal"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        """``quick``: one seed (2 arms, CI); else seeds 0 and 1."""
        from cuvee.train.demo_data import build_variant_mix, load_wcxb, split_heldout

        self.tmp = tmp
        self.seeds = SEEDS[:1] if quick else SEEDS
        self.arms = arms_of(self.seeds)
        tmp.mkdir(parents=True, exist_ok=True)
        rows, held = split_heldout(load_wcxb())
        rows = [r for r in rows if r.get("without")]
        build_variant_mix(tmp / "base", "base", rows[:40], {"clean": 0.5, "boilerplate": 0.5}, max_doc_bytes=800)
        build_variant_mix(tmp / "cand", "cand", rows[40:100], {"clean": 1.0}, max_doc_bytes=800)
        build_variant_mix(tmp / "ctrl", "ctrl", rows[40:100], {"boilerplate": 1.0}, max_doc_bytes=800)
        build_variant_mix(tmp / "cand_other", "cand", rows[100:160], {"clean": 1.0}, max_doc_bytes=800)
        build_variant_mix(tmp / "held", "held", held[:16], {"clean": 1.0}, max_doc_bytes=800)
        base = write_config(tmp / "base.yaml", tmp / "base", 20, 10)
        subprocess.run(cuvee("train", base, "--set", f"out_dir={tmp / 'base_run'}"), check=True, env=env(), cwd=REPO,
                       capture_output=True)
        self.config = self._config(tmp / "anneal.yaml", tmp / "cand")
        self.other = self._config(tmp / "anneal_other.yaml", tmp / "cand_other")
        self.work_s = 5.0

    def _config(self, path: Path, cand: Path) -> Path:
        cfg = {"name": "fi", "checkpoint": str(self.tmp / "base_run"), "candidate": [str(cand)],
               "control": [str(self.tmp / "ctrl")], "tokens": 64 * 4 * 12, "eval": {"held": str(self.tmp / "held")},
               "eval_docs": 16, "seeds": list(self.seeds), "average_last": 2, "lr": 3e-3, "threads": 1}
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def argv(self, out: Path, config: Path | None = None) -> list[str]:
        return cuvee("anneal", config or self.config, "--out", out)

    def watch(self, out: Path) -> AnnealWatch:
        return AnnealWatch(out, self.arms)

    def summary(self, ref: Path) -> str:
        rep = json.loads((ref / "report.json").read_text())
        s = rep["sources"]["held"]
        return (f"a 20-step tiny model annealed on a clean candidate vs a boilerplate control, 12 steps per arm, seeds "
                f"{', '.join(map(str, self.seeds))}: verdict '{s['verdict']}' (effect {s['effect']:+.4f} bpb)")

    def _norm(self, out: Path):
        def norm(name: str, data: bytes) -> bytes:
            if name == "report.json":
                return without_keys(data, TIMINGS, out)
            return data

        return norm

    def _product(self, out: Path) -> dict[str, bytes]:
        """The report, every arm's logged losses and its averaged checkpoints' weights."""
        got = product(out, lambda rel: rel not in ("report.json", "looks.json"), self._norm(out))
        got["arms' (step, loss)"] = _steps_signature(out, self.arms)
        got["arms' averaged weights"] = _weights(out, self.arms)
        return got

    def compare(self, ref: Path, out: Path) -> dict:
        steps = {arm: [s for s, _ in train_steps(out / "runs" / arm)] for arm in self.arms}
        return {**compare_products(self._product(ref), self._product(out)),
                "checks": {"each arm's steps logged once": all(len(v) == len(set(v)) for v in steps.values()),
                           "no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: AnnealWatch) -> list:
        self.work_s = w.work_s()

        def arm(a):
            return Trigger(f"arm {a} bound", lambda s, t, ctx: a in s.arms_bound())

        return [Trigger("plan bound", lambda s, t, ctx: s.bound()), arm(self.arms[0]), t_into_work(0.4 * self.work_s),
                *map(arm, self.arms[1::2]), Trigger("report.md written", lambda s, t, ctx: s.has("report.md"))]

    def mid_trigger(self, w: AnnealWatch):
        second = self.arms[1]
        return Trigger(f"arm {second} bound", lambda s, t, ctx: second in s.arms_bound())

    def changes(self):
        def shard_rewritten():
            path = next((self.tmp / "cand").glob("*.bin"))
            saved = FileSave(path)
            tok = np.frombuffer(saved.data, dtype=np.uint16)[::-1].copy()  # same tokens, reversed: same size
            path.write_bytes(tok.tobytes())
            os.utime(path, ns=(saved.times[0], saved.times[1] + 1_000_000_000))
            return saved.restore

        return [("a candidate shard (.bin) rewritten at the same size", shard_rewritten, None),
                ("another candidate mix (config edited)", lambda: (lambda: None), lambda out: self.argv(out, self.other))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and bool(AnnealWatch(out, self.arms).arms_bound())


def _weights(out: Path, arms: list[str]) -> bytes:
    """The tensors of every arm's checkpoints, in order (checkpoints are compared by content, not archive bytes)."""
    import torch

    from cuvee.train.checkpoint import list_checkpoints, load_checkpoint

    parts = []
    for arm in arms:
        for path in list_checkpoints(out / "runs" / arm):
            state = load_checkpoint(path)["model"]
            parts += [f"{arm}/{path.name}/{k}".encode() + state[k].to(torch.float32).numpy().tobytes()
                      for k in sorted(state)]
    return b"".join(parts)
