"""LLM annotation of documents for training a quality head: the first step of the FineWeb-Edu recipe.

``cuvee classify annotate`` samples N documents of a run's output (deterministically: the N smallest
seeded hashes of the document ids, so the sample does not depend on file order and a larger N extends a
smaller one), fills a prompt template (``cuvee/assets/prompts/fineweb_edu.txt`` by default), asks an
instruction-following LLM, and parses ``Educational score: N`` from the answer. The LLM is either a local
Hugging Face causal LM (greedy decoding) or an OpenAI-compatible HTTP endpoint (vLLM, TGI, llama.cpp,
``cuvee.classifiers.llm_server``) queried with bounded retries and K requests in flight.

The output is JSONL, one line per document (id, text, text_sha256, score or null, the raw answer cut to
1,000 characters, model, prompt sha256, token counts). It is append-only and resumable: a rerun skips ids
already written, and a partial last line left by a kill is dropped and redone. Unparseable answers are
kept with ``score: null`` and counted as ``unparsed``; nothing is guessed. Train the head with
``cuvee classify train --kind transformer --task regression --data annotations.jsonl --label-key score``.
"""

from __future__ import annotations

import hashlib
import heapq
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, NamedTuple

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "assets" / "prompts"
DEFAULT_SCORE_PATTERN = r"educational\s+score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)"
ANSWER_CHARS = 1000  # raw answer kept per line


class AnnotateError(Exception):
    """A failure the user has to act on (unreachable endpoint, mismatched output file): reported in one line."""


# ---------------------------------------------------------------- prompt and score


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str
    path: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def fill(self, text: str) -> str:
        return self.text.replace("{text}", text)

    def extract(self, prompt: str) -> str | None:
        """The document text inside a filled prompt (for scripted annotators / oracles); None if it does not fit."""
        head, _, tail = self.text.partition("{text}")
        if not (prompt.startswith(head) and prompt.endswith(tail)) or len(prompt) < len(head) + len(tail):
            return None
        return prompt[len(head) : len(prompt) - len(tail)]


def load_prompt(name_or_path: str) -> PromptTemplate:
    """A shipped template by name (``fineweb_edu``) or a template file; leading ``#`` lines are comments."""
    p = Path(name_or_path)
    if not p.is_file():
        shipped = PROMPTS_DIR / f"{name_or_path}.txt"
        if not shipped.is_file():
            names = sorted(f.stem for f in PROMPTS_DIR.glob("*.txt"))
            raise AnnotateError(f"prompt {name_or_path!r}: not a file and not a shipped template ({', '.join(names)})")
        p = shipped
    lines = p.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    text = "".join(lines).strip("\n") + "\n"
    if "{text}" not in text:
        raise AnnotateError(f"prompt {p}: no {{text}} placeholder")
    return PromptTemplate(p.stem, text, str(p))


def parse_score(answer: str | None, pattern: str = DEFAULT_SCORE_PATTERN, lo: float = 0, hi: float = 5) -> int | float | None:
    """The LAST ``Educational score: N`` in the answer, clamped to [lo, hi]; None when there is none."""
    if not answer:
        return None
    matches = re.findall(pattern, answer, flags=re.IGNORECASE)
    if not matches:
        return None
    value = float(matches[-1])
    value = float(min(max(value, lo), hi))
    return int(value) if value.is_integer() else value


# ---------------------------------------------------------------- sampling


def resolve_inputs(inputs: Iterable[str]) -> list[str]:
    """A cuvee run directory (stats.json / recipe.yaml next to output/) means its output/ folder."""
    out = []
    for p in inputs:
        d = Path(p)
        if d.is_dir() and (d / "output").is_dir() and ((d / "stats.json").exists() or (d / "recipe.yaml").exists()):
            out.append(str(d / "output"))
        else:
            out.append(str(p))
    return out


def _sample_key(seed: int, doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}\0{doc_id}".encode(), digest_size=8).digest(), "big")


