"""``cuvee run RECIPE --run-dir D``: kill -9 anywhere in the compiled jobs (segments, dedup phases, the final
writer, before stats.json) and resume; the output must be the reference's and ``stats.json`` balanced and equal
to the reference's accounting.

Input: 6 JSONL files of synthetic documents with planted exact duplicates (same text, other id), near duplicates
(a few words changed: MinHash), boilerplate lines repeated across documents (line dedup) and short documents
(length filter). Recipe: ``length`` -> slow pass-through -> ``exact_dedup`` -> slow -> ``minhash_dedup`` -> slow ->
``line_dedup`` -> slow -> JSONL.gz output; 4 tasks, 2 workers. That compiles into 4 segments (each ending in an
intermediate writer, the last one in the final writer) and the dedup phases, chained; the slow step
(tests/steps_for_tests.SlowPassThrough) makes every segment last long enough to be killed mid-write."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import yaml

from _faults.common import cuvee, lock_held, rewrite_same_size, swap_case_edit, t_after_bound, t_after_launch
from _faults.driver import Scenario
from _faults.jobs import (
    JobFolder,
    all_done,
    job_in,
    job_ranks,
    output_appears,
    plan_bound,
    tmp_in,
    watch_timeline,
)

TASKS = 4
ACCOUNT_KEYS = ("records_read", "kept", "dropped", "balanced", "by_reason", "inputs")


def make_input(folder: Path, seed: int, n_files: int = 6, per_file: int = 60) -> int:
    """JSONL files of documents with planted duplicates, near duplicates, boilerplate lines and short texts."""
    rng = random.Random(seed)
    vocab = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in ("n", "r", "s", "l", "m", "")]
    boiler = [" ".join(rng.choice(vocab) for _ in range(9)) + "." for _ in range(8)]

    def sentence():
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 16))).capitalize() + "."

    folder.mkdir(parents=True, exist_ok=True)
    originals: list[str] = []
    n = 0
    for f in range(n_files):
        with open(folder / f"part{f:02d}.jsonl", "w") as fh:
            for i in range(per_file):
                r = rng.random()
                if r < 0.08:
                    text = "too short."  # dropped by `length`
                elif r < 0.18 and originals:
                    text = rng.choice(originals)  # exact duplicate
                elif r < 0.28 and originals:
                    words = rng.choice(originals).split(" ")  # near duplicate: 2 words replaced
                    for _ in range(2):
                        words[rng.randrange(len(words))] = rng.choice(vocab)
                    text = " ".join(words)
                else:
                    lines = [sentence() for _ in range(rng.randint(4, 9))]
                    if rng.random() < 0.5:  # boilerplate lines shared by many documents
                        lines.insert(rng.randrange(len(lines) + 1), rng.choice(boiler))
                    text = "\n".join(lines)
                    originals.append(text)
                fh.write(json.dumps({"text": text, "id": f"f{f}-d{i}", "metadata": {"url": f"https://x{f}.example/{i}"}})
                         + "\n")
                n += 1
    return n


def make_recipe(path: Path, inp: Path, delay_s: float, workers: int, min_chars: int = 40, slow: bool = True,
                quick: bool = False, tasks: int = TASKS) -> Path:
    """The recipe above; ``slow=False`` leaves the slow steps out (a run folder for `card` and `stats`), ``quick``
    keeps only ``length`` and ``exact_dedup`` (2 segments and one phase: a CI-sized run)."""
    step = {"stage": "datatrove", "step": "steps_for_tests.SlowPassThrough", "kwargs": {"delay_s": delay_s}}
    stages = [{"stage": "length", "min_chars": min_chars}, step, {"stage": "exact_dedup"}, step,
              {"stage": "minhash_dedup"}, step, {"stage": "line_dedup", "min_occurrences": 3, "min_words": 5}, step]
    data = {
        "name": "fault_injection",
        "input": {"paths": [str(inp / "*.jsonl")], "format": "jsonl"},
        "stages": stages[:4] if quick else [s for s in stages if slow or s is not step],
        "output": {"format": "jsonl"},
        "executor": {"kind": "local", "tasks": tasks, "workers": workers},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def job_names(recipe: Path, run_dir: Path) -> list[tuple[str, str, int]]:
    """(name, kind, tasks) of every compiled job, in run order."""
    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import load_recipe

    r = load_recipe(str(recipe), {"run_dir": str(run_dir)})
    return [(j.name, j.kind, j.tasks) for j in compile_recipe(r, run_dir)]


def read_output(run_dir: Path) -> Counter:
    """(id, sha1 of text) of every output document, as a multiset."""
    from cuvee.pipeline.io import iter_documents

    out = run_dir / "output"
    if not out.exists():
        return Counter()
    return Counter((d.id, hashlib.sha1(d.text.encode()).hexdigest()) for d in iter_documents(out))


def accounting(run_dir: Path) -> dict | None:
    """The part of stats.json that must not depend on kills: records read, kept, dropped by reason, inputs."""
    try:
        s = json.loads((run_dir / "stats.json").read_text())
    except (OSError, ValueError):
        return None
    return {k: s["accounting"].get(k) for k in ACCOUNT_KEYS} | {"documents": s["output"]["documents"]}


def compare_docs(got: Counter, want: Counter) -> dict:
    """dup / loss / extra / changed of an output multiset of (id, sha1) against the reference's."""
    ids = Counter(i for i, _h in got.elements())
    ref_ids = {i: h for i, h in want}
    return {"dup": sum(c - 1 for c in ids.values() if c > 1), "loss": sum(1 for i in ref_ids if i not in ids),
            "extra": sum(1 for i in ids if i not in ref_ids),
            "changed": sum(1 for (i, h) in got if i in ref_ids and h != ref_ids[i])}


