"""LLM annotation of documents for training a quality head: the first step of the FineWeb-Edu recipe.

``cuvee classify annotate`` samples N documents of a run's output (deterministically: the N smallest
seeded hashes of the document ids, so the sample does not depend on file order and a larger N extends a
smaller one), fills a prompt template (``cuvee/assets/prompts/fineweb_edu.txt`` by default), asks an
instruction-following LLM, and parses ``Educational score: N`` from the answer. The LLM is either a local
Hugging Face causal LM (greedy decoding) or an OpenAI-compatible HTTP endpoint (vLLM, TGI, llama.cpp,
``cuvee.classifiers.llm_server``) queried with K requests in flight; both are backends of :mod:`cuvee.llm`
(bounded retries, a total deadline and a size cap per request; one driver and tally for every LLM job).

The output is JSONL, one line per document (id, text, text_sha256, score or null, the raw answer cut to
1,000 characters, model, prompt sha256, token counts). It is append-only and resumable (a
:mod:`cuvee.kernel.ledger`): a rerun skips ids already written, and a partial last line left by a kill is
dropped and redone; a file cuvee did not write is refused (``annotations_file.py``). Answers without a score
are kept with ``score: null`` and counted as ``unparsed``, scores outside 0..max or not whole as
``out_of_range`` / ``not_integer``, answers that are not valid Unicode as ``invalid_unicode``: nothing is
clamped or guessed. Documents whose id, text or metadata is not valid Unicode are not sampled (counted under
``skipped_input``). A response the endpoint botched (wrong shape, over the size cap) is counted under
``failed`` and left for a rerun. Train the head with
``cuvee classify train --kind transformer --task regression --data annotations.jsonl --label-key score``.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from cuvee.classifiers import annotations_file
from cuvee.classifiers.annotations_file import AnnotateError
from cuvee.kernel.errors import UserError
from cuvee.kernel.ledger import Ledger
from cuvee.llm.backend import Backend, Completion
from cuvee.llm.driver import Tally, cost, drive
from cuvee.llm.inputs import resolve_inputs, unusable
from cuvee.llm.prompt import PromptTemplate

DEFAULT_SCORE_PATTERN = r"educational\s+score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)"
ANSWER_CHARS = 1000  # raw answer kept per line
PROBLEMS = ("unparsed", "out_of_range", "not_integer", "invalid_unicode")  # why an answer has no score


# ---------------------------------------------------------------- score


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


def _sample_key(seed: int, doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}\0{doc_id}".encode(), digest_size=8).digest(), "big")


def sample_documents(inputs: Iterable[str], n: int, seed: int = 0, counts: dict | None = None) -> list:
    """The ``n`` documents with the smallest seeded id hashes (bottom-k), in hash order; one pass, O(n) memory.

    Independent of file order; the sample for n is a prefix of the sample for any larger n (same seed).
    Documents that cannot be sent (:func:`cuvee.llm.inputs.unusable`) and repeated ids are skipped and counted
    in ``counts``."""
    from cuvee.pipeline.io import iter_documents

    counts = counts if counts is not None else {}
    heap: list[tuple[int, str, object]] = []  # max-heap via negated keys
    in_heap: set[str] = set()
    seen = 0
    for doc in iter_documents(resolve_inputs(inputs)):
        seen += 1
        why = unusable(doc)
        if why:
            counts[why] = counts.get(why, 0) + 1
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


# ---------------------------------------------------------------- annotate


def annotate(inputs: Iterable[str], out: str | Path, backend: Backend, prompt: PromptTemplate, n: int = 500,
             seed: int = 0, max_chars: int | None = 2000, limit: int | None = None, store_text: bool = True,
             score_pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 5,
             price_per_mtok: tuple[float, float] | None = None, progress: bool = True, fresh: bool = False) -> dict:
    """Sample, prompt, parse and append; returns the summary (also written to ``<out>.summary.json``).

    ``out`` is bound to its plan (``<out>.json``): another plan is refused untouched unless ``fresh``, which
    starts cuvee's own file over."""
    from tqdm import tqdm

    from cuvee.kernel.atomic import write_json
    from cuvee.pipeline.io import expand_paths

    t0 = time.perf_counter()
    out = Path(out)
    summary_path = Path(str(out) + ".summary.json")
    files = expand_paths(resolve_inputs(inputs))
    if any(os.path.realpath(f) == os.path.realpath(out) for f in files):
        raise AnnotateError(f"--out {out} is one of the input files; use another --out")
    settings = {"seed": seed, "max_chars": max_chars, "store_text": store_text, "score_pattern": score_pattern,
                "max_score": max_score, "api": None if backend.api == "local" else backend.api,  # as plans recorded it
                "max_new_tokens": backend.max_new_tokens}
    plan = annotations_file.plan(files, backend.name, prompt.name, prompt.sha256, settings)
    held = annotations_file.claim(out, plan, fresh)
    try:
        done, contents = annotations_file.read_done(out, backend.name, prompt.sha256)
        annotations_file.check_summary(summary_path)
        counts: dict = {}
        sample = sample_documents(files, n, seed, counts)
        annotations_file.check_texts(out, done, sample)
        annotations_file.bind(out, plan)
        pending = [d for d in sample if d.id not in done]
        todo = pending[:limit] if limit is not None else pending
        tally = Tally("annotate")
        scores = {"scored": 0, "problems": dict.fromkeys(PROBLEMS, 0), "histogram": {}}

        def record(doc, c: Completion) -> dict:
            rec = {"id": doc.id}
            if store_text:
                rec["text"] = doc.text
            score, problem = (None, c.problem) if c.problem else read_score(c.text, score_pattern, max_score)
            rec.update({"text_sha256": hashlib.sha256(doc.text.encode("utf-8")).hexdigest(),
                        "score": score, "score_problem": problem, "answer": c.text[:ANSWER_CHARS],
                        "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
                        "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens})
            if score is None:
                scores["problems"][problem] += 1
            else:
                scores["scored"] += 1
                scores["histogram"][str(score)] = scores["histogram"].get(str(score), 0) + 1
            return rec

        t_llm = time.perf_counter()
        bar = tqdm(total=len(todo), desc="annotate", unit="doc", disable=not progress, dynamic_ncols=True)
        with Ledger(out, contents) as records, bar:
            def accept(doc, c: Completion) -> None:
                records.append(record(doc, c))
                bar.update(1)

            error = drive(backend, todo, lambda d: prompt.fill(d.text[:max_chars] if max_chars else d.text), accept,
                          tally, describe=lambda d: f"document {d.id}", ordered=True)
        llm_s = time.perf_counter() - t_llm
        summary = _summary(out, backend, prompt, sample, pending, tally, scores, contents.torn, counts, llm_s,
                           time.perf_counter() - t0, price_per_mtok)
        if error is not None:
            summary["error"] = " ".join(str(error).split())
        write_json(summary_path, summary)
    finally:
        held.close()
    if error is not None:
        msg = summary["error"] if isinstance(error, UserError) else f"{type(error).__name__}: {summary['error']}"
        raise AnnotateError(f"{msg} ({tally.generations} annotated this run and kept in {out}; rerun to resume)")
    return summary


def _summary(out, backend, prompt, sample, pending, tally: Tally, scores: dict, dropped, counts, llm_s, wall,
             price_per_mtok) -> dict:
    annotated = tally.generations
    counted = annotated > tally.uncounted or not annotated
    summary = {
        "output": str(out), "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "sampled": len(sample), "already_done": len(sample) - len(pending),
        "annotated": annotated, "scored": scores["scored"], **scores["problems"],
        "failed": sum(tally.failed.values()), "failed_by_reason": dict(sorted(tally.failed.items())),
        "remaining": len(pending) - annotated,
        "dropped_partial_lines": dropped, "retries": tally.retries, "score_histogram": dict(sorted(scores["histogram"].items())),
        "skipped_input": {k_: v for k_, v in counts.items() if k_ != "documents_read"}, "documents_read": counts.get("documents_read", 0),
        "prompt_tokens": tally.prompt_tokens if counted else None,
        "completion_tokens": tally.completion_tokens if counted else None,
        "tokens_uncounted_docs": tally.uncounted,
        "wall_s": round(wall, 3), "annotate_s": round(llm_s, 3),
        "docs_per_s": round(annotated / llm_s, 3) if llm_s > 0 else None, **tally.rates(llm_s),
    }
    if price_per_mtok:
        summary["price_per_mtok"] = {"input": price_per_mtok[0], "output": price_per_mtok[1]}
        summary["estimated_cost"] = cost(tally.prompt_tokens, tally.completion_tokens, price_per_mtok)
    return summary
