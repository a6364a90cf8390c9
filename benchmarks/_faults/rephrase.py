"""``cuvee rephrase DOCS --endpoint URL -o DIR``: kill -9 while rewrites are appended (finished documents, pieces of
long ones, rejections) and rerun; every document must end rewritten or rejected exactly once, with the reference's
record, and the folder's totals must be the reference's.

The endpoint is cuvee's own OpenAI-compatible server (``cuvee.classifiers.llm_server``) on 127.0.0.1, in this
process, with a scripted rewriter: the document's words in reverse order (a pure function of the prompt, so two
runs agree), an empty answer for documents marked EMPTY (a counted rejection), a few milliseconds per request."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

from _faults.common import Trigger, cuvee, lock_held, quiet, rewrite_same_size, swap_case_edit
from _faults.driver import Scenario

N_DOCS = 60
DELAY_S = 0.02
WORDS = ["river", "valley", "harbour", "mountain", "village", "farmer", "market", "winter", "summer", "bridge", "castle",
         "forest", "library", "teacher", "student", "garden", "engine", "station", "railway", "museum", "painter"]
FILES = ("rephrased.jsonl", "rejected.ndjson", "parts.ndjson")
SUMMARY_KEYS = ("documents", "dropped", "dropped_by_reason", "unfinished_documents", "prompt_tokens", "completion_tokens")


def write_docs(path: Path, seed: int, prefix: str) -> Path:
    """Documents of 1-12 sentences (the long ones are cut into pieces); every 10th marked EMPTY, and short: a long
    one's rejection would record the tokens of whichever of its pieces were answered first, which concurrency
    decides, so two uninterrupted runs would differ."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i in range(N_DOCS):
            sentences = [" ".join(rng.choice(WORDS) + str(rng.randrange(10)) for _ in range(12)) + "."
                         for _ in range(1 if i % 10 == 9 else rng.choice((1, 2, 3, 12)))]
            text = ("EMPTY " if i % 10 == 9 else "") + " ".join(sentences)
            fh.write(json.dumps({"id": f"{prefix}{i:03d}", "text": text, "metadata": {"bucket": i % 4}}) + "\n")
    return path


class Rewriter:
    """The words of the document in reverse order; nothing for a document marked EMPTY."""

    def __init__(self):
        from cuvee.rephrase.cli import load_style

        self.template = load_style("wikipedia")

    def __call__(self, prompt: str, max_tokens: int, chat: bool = True) -> tuple:
        time.sleep(DELAY_S)
        doc = self.template.extract(prompt) or ""
        text = "" if doc.startswith("EMPTY") else " ".join(reversed(doc.split()))
        return text, len(prompt.split()), len(text.split())