def sample_documents(inputs: Iterable[str], n: int, seed: int = 0, counts: dict | None = None) -> list:
    """The ``n`` documents with the smallest seeded id hashes (bottom-k), in hash order; one pass, O(n) memory.

    Independent of file order; the sample for n is a prefix of the sample for any larger n (same seed).
    Empty texts and repeated ids are skipped and counted in ``counts``."""
    from cuvee.pipeline.io import iter_documents

    counts = counts if counts is not None else {}
    heap: list[tuple[int, str, object]] = []  # max-heap via negated keys
    in_heap: set[str] = set()
    seen = 0
    for doc in iter_documents(resolve_inputs(inputs)):
        seen += 1
        if not doc.text or not doc.text.strip():
            counts["empty_text"] = counts.get("empty_text", 0) + 1
            continue
        if doc.id in in_heap:
            counts["duplicate_id"] = counts.get("duplicate_id", 0) + 1
            continue
        key = _sample_key(seed, doc.id)
        if len(heap) < n:
            heapq.heappush(heap, (-key, doc.id, doc))
            in_heap.add(doc.id)
        elif key < -heap[0][0]:
            _, old, _ = heapq.heappushpop(heap, (-key, doc.id, doc))
            in_heap.discard(old)
            in_heap.add(doc.id)
    counts["documents_read"] = seen
    return [d for _, _, d in sorted(heap, key=lambda t: (-t[0], t[1]))]


# ---------------------------------------------------------------- LLM backends


class Completion(NamedTuple):
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    retries: int = 0


def encode_prompt(tok, prompt: str) -> list[int]:
    """Token ids of a single-user-message prompt: the chat template when the tokenizer has one, else plain text."""
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return list(tok(prompt)["input_ids"])


def messages_to_prompt(messages: list[dict]) -> str:
    """Plain-text prompt for a tokenizer without a chat template (one user message = its content)."""
    return "\n\n".join(str(m.get("content") or "") for m in messages)


def generate_greedy(model, tok, input_ids: list[int], max_new_tokens: int) -> tuple[str, int, int]:
    """Greedy decoding of one prompt; returns (text, prompt tokens, completion tokens)."""
    import torch

    device = next(model.parameters()).device
    x = torch.tensor([input_ids], dtype=torch.long, device=device)
    eos = tok.eos_token_id if tok.eos_token_id is not None else model.config.eos_token_id
    with torch.inference_mode():
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                             do_sample=False, num_beams=1, pad_token_id=eos, eos_token_id=eos)
    new = out[0, len(input_ids):].tolist()
    return tok.decode(new, skip_special_tokens=True), len(input_ids), len(new)


