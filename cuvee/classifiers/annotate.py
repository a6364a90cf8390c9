"""LLM annotation of documents for training a quality head: the first step of the FineWeb-Edu recipe.

``cuvee classify annotate`` samples N documents of a run's output (deterministically: the N smallest
seeded hashes of the document ids, so the sample does not depend on file order and a larger N extends a
smaller one), fills a prompt template (``cuvee/assets/prompts/fineweb_edu.txt`` by default), asks an
instruction-following LLM, and parses ``Educational score: N`` from the answer. The LLM is either a local
Hugging Face causal LM (greedy decoding) or an OpenAI-compatible HTTP endpoint (vLLM, TGI, llama.cpp,
``cuvee.classifiers.llm_server``) queried with K requests in flight (``llm_http.py``: bounded retries, a
total deadline and a size cap per request).

The output is JSONL, one line per document (id, text, text_sha256, score or null, the raw answer cut to
1,000 characters, model, prompt sha256, token counts). It is append-only and resumable: a rerun skips ids
already written, and a partial last line left by a kill is dropped and redone; a file cuvee did not write
is refused (``annotations_file.py``). Answers without a score are kept with ``score: null`` and counted as
``unparsed``, scores outside 0..max or not whole as ``out_of_range`` / ``not_integer``: nothing is clamped
or guessed. A response the endpoint botched (wrong shape, over the size cap) is counted under ``failed``
and left for a rerun. Train the head with
``cuvee classify train --kind transformer --task regression --data annotations.jsonl --label-key score``.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cuvee.classifiers import annotations_file
from cuvee.classifiers.llm_http import AnnotateError, Completion, ResponseError

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "assets" / "prompts"
DEFAULT_SCORE_PATTERN = r"educational\s+score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)"
ANSWER_CHARS = 1000  # raw answer kept per line


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


def read_score(answer: str | None, pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 5) -> tuple[int | None, str | None]:
    """The LAST ``Educational score: N`` in the answer as (score, None), or (None, why): ``unparsed`` (no score
    stated), ``out_of_range`` (outside 0..max_score, or on another scale such as ``7/10``), ``not_integer``."""
    matches = list(re.finditer(pattern, answer or "", flags=re.IGNORECASE))
    last = matches[-1] if matches else None
    if last is None:
        return None, "unparsed"
    number, tail = last.group(1), answer[last.end():]
    exponent = re.match(r"[eE][+-]?\d+", tail)
    if exponent:
        number, tail = number + exponent.group(), tail[exponent.end():]
    value = float(number)
    scale = re.match(r"\s*/\s*(\d+(?:\.\d+)?)", tail)
    if scale:
        if float(scale.group(1)) != max_score:
            return None, "out_of_range"
    elif tail[:1].isalnum() or tail[:1] == "_":
        return None, "unparsed"
    if not 0 <= value <= max_score:
        return None, "out_of_range"
    if not value.is_integer():
        return None, "not_integer"
    return int(value), None


def parse_score(answer: str | None, pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 5) -> int | None:
    """The score of :func:`read_score`, None when there is no valid one."""
    return read_score(answer, pattern, max_score)[0]


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
    """A local folder or (where the user named one and is online) a hub causal LM and its tokenizer, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cuvee.classifiers.embedder import pick_device
    from cuvee.hf_loading import ModelLoadError, pretrained

    try:
        tok = pretrained(AutoTokenizer, model)
        lm = pretrained(AutoModelForCausalLM, model)
    except ModelLoadError as e:
        raise AnnotateError(f"cannot load causal LM: {e}") from None
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


@dataclass
class Tally:
    annotated: int = 0
    scored: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    uncounted: int = 0  # documents whose tokens could not be counted
    problems: dict = field(default_factory=lambda: {"unparsed": 0, "out_of_range": 0, "not_integer": 0})
    failed: dict = field(default_factory=dict)  # documents whose response was unusable, by reason (not written)
    histogram: dict = field(default_factory=dict)

    def add(self, rec: dict, retries: int) -> None:
        self.annotated += 1
        self.retries += retries
        if rec["score"] is None:
            self.problems[rec["score_problem"]] += 1
        else:
            self.scored += 1
            b = str(int(rec["score"]))
            self.histogram[b] = self.histogram.get(b, 0) + 1
        if rec["prompt_tokens"] is None or rec["completion_tokens"] is None:
            self.uncounted += 1
        else:
            self.prompt_tokens += rec["prompt_tokens"]
            self.completion_tokens += rec["completion_tokens"]

    def fail(self, doc_id: str, e: ResponseError) -> None:
        self.failed[e.reason] = self.failed.get(e.reason, 0) + 1
        log.warning("annotate: document %s not annotated (%s): %s", doc_id, e.reason, " ".join(str(e).split())[:300])


