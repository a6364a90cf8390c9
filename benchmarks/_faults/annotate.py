"""``cuvee classify annotate DOCS --endpoint URL -o FILE``: kill -9 while answers are being appended and rerun;
every sampled document must be annotated exactly once, with the reference's record.

The endpoint is cuvee's own OpenAI-compatible server (``cuvee.classifiers.llm_server``) on 127.0.0.1, in this
process, with a scripted annotator: the answer is a pure function of the prompt (so two runs agree) and each
request takes a few milliseconds (so a kill lands while records are being written)."""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

from _faults.common import (
    Trigger,
    cuvee,
    lock_held,
    quiet,
    rewrite_same_size,
    swap_case_edit,
)
from _faults.driver import Scenario

N_DOCS = 120  # in the input file
SAMPLE = 72  # --n: the sample is a subset, so another seed or input would be another sample
DELAY_S = 0.03
VOCAB = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrslm"]


class Oracle:
    """``Educational score: k`` with k from the prompt's sha1; usage counted as bytes / 4."""

    def __call__(self, prompt: str, max_tokens: int, chat: bool = True) -> tuple:
        time.sleep(DELAY_S)
        k = int(hashlib.sha1(prompt.encode()).hexdigest(), 16) % 6
        text = f"The extract is fine.\nEducational score: {k}"
        return text, len(prompt.encode()) // 4, 9


def write_docs(path: Path, seed: int, prefix: str) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i in range(N_DOCS):
            text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(40, 160))).capitalize() + "."
            fh.write(json.dumps({"id": f"{prefix}{i:03d}", "text": text}) + "\n")


def records(path: Path) -> list[dict]:
    """The complete records of an annotations file (a torn last line is not one)."""
    out = []
    if path.exists():
        for line in path.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


class AnnotateWatch:
    """The annotations file and the server's request count: what a kill left (records, a torn tail)."""

    def __init__(self, out: Path, server):
        self.out = out
        self.server = server
        self.base = server.requests

    def lines(self) -> int:
        try:
            return self.out.read_bytes().count(b"\n")
        except OSError:
            return 0

    def torn(self) -> bool:
        try:
            data = self.out.read_bytes()
        except OSError:
            return False
        return bool(data) and not data.endswith(b"\n")

    def requests(self) -> int:
        return self.server.requests - self.base

    def tick(self, t: float) -> None:
        pass

    def state(self) -> dict:
        return {"running": f"{self.lines()} records written", "requests": self.requests(),
                "torn last line": "yes" if self.torn() else ""}


class Annotate(Scenario):
    name = "classify annotate"
    output_is_file = True

    def __init__(self, tmp: Path, seed: int, quick: bool = False):  # already CI-sized
        from cuvee.classifiers.llm_server import serve

        self.tmp = tmp
        write_docs(tmp / "in" / "docs.jsonl", seed, "d")
        write_docs(tmp / "in" / "other.jsonl", seed + 1, "o")
        self.server = quiet(serve(responder=Oracle(), model_name="oracle"))

    def close(self) -> None:
        self.server.close()

    def out(self, tmp: Path, tag) -> Path:
        return tmp / str(tag) / "annotations.jsonl"

    def footprint(self, out: Path) -> Path:
        return out.parent

    def argv(self, out: Path, inp: Path | None = None) -> list[str]:
        return cuvee("classify", "annotate", inp or self.tmp / "in" / "docs.jsonl", "--endpoint", self.server.url,
                     "--model", "oracle", "--n", SAMPLE, "--seed", 0, "--out", out, "--concurrency", 2,
                     "--retries", 1, "--timeout", 60, "--no-progress")

    def watch(self, out: Path) -> AnnotateWatch:
        return AnnotateWatch(out, self.server)

    def summary(self, ref: Path) -> str:
        recs = records(ref)
        scored = sum(r.get("score") is not None for r in recs)
        return f"{N_DOCS} documents, sample of {SAMPLE}: {len(recs)} records ({scored} scored), concurrency 2"

    def fixed_triggers(self, w: AnnotateWatch) -> list:
        trig = [
            Trigger("first request received", lambda s, t, ctx: s.requests() > 0),
            Trigger("first records appended", lambda s, t, ctx: s.lines() >= 1),
            Trigger("a torn last line (record half-written)", lambda s, t, ctx: s.torn()),
            Trigger(f"{SAMPLE // 2} of {SAMPLE} records written", lambda s, t, ctx: s.lines() >= SAMPLE // 2),
            Trigger(f"{SAMPLE - 2} of {SAMPLE} records written (near the end)", lambda s, t, ctx: s.lines() >= SAMPLE - 2),
        ]
        return trig

    def random_trigger(self, rng: random.Random) -> Trigger:
        k = rng.randint(1, SAMPLE - 1)
        return Trigger(f"{k} records written (random)", lambda s, t, ctx: s.lines() >= k)

    def mid_trigger(self, w: AnnotateWatch):
        return Trigger(f"{SAMPLE // 3} records written", lambda s, t, ctx: s.lines() >= SAMPLE // 3)

    def compare(self, ref: Path, out: Path) -> dict:
        want = {r["id"]: r for r in records(ref)}
        got = records(out)
        ids: dict = {}
        for r in got:
            ids[r["id"]] = ids.get(r["id"], 0) + 1
        summary = {}
        try:
            summary = json.loads(Path(str(out) + ".summary.json").read_text())
        except (OSError, ValueError):
            pass
        same_bytes = out.exists() and ref.exists() and out.read_bytes() == ref.read_bytes()
        return {"dup": sum(c - 1 for c in ids.values() if c > 1), "loss": sum(1 for i in want if i not in ids),
                "extra": sum(1 for i in ids if i not in want),
                "changed": sum(1 for r in got if r["id"] in want and r != want[r["id"]]),
                "checks": {"file ends with a complete record": out.exists() and out.read_bytes().endswith(b"\n"),
                           "summary: remaining 0, failed 0": summary.get("remaining") == 0 and summary.get("failed") == 0},
                "note": "byte-identical to the reference" if same_bytes else "same records, other order or bytes"}

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.tmp / "in" / "docs.jsonl", swap_case_edit).restore

        return [("the input file rewritten at the same size (same ids, texts changed)", rewritten, None),
                ("another input file (other documents) into the same --out", lambda: (lambda: None),
                 lambda out: self.argv(out, self.tmp / "in" / "other.jsonl"))]

    def busy(self, out: Path) -> bool:
        return lock_held(out.parent / f".{out.name}.cuvee.lock") and bool(records(out))