def load_causal_lm(model: str, device: str = "auto"):
    """A local (or cached) Hugging Face causal LM and its tokenizer, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cuvee.classifiers.embedder import pick_device

    try:
        tok = AutoTokenizer.from_pretrained(model)
        lm = AutoModelForCausalLM.from_pretrained(model)
    except (OSError, ValueError) as e:
        raise AnnotateError(f"cannot load causal LM {model!r}: {' '.join(str(e).split())[:300]}") from None
    return lm.to(pick_device(device)).eval(), tok


class LocalLM:
    """A Hugging Face causal LM in this process; one prompt at a time (greedy), so results match a server."""

    concurrency = 1

    def __init__(self, model: str, max_new_tokens: int = 256, device: str = "auto"):
        self.name = model
        self.max_new_tokens = max_new_tokens
        self.model, self.tok = load_causal_lm(model, device)

    def complete(self, prompt: str) -> Completion:
        text, pt, ct = generate_greedy(self.model, self.tok, encode_prompt(self.tok, prompt), self.max_new_tokens)
        return Completion(text, pt, ct)


_RETRY_STATUS = {408, 409, 425, 429}


class HttpLM:
    """An OpenAI-compatible endpoint (``{endpoint}/chat/completions`` or ``/completions``), temperature 0."""

    def __init__(self, endpoint: str, model: str, api: str = "chat", api_key: str | None = None, max_new_tokens: int = 256,
                 timeout: float = 120.0, retries: int = 5, backoff: float = 1.0, concurrency: int = 8,
                 tokenizer: str | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.name = model
        self.api = api
        self.api_key = api_key
        self.max_new_tokens = max_new_tokens
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.concurrency = max(1, concurrency)
        self._tok_name = tokenizer
        self._tok = None
        self._tok_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.endpoint}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def _count_tokens(self, prompt: str, answer: str) -> tuple[int | None, int | None]:
        """Token counts when the endpoint sends no ``usage``: the model's tokenizer, if it loads offline."""
        with self._tok_lock:
            if self._tok is None:
                try:
                    from transformers import AutoTokenizer

                    self._tok = AutoTokenizer.from_pretrained(self._tok_name or self.name, local_files_only=True)
                except Exception:  # noqa: BLE001 - any failure means: no counts
                    self._tok = False
        if not self._tok:
            return None, None
        ids = encode_prompt(self._tok, prompt) if self.api == "chat" else self._tok(prompt)["input_ids"]
        return len(ids), len(self._tok(answer, add_special_tokens=False)["input_ids"])

    def complete(self, prompt: str) -> Completion:
        body = {"model": self.name, "max_tokens": self.max_new_tokens, "temperature": 0.0}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        resp, retries = self._post(body)
        try:
            choice = resp["choices"][0]
            text = choice["message"]["content"] if self.api == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise AnnotateError(f"{self.url}: unexpected response {json.dumps(resp)[:200]}") from None
        text = text or ""
        usage = resp.get("usage") or {}
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if pt is None or ct is None:
            pt, ct = self._count_tokens(prompt, text)
        return Completion(text, pt, ct, retries)

    def _post(self, body: dict) -> tuple[dict, int]:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = "no attempt"
        for attempt in range(self.retries + 1):
            wait = None
            try:
                req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    return json.loads(r.read().decode("utf-8")), attempt
            except urllib.error.HTTPError as e:
                detail = " ".join(e.read().decode("utf-8", "replace").split())[:200]
                if e.code not in _RETRY_STATUS and e.code < 500:
                    raise AnnotateError(f"{self.url}: HTTP {e.code} {detail}") from None
                last = f"HTTP {e.code} {detail}".strip()
                ra = e.headers.get("Retry-After") if e.headers else None
                if ra and ra.replace(".", "", 1).isdigit():
                    wait = min(float(ra), 60.0)
            except urllib.error.URLError as e:
                last = f"cannot reach endpoint: {e.reason}"
            except (TimeoutError, socket.timeout):
                last = f"timed out after {self.timeout:g}s"
            except (ConnectionError, http.client.HTTPException) as e:
                last = f"connection error: {e!r}"
            except json.JSONDecodeError:
                last = "response is not JSON"
            if attempt < self.retries:
                time.sleep(wait if wait is not None else min(self.backoff * 2**attempt, 30.0) * (1 + 0.25 * random.random()))
        raise AnnotateError(f"{self.url}: {last} (gave up after {self.retries + 1} attempts)")


# ---------------------------------------------------------------- output file


def load_done(path: Path) -> tuple[dict[str, dict], int]:
    """Records already in ``path`` by id; a partial last line (killed mid-write) is cut off. Returns (done, dropped)."""
    if not path.exists():
        return {}, 0
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    dropped = 1 if data[cut:].strip() else 0
    lines = data[:cut].split(b"\n")[:-1] if cut else []
    done: dict[str, dict] = {}
    keep = cut
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a torn final line that happens to end in a newline
                keep -= len(line) + 1
                dropped += 1
                continue
            raise AnnotateError(f"{path}: line {i + 1} is not JSON; not an annotations file cuvee can resume") from None
        if isinstance(rec, dict) and "id" in rec:
            done[str(rec["id"])] = rec
    if keep != len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    return done, dropped


@dataclass
class Tally:
    annotated: int = 0
    scored: int = 0
    unparsed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    uncounted: int = 0  # documents whose tokens could not be counted
    histogram: dict = field(default_factory=dict)

    def add(self, rec: dict, retries: int) -> None:
        self.annotated += 1
        self.retries += retries
        if rec["score"] is None:
            self.unparsed += 1
        else:
            self.scored += 1
            b = str(int(rec["score"]))
            self.histogram[b] = self.histogram.get(b, 0) + 1
        if rec["prompt_tokens"] is None or rec["completion_tokens"] is None:
            self.uncounted += 1
        else:
            self.prompt_tokens += rec["prompt_tokens"]
            self.completion_tokens += rec["completion_tokens"]