class RunWatch(JobFolder):
    """The run folder; during the reference run it learns when each job started and ended."""

    def __init__(self, folder: Path, jobs):
        super().__init__(folder, jobs)
        self.start: dict = {}
        self.end: dict = {}
        self.bound_at: float | None = None

    def tick(self, t: float) -> None:
        if self.bound_at is None and (self.d / ".cuvee-plan.json").exists():
            self.bound_at = t
        watch_timeline(self, t, self.start, self.end)


class Run(Scenario):
    name = "run"

    def __init__(self, tmp: Path, seed: int, quick: bool = False, delay_s: float = 0.004, workers: int = 2):
        """``quick``: 4 files, length + exact dedup, 2 tasks, 1 worker (CI); else the full recipe above."""
        self.tmp = tmp
        kw = {"quick": True, "tasks": 2} if quick else {}
        self.n_files = 4 if quick else 6
        self.n_docs = make_input(tmp / "in", seed, n_files=self.n_files)
        self.recipe = make_recipe(tmp / "recipe.yaml", tmp / "in", delay_s, 1 if quick else workers, **kw)
        self.edited = make_recipe(tmp / "recipe_edited.yaml", tmp / "in", delay_s, 1 if quick else workers,
                                  min_chars=41, **kw)
        self.jobs = job_names(self.recipe, tmp / "ref")
        self.dur: dict = {}
        self.work_s = 5.0
        self._ref: tuple[Counter, dict | None] | None = None

    def argv(self, out: Path, extra=(), recipe: Path | None = None) -> list[str]:
        return cuvee("run", recipe or self.recipe, "--run-dir", out, *extra)

    def watch(self, out: Path) -> RunWatch:
        return RunWatch(out, self.jobs)

    def summary(self, ref: Path) -> str:
        acc = accounting(ref) or {}
        return (f"{self.n_docs} documents in {self.n_files} JSONL files, {acc.get('kept')} kept, {acc.get('dropped')} dropped "
                f"(balanced: {acc.get('balanced')}); {len(self.jobs)} jobs: " + ", ".join(n for n, _k, _t in self.jobs))

    def fixed_triggers(self, w: RunWatch) -> list:
        end = max(w.end.values(), default=10.0)
        self.dur = {n: max(0.05, w.end.get(n, end) - w.start.get(n, 0.0)) for n, _k, _t in self.jobs}
        self.work_s = max(0.1, end - (w.bound_at or 0.0))
        trig = [t_after_launch(0.3), plan_bound()]
        for name, kind, _tasks in self.jobs:
            trig += [job_in(name, 0.0, self.dur[name]), job_in(name, 0.5, self.dur[name])]
            if kind == "segment":
                trig.append(job_ranks(name, 1))
        trig += [tmp_in(f"work/{s}") for s in self.segments()[:-1]]
        return trig + [output_appears(1), output_appears(200), all_done(self.jobs)]

    def segments(self) -> list[str]:
        return [n for n, k, _t in self.jobs if k == "segment"]

    def random_trigger(self, rng: random.Random):
        return t_after_bound(rng.uniform(0.0, self.work_s))

    def mid_trigger(self, w: RunWatch):
        seg = self.segments()[1]
        return job_in(seg, 0.5, self.dur.get(seg, 1.0))

    def compare(self, ref: Path, out: Path) -> dict:
        if self._ref is None:  # the reference is read once
            self._ref = (read_output(ref), accounting(ref))
        want, want_acc = self._ref
        acc = accounting(out)
        return {**compare_docs(read_output(out), want),
                "checks": {"stats.json balanced": bool(acc and acc["balanced"]),
                           "accounting = reference": acc == want_acc}}

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.tmp / "in" / "part02.jsonl", swap_case_edit).restore

        nothing = lambda: (lambda: None)  # noqa: E731 - the change is in the command line
        return [("an input file rewritten at the same size", rewritten, None),
                ("resume with --tasks 3", nothing, lambda out: self.argv(out, ("--tasks", "3"))),
                ("the recipe edited (length.min_chars 40 -> 41)", nothing, lambda out: self.argv(out, recipe=self.edited))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()
