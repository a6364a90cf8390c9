"""``cuvee train CONFIG --export-hf DIR`` on a finished training folder: kill -9 while the Hugging Face folder is
claimed, bound and written, rerun; the export must be the reference's, file for file.

The export folder is always written whole (the kernel empties it under its lock, then the model is saved), so a
changed checkpoint is a new export, not a refusal: the changed-input cases of a training folder are ``train``'s.
What must be refused is a folder that is not an export: always emptied, a user's folder or another command's
cuvee folder would lose its files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from _faults.common import (
    REPO,
    FolderWatch,
    Trigger,
    compare_products,
    cuvee,
    env,
    lock_held,
    product,
    t_into_work,
    temporaries,
)
from _faults.driver import Scenario
from _faults.train import write_config

STEPS = 20


class ExportHF(Scenario):
    name = "train --export-hf"
    fresh_flag = None  # train's --fresh starts the training over; the export folder is emptied on every run anyway
    other_kind = "mix"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        from cuvee.train.demo_data import build_variant_mix, load_wcxb

        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        build_variant_mix(tmp / "data", "fi", load_wcxb()[:40], {"clean": 1.0}, seed=seed, max_doc_bytes=800)
        self.config = write_config(tmp / "train.yaml", tmp / "data", STEPS, 10)
        self.trained = tmp / "trained"
        subprocess.run(cuvee("train", self.config, "--set", f"out_dir={self.trained}"), check=True, env=env(), cwd=REPO,
                       capture_output=True)
        self.work_s = 1.0

    def out(self, tmp: Path, tag) -> Path:
        return tmp / str(tag) / "hf"

    def argv(self, out: Path) -> list[str]:
        train_dir = out.parent / "train"  # each attempt exports from its own copy of the finished training folder
        if not train_dir.exists():
            shutil.copytree(self.trained, train_dir)
        return cuvee("train", self.config, "--set", f"out_dir={train_dir}", "--export-hf", out)

    def watch(self, out: Path) -> FolderWatch:
        return FolderWatch(out)

    def summary(self, ref: Path) -> str:
        return f"a {STEPS}-step tiny model exported: " + ", ".join(f"{n} ({len(d):,} B)" for n, d in product(ref).items())

    def compare(self, ref: Path, out: Path) -> dict:
        return {**compare_products(product(ref), product(out)),
                "checks": {"no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: FolderWatch) -> list:
        self.work_s = w.work_s()
        return [Trigger("export folder bound", lambda s, t, ctx: s.bound()), t_into_work(0.3 * self.work_s),
                Trigger("config.json written", lambda s, t, ctx: s.has("config.json")),
                Trigger("model.safetensors written", lambda s, t, ctx: s.has("model.safetensors"))]

    def mid_trigger(self, w: FolderWatch):
        return Trigger("config.json written", lambda s, t, ctx: s.has("config.json"))

    def changes(self):
        return []

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()