def annotate(inputs: Iterable[str], out: str | Path, backend, prompt: PromptTemplate, n: int = 500, seed: int = 0,
             max_chars: int | None = 2000, limit: int | None = None, store_text: bool = True,
             score_pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 5, batch_size: int | None = None,
             price_per_mtok: tuple[float, float] | None = None, progress: bool = True) -> dict:
    """Sample, prompt, parse and append; returns the summary (also written to ``<out>.summary.json``)."""
    t0 = time.perf_counter()
    out = Path(out)
    counts: dict = {}
    sample = sample_documents(inputs, n, seed, counts)
    out.parent.mkdir(parents=True, exist_ok=True)
    done, dropped = load_done(out)
    for rec in done.values():
        if rec.get("prompt_sha256") not in (None, prompt.sha256) or rec.get("model") not in (None, backend.name):
            raise AnnotateError(f"{out} holds annotations by model {rec.get('model')!r} / prompt "
                                f"{str(rec.get('prompt_sha256'))[:12]}; this run is {backend.name!r} / {prompt.sha256[:12]}: "
                                "use another --out")
    pending = [d for d in sample if d.id not in done]
    todo = pending[:limit] if limit is not None else pending
    k = getattr(backend, "concurrency", 1)
    batch_size = batch_size or max(16, 4 * k)
    tally = Tally()
    error: Exception | None = None

    def work(doc):
        text = doc.text[:max_chars] if max_chars else doc.text
        return backend.complete(prompt.fill(text))

    def record(doc, c: Completion) -> dict:
        rec = {"id": doc.id}
        if store_text:
            rec["text"] = doc.text
        rec.update({"text_sha256": hashlib.sha256(doc.text.encode("utf-8")).hexdigest(),
                    "score": parse_score(c.text, score_pattern, 0, max_score), "answer": c.text[:ANSWER_CHARS],
                    "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
                    "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens})
        return rec

    from tqdm import tqdm

    t_llm = time.perf_counter()
    bar = tqdm(total=len(todo), desc="annotate", unit="doc", disable=not progress, dynamic_ncols=True)
    pool = ThreadPoolExecutor(max_workers=k) if k > 1 else None
    try:
        with open(out, "a", encoding="utf-8") as f:
            for s in range(0, len(todo), batch_size):
                batch = todo[s : s + batch_size]
                futures = [pool.submit(work, d) for d in batch] if pool else None
                for i, doc in enumerate(batch):
                    try:
                        c = futures[i].result() if futures else work(doc)
                    except Exception as e:  # noqa: BLE001 - keep the others of this batch, then stop
                        error = error or e
                        if not futures:
                            break
                        continue
                    rec = record(doc, c)
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    tally.add(rec, c.retries)
                    bar.update(1)
                f.flush()
                os.fsync(f.fileno())
                if error is not None:
                    break
    finally:
        bar.close()
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)
    llm_s = time.perf_counter() - t_llm
    wall = time.perf_counter() - t0
    tokens = tally.prompt_tokens + tally.completion_tokens
    summary = {
        "output": str(out), "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "sampled": len(sample), "already_done": len(sample) - len(pending),
        "annotated": tally.annotated, "scored": tally.scored, "unparsed": tally.unparsed,
        "remaining": len(pending) - tally.annotated,
        "dropped_partial_lines": dropped, "retries": tally.retries, "score_histogram": dict(sorted(tally.histogram.items())),
        "skipped_input": {k_: v for k_, v in counts.items() if k_ != "documents_read"}, "documents_read": counts.get("documents_read", 0),
        "prompt_tokens": tally.prompt_tokens if tally.annotated > tally.uncounted or not tally.annotated else None,
        "completion_tokens": tally.completion_tokens if tally.annotated > tally.uncounted or not tally.annotated else None,
        "tokens_uncounted_docs": tally.uncounted,
        "wall_s": round(wall, 3), "annotate_s": round(llm_s, 3),
        "docs_per_s": round(tally.annotated / llm_s, 3) if llm_s > 0 else None,
        "tokens_per_s": round(tokens / llm_s, 1) if llm_s > 0 and tokens else None,
        "completion_tokens_per_s": round(tally.completion_tokens / llm_s, 1) if llm_s > 0 and tally.completion_tokens else None,
    }
    if price_per_mtok:
        p_in, p_out = price_per_mtok
        summary["price_per_mtok"] = {"input": p_in, "output": p_out}
        summary["estimated_cost"] = round(tally.prompt_tokens / 1e6 * p_in + tally.completion_tokens / 1e6 * p_out, 6)
    if error is not None:
        summary["error"] = " ".join(str(error).split())
    Path(str(out) + ".summary.json").write_text(json.dumps(summary, indent=2))
    if error is not None:
        msg = summary["error"] if isinstance(error, AnnotateError) else f"{type(error).__name__}: {summary['error']}"
        raise AnnotateError(f"{msg} ({tally.annotated} annotated this run and kept in {out}; rerun to resume)")
    return summary
