"""``cuvee card RUN --out DIR`` and ``cuvee stats RUN``: the commands that write from a finished run folder. Kill -9
while the card's folder is held (profile, plots, the files and their hash record) or while the run folder's lock
is held for the re-merge, rerun; the card must be the reference's byte for byte, stats.json complete, balanced and
equal to the reference's (timings and the folder's path aside).

A run folder is bound to its own path (``recipe.run_dir`` is in its plan), so it cannot be copied: each ``stats``
attempt gets a run of its own, made by ``cuvee run`` before the attempt (not part of what is measured). The card
reads one shared run and writes into a card folder per attempt (its own kind, ``card``). A card has no plan of
its own to change (it describes whatever the run holds now), so it has no changed-input cases; ``stats`` refuses
a changed input or another recipe as the run folder does."""

from __future__ import annotations

import json
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
    rewrite_same_size,
    swap_case_edit,
    t_into_work,
    temporaries,
    without_keys,
)
from _faults.driver import Scenario
from _faults.run import make_input, make_recipe

# what differs between two runs' stats.json: times, and the resolved recipe's hash (it holds the run folder's path)
STATS_TIMINGS = ("time_s", "wall_time_s", "started", "finished", "docs_per_s", "seconds", "elapsed_s", "recipe_sha256")


def prepare_run(recipe: Path, run_dir: Path) -> Path:
    """``cuvee run RECIPE --run-dir RUN`` once (the folder the command under test reads)."""
    if not (run_dir / "stats.json").exists():
        subprocess.run(cuvee("run", recipe, "--run-dir", run_dir), check=True, env=env(), cwd=REPO, capture_output=True)
    return run_dir


def _inputs(tmp: Path, seed: int) -> tuple[Path, Path]:
    make_input(tmp / "in", seed, n_files=4)
    recipe = make_recipe(tmp / "recipe.yaml", tmp / "in", 0.0, 1, slow=False, tasks=2)
    edited = make_recipe(tmp / "recipe_edited.yaml", tmp / "in", 0.0, 1, min_chars=41, slow=False, tasks=2)
    return recipe, edited


class LockWatch(FolderWatch):
    """A folder whose work is known by its lock alone (a run folder re-merged, a card folder written)."""

    def bound(self) -> bool:
        return lock_held(self.out / ".cuvee.lock")

    def state(self) -> dict:
        files = [f for f in self.files() if not f.startswith(("logs/", "work/", "output/"))]
        return {"running": "locked" if self.bound() else "not locked", "files": ",".join(files[:6])}


class Card(Scenario):
    name = "card"
    fresh_flag = None  # the card replaces only its own files, by their recorded hashes: nothing to start over

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        self.tmp = tmp
        self.recipe, _ = _inputs(tmp, seed)
        self.run = prepare_run(self.recipe, tmp / "run")
        self.work_s = 1.0

    def argv(self, out: Path) -> list[str]:
        return cuvee("card", self.run, "--out", out, "--max-token-docs", 50)

    def watch(self, out: Path) -> LockWatch:
        return LockWatch(out)

    def summary(self, ref: Path) -> str:
        return "a card of a 240-document run: " + ", ".join(f"{n} ({len(d):,} B)" for n, d in product(ref).items())

    def compare(self, ref: Path, out: Path) -> dict:
        return {**compare_products(product(ref), product(out)),
                "checks": {"no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: LockWatch) -> list:
        self.work_s = w.work_s()
        return [Trigger("card folder locked", lambda s, t, ctx: s.bound()), t_into_work(0.5 * self.work_s),
                Trigger("hash record written (files next)", lambda s, t, ctx: s.has(".cuvee-card.json")),
                Trigger("README.md written", lambda s, t, ctx: s.has("README.md"))]

    def mid_trigger(self, w: LockWatch):
        return t_into_work(0.4 * w.work_s())

    def changes(self):
        return []

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock")

    def foreign_cases(self, tmp: Path) -> list:
        """Also the default place, the run's output folder: a README.md a user keeps there stops the card."""
        cases = super().foreign_cases(tmp)
        recipe, _ = _inputs(tmp / "mine", 0)
        run = prepare_run(recipe, tmp / "mine" / "run")
        (run / "output" / "README.md").write_text("# my own dataset card\n")
        return cases + [("a README.md of the user's in the run's output folder (the default place)",
                         cuvee("card", run, "--max-token-docs", 50), run / "output")]


class Stats(Scenario):
    name = "stats"
    fresh_flag = None

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        self.tmp = tmp
        self.recipe, self.edited = _inputs(tmp, seed)
        self.work_s = 0.3

    def argv(self, out: Path, recipe: Path | None = None) -> list[str]:
        if not out.exists():  # an attempt's own run (a foreign folder stays as the user made it)
            prepare_run(self.recipe, out)
        return cuvee("stats", recipe, "--run-dir", out) if recipe else cuvee("stats", out)

    def watch(self, out: Path) -> LockWatch:
        return LockWatch(out)

    def summary(self, ref: Path) -> str:
        acc = json.loads((ref / "stats.json").read_text())["accounting"]
        return (f"stats re-merged from a 4-job run of 240 documents: {acc['kept']} kept, {acc['dropped']} dropped, "
                f"balanced {acc['balanced']}")

    def _stats(self, out: Path) -> dict[str, bytes]:
        try:
            return {"stats.json": without_keys((out / "stats.json").read_bytes(), STATS_TIMINGS, out)}
        except (OSError, ValueError):
            return {}

    def compare(self, ref: Path, out: Path) -> dict:
        try:
            balanced = json.loads((out / "stats.json").read_text())["accounting"]["balanced"] is True
        except (OSError, ValueError, KeyError):
            balanced = False
        return {**compare_products(self._stats(ref), self._stats(out)), "checks": {"stats.json balanced": balanced}}

    def fixed_triggers(self, w: LockWatch) -> list:
        self.work_s = w.work_s(0.3)
        return [Trigger("run folder locked", lambda s, t, ctx: s.bound()), t_into_work(0.5 * self.work_s)]

    def mid_trigger(self, w: LockWatch):
        return Trigger("run folder locked", lambda s, t, ctx: s.bound())

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.tmp / "in" / "part01.jsonl", swap_case_edit).restore

        return [("an input file rewritten at the same size", rewritten, None),
                ("another recipe for the run folder (length.min_chars 40 -> 41)", lambda: (lambda: None),
                 lambda out: self.argv(out, self.edited))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock")