def records(path: Path) -> list[dict]:
    """The complete records of one ledger (a torn last line is not one)."""
    out = []
    try:
        data = path.read_bytes()
    except OSError:
        return out
    for line in data.split(b"\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


class RephraseWatch:
    def __init__(self, out: Path, server):
        self.out, self.server, self.base = out, server, server.requests

    def lines(self, name: str = "rephrased.jsonl") -> int:
        try:
            return (self.out / name).read_bytes().count(b"\n")
        except OSError:
            return 0

    def torn(self) -> bool:
        for name in FILES:
            try:
                data = (self.out / name).read_bytes()
            except OSError:
                continue
            if data and not data.endswith(b"\n"):
                return True
        return False

    def requests(self) -> int:
        return self.server.requests - self.base

    def tick(self, t: float) -> None:
        pass

    def state(self) -> dict:
        return {"running": f"{self.lines()} rewritten, {self.lines('rejected.ndjson')} rejected, "
                           f"{self.lines('parts.ndjson')} pieces", "requests": self.requests(),
                "torn last line": "yes" if self.torn() else ""}


class Rephrase(Scenario):
    name = "rephrase"

    def __init__(self, tmp: Path, seed: int, quick: bool = False):
        from transformers import PreTrainedTokenizerFast

        from cuvee.classifiers.llm_server import serve

        self.tmp = tmp
        self.docs = write_docs(tmp / "in" / "docs.jsonl", seed, "d")
        self.other = write_docs(tmp / "in" / "other.jsonl", seed + 1, "o")
        self.tokenizer = tmp / "tokenizer"
        json_file = Path(__file__).resolve().parents[2] / "cuvee/assets/tokenizers/dolma_gpt-neo-test-tokenizer.json"
        PreTrainedTokenizerFast(tokenizer_file=str(json_file), eos_token="<|endoftext|>").save_pretrained(self.tokenizer)
        self.server = quiet(serve(responder=Rewriter(), model_name="scripted"))

    def close(self) -> None:
        self.server.close()

    def argv(self, out: Path, docs: Path | None = None) -> list[str]:
        return cuvee("rephrase", docs or self.docs, "--out", out, "--prompt", "wikipedia", "--model", "scripted",
                     "--endpoint", self.server.url, "--tokenizer", self.tokenizer, "--max-input-tokens", 120,
                     "--max-new-tokens", 400, "--concurrency", 2, "--retries", 1, "--timeout", 60)

    def watch(self, out: Path) -> RephraseWatch:
        return RephraseWatch(out, self.server)

    def summary(self, ref: Path) -> str:
        f = json.loads((ref / "rephrase_summary.json").read_text())["folder"]
        return (f"{N_DOCS} documents (the longest cut into pieces): {f['documents']} rewritten, {f['dropped']} rejected "
                f"{f['dropped_by_reason']}, concurrency 2")

    def fixed_triggers(self, w: RephraseWatch) -> list:
        return [Trigger("first request received", lambda s, t, ctx: s.requests() > 0),
                Trigger("first pieces of a long document recorded", lambda s, t, ctx: s.lines("parts.ndjson") >= 1),
                Trigger("a torn last line (record half-written)", lambda s, t, ctx: s.torn()),
                Trigger(f"{N_DOCS // 3} documents rewritten", lambda s, t, ctx: s.lines() >= N_DOCS // 3),
                Trigger("near the end", lambda s, t, ctx: s.lines() + s.lines("rejected.ndjson") >= N_DOCS - 3)]

    def random_trigger(self, rng: random.Random) -> Trigger:
        k = rng.randint(1, N_DOCS // 2)
        return Trigger(f"{k} documents rewritten (random)", lambda s, t, ctx: s.lines() >= k)

    def mid_trigger(self, w: RephraseWatch):
        return Trigger(f"{N_DOCS // 4} documents rewritten", lambda s, t, ctx: s.lines() >= N_DOCS // 4)

    def compare(self, ref: Path, out: Path) -> dict:
        def by_source(folder: Path) -> tuple[Counter, dict]:
            recs = [((r.get("metadata") or {}).get("rephrase_source_id"), r) for r in records(folder / "rephrased.jsonl")]
            recs += [(r["id"], r) for r in records(folder / "rejected.ndjson")]
            return Counter(i for i, _ in recs), dict(recs)

        want_n, want = by_source(ref)
        got_n, got = by_source(out)

        def totals(folder: Path) -> dict | None:
            try:
                f = json.loads((folder / "rephrase_summary.json").read_text())["folder"]
            except (OSError, ValueError, KeyError):
                return None
            return {k: f.get(k) for k in SUMMARY_KEYS}

        return {"dup": sum(c - 1 for c in got_n.values() if c > 1), "loss": sum(1 for i in want if i not in got),
                "extra": sum(1 for i in got if i not in want), "changed": sum(1 for i in got if i in want and got[i] != want[i]),
                "checks": {"folder totals = reference": totals(out) == totals(ref),
                           "every ledger ends with a complete record": not RephraseWatch(out, self.server).torn()}}

    def changes(self):
        def rewritten():
            return rewrite_same_size(self.docs, swap_case_edit).restore

        return [("the input file rewritten at the same size (same ids, texts changed)", rewritten, None),
                ("another input file into the same --out", lambda: (lambda: None), lambda out: self.argv(out, self.other))]

    def busy(self, out: Path) -> bool:
        return lock_held(out / ".cuvee.lock") and RephraseWatch(out, self.server).lines() >= 1