def _append(out: Path, todo: list, work, record, tally: Tally, batch_size: int, k: int, progress: bool) -> Exception | None:
    """Ask for every document of ``todo`` (``k`` in flight), append each answer; the first hard error stops it."""
    from tqdm import tqdm

    error: Exception | None = None
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
                    except ResponseError as e:  # this document's answer is unusable: counted, the run goes on
                        tally.fail(doc.id, e)
                        continue
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
    return error


def annotate(inputs: Iterable[str], out: str | Path, backend, prompt: PromptTemplate, n: int = 500, seed: int = 0,
             max_chars: int | None = 2000, limit: int | None = None, store_text: bool = True,
             score_pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 5, batch_size: int | None = None,
             price_per_mtok: tuple[float, float] | None = None, progress: bool = True, fresh: bool = False) -> dict:
    """Sample, prompt, parse and append; returns the summary (also written to ``<out>.summary.json``).

    ``out`` is bound to its plan (``<out>.json``): another plan is refused untouched unless ``fresh``, which
    starts cuvee's own file over."""
    from cuvee.pipeline.io import expand_paths

    t0 = time.perf_counter()
    out = Path(out)
    summary_path = Path(str(out) + ".summary.json")
    inputs = resolve_inputs(inputs)
    files = expand_paths(inputs)
    if any(os.path.realpath(f) == os.path.realpath(out) for f in files):
        raise AnnotateError(f"--out {out} is one of the input files; use another --out")
    settings = {"seed": seed, "max_chars": max_chars, "store_text": store_text, "score_pattern": score_pattern,
                "max_score": max_score, "api": getattr(backend, "api", None),
                "max_new_tokens": getattr(backend, "max_new_tokens", None)}
    plan = annotations_file.plan(files, backend.name, prompt.name, prompt.sha256, settings)
    held = annotations_file.claim(out, plan, fresh)
    try:
        done, keep = annotations_file.read_done(out, backend.name, prompt.sha256)
        annotations_file.check_summary(summary_path)
        counts: dict = {}
        sample = sample_documents(files, n, seed, counts)
        annotations_file.check_texts(out, done, sample)
        dropped = annotations_file.repair(out, keep)
        annotations_file.bind(out, plan)
        pending = [d for d in sample if d.id not in done]
        todo = pending[:limit] if limit is not None else pending
        k = getattr(backend, "concurrency", 1)
        tally = Tally()

        def work(doc):
            text = doc.text[:max_chars] if max_chars else doc.text
            return backend.complete(prompt.fill(text))

        def record(doc, c: Completion) -> dict:
            rec = {"id": doc.id}
            if store_text:
                rec["text"] = doc.text
            score, problem = read_score(c.text, score_pattern, max_score)
            rec.update({"text_sha256": hashlib.sha256(doc.text.encode("utf-8")).hexdigest(),
                        "score": score, "score_problem": problem, "answer": c.text[:ANSWER_CHARS],
                        "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
                        "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens})
            return rec

        t_llm = time.perf_counter()
        error = _append(out, todo, work, record, tally, batch_size or max(16, 4 * k), k, progress)
        llm_s = time.perf_counter() - t_llm
        summary = _summary(out, backend, prompt, sample, pending, tally, dropped, counts, llm_s, time.perf_counter() - t0,
                           price_per_mtok)
        if error is not None:
            summary["error"] = " ".join(str(error).split())
        summary_path.write_text(json.dumps(summary, indent=2))
    finally:
        held.release()
    if error is not None:
        msg = summary["error"] if isinstance(error, AnnotateError) else f"{type(error).__name__}: {summary['error']}"
        raise AnnotateError(f"{msg} ({tally.annotated} annotated this run and kept in {out}; rerun to resume)")
    return summary


def _summary(out, backend, prompt, sample, pending, tally: Tally, dropped, counts, llm_s, wall, price_per_mtok) -> dict:
    tokens = tally.prompt_tokens + tally.completion_tokens
    counted = tally.annotated > tally.uncounted or not tally.annotated
    summary = {
        "output": str(out), "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "sampled": len(sample), "already_done": len(sample) - len(pending),
        "annotated": tally.annotated, "scored": tally.scored, **tally.problems,
        "failed": sum(tally.failed.values()), "failed_by_reason": dict(sorted(tally.failed.items())),
        "remaining": len(pending) - tally.annotated,
        "dropped_partial_lines": dropped, "retries": tally.retries, "score_histogram": dict(sorted(tally.histogram.items())),
        "skipped_input": {k_: v for k_, v in counts.items() if k_ != "documents_read"}, "documents_read": counts.get("documents_read", 0),
        "prompt_tokens": tally.prompt_tokens if counted else None,
        "completion_tokens": tally.completion_tokens if counted else None,
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
    return summary
