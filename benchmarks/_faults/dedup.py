"""``cuvee dedup run minhash_dedup IN -w DIR``: kill -9 anywhere in its jobs (signatures, buckets, clusters, the
filtering segment) and rerun; the kept documents must be the reference's, byte for byte."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

from _faults.common import (
    cuvee,
    lock_held,
    rewrite_same_size,
    swap_case_edit,
    t_after_bound,
)
from _faults.driver import Scenario
from _faults.jobs import (
    JobFolder,
    all_done,
    job_in,
    job_ranks,
    output_appears,
    plan_bound,
    watch_timeline,
)

TASKS = 2
VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrslm"]


def write_docs(folder: Path, seed: int, prefix: str, n_files: int = 4, per_file: int = 1500) -> int:
    """JSONL documents with planted exact and near duplicates (a few words changed)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    originals: list[str] = []
    n = 0
    for f in range(n_files):
        with open(folder / f"part{f}.jsonl", "w") as fh:
            for i in range(per_file):
                r = rng.random()
                if r < 0.1 and originals:
                    text = rng.choice(originals)
                elif r < 0.2 and originals:
                    words = rng.choice(originals).split(" ")
                    for _ in range(2):
                        words[rng.randrange(len(words))] = rng.choice(VOCAB)
                    text = " ".join(words)
                else:
                    text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(40, 90)))
                    originals.append(text)
                fh.write(json.dumps({"id": f"{prefix}{f}-{i}", "text": text}) + "\n")
                n += 1
    return n


class DedupWatch(JobFolder):
    """The work folder; during the reference run it learns the jobs (in order of appearance) and their timeline."""

    def __init__(self, folder: Path, jobs=None):
        super().__init__(folder, jobs or [], "*.jsonl")
        self.start: dict = {}
        self.end: dict = {}
        self.seen: list[str] = []
        self.bound_at: float | None = None

    def tick(self, t: float) -> None:
        if self.bound_at is None and (self.d / ".cuvee-plan.json").exists():
            self.bound_at = t
        logs = self.d / "logs"
        if logs.exists():
            for p in sorted(logs.iterdir()):
                if p.name not in self.seen:
                    self.seen.append(p.name)
        self.jobs = [(n, "segment" if n.startswith("seg") else "phase", max(1, self.done(n))) for n in self.seen]
        watch_timeline(self, t, self.start, self.end)


class Dedup(Scenario):
    name = "dedup run"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        """``quick``: 2 files of 600 documents (CI); else 4 of 1,500."""
        self.tmp = tmp
        self.n_files, per_file = (2, 600) if quick else (4, 1500)
        self.n_docs = write_docs(tmp / "in", seed, "d", self.n_files, per_file)
        write_docs(tmp / "in_other", seed + 1, "o", self.n_files, per_file)
        self.jobs: list = []
        self.dur: dict = {}
        self.work_s = 5.0

    def argv(self, out: Path, inp: Path | None = None) -> list[str]:
        return cuvee("dedup", "run", "minhash_dedup", inp or self.tmp / "in", "-w", out, "--tasks", TASKS,
                     "--workers", 1)

    def watch(self, out: Path) -> DedupWatch:
        return DedupWatch(out, self.jobs)

    def summary(self, ref: Path) -> str:
        kept = sum(read_docs(ref).values())
        return (f"{self.n_docs} documents in {self.n_files} JSONL files, {kept} kept; jobs "
                + ", ".join(f"{n} ({t} rank{'s' if t > 1 else ''})" for n, _k, t in self.jobs))

    def fixed_triggers(self, w: DedupWatch) -> list:
        w.tick(0.0)
        self.jobs = list(w.jobs)
        end = max(w.end.values(), default=10.0)
        bound = w.bound_at if w.bound_at is not None else 0.0
        self.dur = {j: max(0.05, w.end.get(j, end) - w.start.get(j, 0.0)) for j, _k, _t in self.jobs}
        trig = [plan_bound()]
        for name, kind, tasks in self.jobs:
            trig.append(job_in(name, 0.0, self.dur[name]))
            if kind == "segment" and tasks > 1:
                trig.append(job_ranks(name, 1))
            else:
                trig.append(job_in(name, 0.5, self.dur[name]))
        trig += [output_appears(1), all_done(self.jobs)]
        self.work_s = max(0.1, end - bound)
        return trig

    def random_trigger(self, rng: random.Random):
        return t_after_bound(rng.uniform(0.0, self.work_s))

    def mid_trigger(self, w: DedupWatch):
        mid = self.jobs[len(self.jobs) // 2][0]
        return job_in(mid, 0.3, self.dur.get(mid, 1.0))

    def compare(self, ref: Path, out: Path) -> dict:
        got, want = read_docs(out), read_docs(ref)
        ids = Counter(i for i, _h in got.elements())
        ref_ids = {i: h for i, h in want}
        same_files = _files(ref) == _files(out)
        return {"dup": sum(c - 1 for c in ids.values() if c > 1), "loss": sum(1 for i in ref_ids if i not in ids),
                "extra": sum(1 for i in ids if i not in ref_ids),
                "changed": sum(1 for (i, h) in got if i in ref_ids and h != ref_ids[i]),
                "checks": {"output files byte-identical": same_files,
                           "no .tmp left": not any((out / "output").glob("*.tmp")) if (out / "output").exists() else True}}

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.tmp / "in" / "part1.jsonl", swap_case_edit).restore

        return [("an input file rewritten at the same size (new mtime)", rewritten, None),
                ("another input folder", lambda: (lambda: None), lambda out: self.argv(out, self.tmp / "in_other"))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()


def read_docs(folder: Path) -> Counter:
    """(id, sha1 of text) of every document in ``folder/output/*.jsonl``, as a multiset."""
    out = Counter()
    for f in sorted((folder / "output").glob("*.jsonl")) if (folder / "output").exists() else []:
        for line in f.read_bytes().splitlines():
            if line.strip():
                d = json.loads(line)
                out[(d["id"], hashlib.sha1(d["text"].encode()).hexdigest())] += 1
    return out


def _files(folder: Path) -> dict:
    base = folder / "output"
    return {p.name: p.read_bytes() for p in sorted(base.glob("*.jsonl"))} if base.exists() else {}
