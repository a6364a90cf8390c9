"""``cuvee mix search SEARCH.yaml --out DIR``: a tiny search (2 sources, 3 proxies of a ~4k-parameter model on the
bundled German and Russian sentences, no proof) killed mid-proxy, while the fits and the report are written, and
rerun; the rerun must train exactly the jobs no record holds (``events.jsonl`` logs every job trained, once), and
the records, report and pick must be the reference's (timings and the folder's path aside)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml

from _faults.common import (
    REPO,
    FolderWatch,
    Trigger,
    cuvee,
    lock_held,
    rewrite_same_size,
    swap_case_edit,
    temporaries,
    without_keys,
)
from _faults.driver import Scenario

LINGUA = REPO / "tests" / "fixtures" / "mixer_lingua"
JOBS = ("p000", "p001", "p002")
TIMINGS = ("wall_s", "cpu_s", "seconds", "time", "timing_s", "elapsed_s", "created", "by", "done_in_s")


def write_sources(d: Path) -> dict[str, Path]:
    """Documents of 4 lingua sentences each: 75 German, 75 Russian, and a held-out target of 5 + 5."""
    d.mkdir(parents=True, exist_ok=True)
    held = []
    out = {}
    for lang in ("de", "ru"):
        lines = (LINGUA / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        docs = [" ".join(lines[i:i + 4]) for i in range(0, 300, 4)]
        out[lang] = d / f"{lang}.jsonl"
        out[lang].write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
        held += [" ".join(lines[i:i + 4]) for i in range(300, 320, 4)]
    out["target"] = d / "target.jsonl"
    out["target"].write_text("".join(json.dumps({"text": t}) + "\n" for t in held))
    return out


def write_config(path: Path, files: dict[str, Path], mixtures: int = 3) -> Path:
    cfg = {"name": "fi", "tokenizer": "bytes256.tiktoken", "seed": 0, "mixtures": mixtures,
           "sources": [{"name": n, "paths": str(files[n])} for n in ("de", "ru")],
           "targets": [{"name": "held", "paths": str(files["target"]), "max_docs": 10, "max_doc_tokens": 256}],
           "proxy": {"tokens": 64 * 8 * 10, "train": {
               "model": {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "max_seq_len": 64},
               "data": {"seq_len": 64}, "micro_batch": 8, "vocab_multiple": 1,
               "optim": {"lr": 5e-3, "warmup_steps": 1, "schedule": "cosine", "min_lr_ratio": 0.1}}},
           "proof": {"enabled": False}, "threads": 1}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def events(out: Path) -> list[str]:
    """The job of each ``events.jsonl`` line: one line per job trained to its end, appended after its record."""
    try:
        lines = (out / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line)["job"] for line in lines if line.strip()]


class SearchWatch(FolderWatch):
    """``at_kill`` (shared with the scenario): per folder, the records and event lines a kill left."""

    def __init__(self, out: Path, at_kill: dict):
        super().__init__(out)
        self.at_kill = at_kill

    def records(self) -> list[str]:
        try:
            return sorted(p.stem for p in (self.out / "proxies").glob("p*.json"))
        except OSError:
            return []

    def state(self) -> dict:
        recs = self.records()
        self.at_kill[str(self.out)] = (set(recs), len(events(self.out)))
        running = ("report written" if self.has("report.json") else f"{len(recs)} of {len(JOBS)} proxies recorded"
                   if recs or self.has("plan.json") else "bound" if self.bound() else "startup")
        return {"running": running}


class MixSearch(Scenario):
    name = "mix search"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        """``quick``: the jobs train in the search's process (CI); else in 2 worker processes (``--workers 2``:
        the kill reaches a worker mid-job, the job locks and records are the kernel's)."""
        self.tmp = tmp
        self.workers = 1 if quick else 2
        self.files = write_sources(tmp / "in")
        self.config = write_config(tmp / "search.yaml", self.files)
        self.other = write_config(tmp / "search_other.yaml", self.files, mixtures=4)
        self.work_s = 5.0
        self.at_kill: dict[str, tuple[set, int]] = {}

    def argv(self, out: Path, config: Path | None = None) -> list[str]:
        return cuvee("mix", "search", config or self.config, "--out", out, "--workers", self.workers)

    def watch(self, out: Path) -> SearchWatch:
        return SearchWatch(out, self.at_kill)

    def summary(self, ref: Path) -> str:
        (pick,) = ref.glob("pick*.yaml")
        return (f"2 sources (de, ru), {len(JOBS)} proxies of 10 steps in {self.workers} worker process(es), no proof; "
                f"{pick.name}")

    def _product(self, out: Path) -> dict[str, bytes]:
        """Every job record, the report and the pick file, without timings and with the folder's path as OUT."""
        got = {}
        for p in sorted((out / "proxies").glob("*.json")) if (out / "proxies").exists() else []:
            got[f"proxies/{p.name}"] = without_keys(p.read_bytes(), TIMINGS, out)
        if (out / "report.json").exists():
            got["report.json"] = without_keys((out / "report.json").read_bytes(), TIMINGS, out)
        for p in out.glob("pick*.yaml"):
            got[p.name] = p.read_bytes().replace(str(out).encode(), b"OUT")
        return got

    def compare(self, ref: Path, out: Path) -> dict:
        """A duplicate is a job trained twice; after a kill, the rerun must have trained exactly the jobs that had no
        record then (a job killed between its record and its event line is recorded, so not trained again)."""
        want, got, runs = self._product(ref), self._product(out), events(out)
        recorded, n_events = self.at_kill.pop(str(out), (set(), 0))
        after = runs[n_events:]
        return {"dup": sum(c - 1 for c in Counter(runs).values() if c > 1), "loss": sum(1 for k in want if k not in got),
                "extra": sum(1 for k in got if k not in want),
                "changed": sum(1 for k in got if k in want and got[k] != want[k]),
                "checks": {"the rerun trained exactly the jobs with no record": sorted(after) == sorted(set(JOBS) - recorded),
                           "no temporary left": not temporaries(out)}}

    def fixed_triggers(self, w: SearchWatch) -> list:
        self.work_s = w.work_s()

        def recorded(k):
            return Trigger(f"{k} of {len(JOBS)} proxies recorded", lambda s, t, ctx: len(s.records()) >= k)

        return [Trigger("plan bound", lambda s, t, ctx: s.bound()),
                Trigger("plan.json written (sources tokenized)", lambda s, t, ctx: s.has("plan.json")),
                recorded(1), recorded(2), recorded(3), Trigger("report.md written", lambda s, t, ctx: s.has("report.md"))]

    def mid_trigger(self, w: SearchWatch):
        return Trigger(f"1 of {len(JOBS)} proxies recorded (the 2nd in training)", lambda s, t, ctx: len(s.records()) >= 1)

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.files["de"], swap_case_edit).restore

        return [("a source file rewritten at the same size", rewritten, None),
                ("the search file edited (mixtures 3 -> 4)", lambda: (lambda: None), lambda out: self.argv(out, self.other))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and (out / ".cuvee-plan.json").exists()
