"""``cuvee rephrase``: rewrite a run's documents with an LLM into a new folder the mixer reads as a source.

The Nemotron-CC recipe (Su et al. 2024) gets more unique tokens by rewriting documents: low-quality ones in
Wikipedia style, high-quality ones into question/answer pairs, distilled passages, extracted knowledge or
knowledge lists (prompts in ``cuvee/assets/prompts/rephrase_*.txt``, written by cuvee from the papers'
descriptions). Documents are cut into pieces of at most ``max_input_tokens`` tokens (``chunks.py``), each
piece is rewritten through an OpenAI-compatible endpoint (``llm_http.HttpLM``: K requests in flight,
retries, deadlines, size caps) or a local causal LM (``local_lm.BatchLocalLM``: batched), the pieces are
checked (``checks.py``) and joined. The output folder is claimed, locked and bound to its plan (inputs'
content, prompt hash, model, generation settings, ``where``): a rerun with anything changed is refused before
any request; a rerun with the same plan resumes, asking only for pieces no file records (``ledger.py``).
``where`` (the mixer's conditions, :mod:`cuvee.mixer.where`) limits the rewrites to the documents whose metadata
matches, e.g. only the low-quality buckets, so the generation budget is not spent on documents the mix leaves
out; the others are counted as ``skipped_by_where``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from cuvee.classifiers.llm_http import Completion, ResponseError
from cuvee.mixer.where import matches
from cuvee.rephrase.checks import Checks
from cuvee.rephrase.chunks import TokenCounter, join_rewrites, split_document
from cuvee.rephrase.ledger import SUMMARY, Ledger, RephraseError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """Everything that decides what is generated (bound to the folder); checked when built."""

    max_input_tokens: int = 512
    max_new_tokens: int = 1024
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    checks: Checks = field(default_factory=Checks)

    def __post_init__(self):
        problems = []
        if self.max_input_tokens < 0:
            problems.append(f"max_input_tokens must be >= 0 (0: send documents whole), got {self.max_input_tokens}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.temperature <= 2:
            problems.append(f"temperature must be in [0, 2], got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("max_input_similarity", "max_prompt_copy"):
            v = getattr(self.checks, name)
            if not 0 < v <= 1:
                problems.append(f"{name} must be in (0, 1] (1 turns the check off), got {v}")
        if problems:
            raise RephraseError("; ".join(problems))

    def generation(self) -> dict:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": self.top_p,
                "seed": self.seed, "max_input_tokens": self.max_input_tokens}


def _file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass
class _Job:
    """One source document in progress: its pieces and the answers accepted so far."""

    doc: object
    pieces: list[str]
    answers: dict[int, dict] = field(default_factory=dict)
    closed: bool = False


@dataclass
class _Tally:
    kept: int = 0
    dropped: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    generations: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    uncounted: int = 0

    def count(self, c: Completion) -> None:
        self.generations += 1
        self.retries += c.retries
        if c.prompt_tokens is None or c.completion_tokens is None:
            self.uncounted += 1
        else:
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens


class _Rephraser:
    """One pass over the inputs into one ledger; built per call of :func:`rephrase`."""

    def __init__(self, backend, prompt, settings: Settings, counter: TokenCounter | None, ledger: Ledger, api: str,
                 where: dict | None = None):
        self.backend, self.prompt, self.settings, self.counter, self.ledger = backend, prompt, settings, counter, ledger
        self.where = where or {}
        self.instructions = prompt.text.replace("{text}", " ")
        self.provenance = {"rephrase_prompt": prompt.name, "rephrase_prompt_sha256": prompt.sha256,
                           "rephrase_model": backend.name, "rephrase_api": api,
                           "rephrase_generation": settings.generation()}
        self.tally = _Tally()
        self.inputs: dict = {"documents_read": 0, "already_done": 0, "remaining": 0, "skipped_by_where": 0, "skipped": {}}
        self.where_seen: dict[str, int] = dict.fromkeys(self.where, 0)  # documents holding each where key
        self.meta_keys: set[str] = set()
        self.resumed_pieces = 0

    def jobs(self, docs, limit: int | None):
        """Source documents still to do, in input order; everything else is counted."""
        seen: set[str] = set()
        started = 0
        for doc in docs:
            self.inputs["documents_read"] += 1
            skip = "duplicate_id" if doc.id in seen else "empty_text" if not (doc.text or "").strip() else None
            seen.add(doc.id)
            if skip:
                self.inputs["skipped"][skip] = self.inputs["skipped"].get(skip, 0) + 1
            elif self.where and not self._selected(doc.metadata or {}):
                self.inputs["skipped_by_where"] += 1
            elif doc.id in self.ledger.done:
                self.inputs["already_done"] += 1
            elif limit is not None and started >= limit:
                self.inputs["remaining"] += 1
            else:
                started += 1
                job = _Job(doc, split_document(doc.text, self.settings.max_input_tokens, self.counter))
                for i, rec in self.ledger.parts.get(doc.id, {}).items():
                    if i < len(job.pieces):
                        job.answers[i] = rec
                self.resumed_pieces += len(job.answers)
                yield job

    def _selected(self, meta: dict) -> bool:
        self.meta_keys.update(meta)
        for key in self.where:
            self.where_seen[key] += meta.get(key) is not None
        return all(matches(meta.get(key), cond) for key, cond in self.where.items())

    def where_typo(self) -> str | None:
        """When no document matched and a where key is in no document: the likely typo, in one line."""
        matched = self.inputs["documents_read"] - self.inputs["skipped_by_where"] - sum(self.inputs["skipped"].values())
        missing = [k for k, n in self.where_seen.items() if n == 0]
        if matched or not missing or not self.inputs["skipped_by_where"]:
            return None
        hints = []
        for key in missing:
            close = difflib.get_close_matches(key, sorted(self.meta_keys), n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return (f"--where: no document matched and no document has the key {', '.join(hints)}; "
                f"metadata keys seen: {', '.join(sorted(self.meta_keys)[:20]) or 'none'}")

    def units(self, jobs):
        for job in jobs:
            missing = [i for i in range(len(job.pieces)) if i not in job.answers]
            if not missing:  # every piece was on disk: finish it without asking for anything
                self._finish(job)
            for i in missing:
                yield job, i

    def accept(self, job: _Job, i: int, c: Completion) -> None:
        self.tally.count(c)
        rec = {"id": job.doc.id, "piece": i, "pieces": len(job.pieces), "text": c.text, "finish_reason": c.finish_reason,
               "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        if job.closed:  # an earlier piece failed a check: the document is already dropped
            return
        reason = self.settings.checks.failure(c.text, job.pieces[i], self.instructions, c.finish_reason,
                                              c.completion_tokens, self.settings.max_new_tokens)
        if reason:
            job.closed = True
            spent = [*job.answers.values(), rec]
            self.ledger.reject({"id": job.doc.id, "reason": reason, "piece": i, "pieces": len(job.pieces),
                                "sample": c.text[:200], "finish_reason": c.finish_reason,
                                "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in spent),
                                "completion_tokens": sum(r["completion_tokens"] or 0 for r in spent),
                                "prompt_sha256": self.prompt.sha256, "model": self.backend.name})
            self.tally.dropped[reason] = self.tally.dropped.get(reason, 0) + 1
            return
        job.answers[i] = rec
        if len(job.answers) < len(job.pieces):
            self.ledger.part(rec)
        else:
            self._finish(job)

    def _finish(self, job: _Job) -> None:
        answers = [job.answers[i] for i in range(len(job.pieces))]
        counted = all(a["prompt_tokens"] is not None and a["completion_tokens"] is not None for a in answers)
        meta = {**(job.doc.metadata or {}), **self.provenance, "rephrase_source_id": job.doc.id,
                "rephrase_source_sha256": hashlib.sha256(job.doc.text.encode("utf-8")).hexdigest(),
                "rephrase_pieces": len(answers),
                "rephrase_prompt_tokens": sum(a["prompt_tokens"] for a in answers) if counted else None,
                "rephrase_completion_tokens": sum(a["completion_tokens"] for a in answers) if counted else None}
        self.ledger.document({"id": f"{job.doc.id}#{self.prompt.name}", "text": join_rewrites([a["text"] for a in answers]),
                              "metadata": meta})
        self.tally.kept += 1

    def fail(self, job: _Job, e: ResponseError) -> None:
        self.tally.failed[e.reason] = self.tally.failed.get(e.reason, 0) + 1
        log.warning("rephrase: document %s piece not rewritten (%s): %s", job.doc.id, e.reason, " ".join(str(e).split())[:300])

    def generate(self, prompts: list[str]) -> list[Completion]:
        many = getattr(self.backend, "complete_many", None)
        return many(prompts) if many else [self.backend.complete(p) for p in prompts]

    def drive(self, units) -> Exception | None:
        """Keep ``concurrency`` work items in flight, record each answer as it arrives; the first hard error
        stops new requests, and the answers of those already in flight are still recorded."""
        size = getattr(self.backend, "batch_size", 1)
        k = max(1, getattr(self.backend, "concurrency", 1))
        inflight: dict = {}
        error: Exception | None = None
        pool = ThreadPoolExecutor(max_workers=k)
        try:
            while True:
                while error is None and len(inflight) < k:
                    item = [u for _, u in zip(range(size), units)]
                    if not item:
                        break
                    inflight[pool.submit(self.generate, [self.prompt.fill(job.pieces[i]) for job, i in item])] = item
                if not inflight:
                    return error
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for fut in finished:
                    item = inflight.pop(fut)
                    try:
                        answers = fut.result()
                    except ResponseError as e:  # this answer is unusable: counted, left for a rerun
                        for job, _ in item:
                            self.fail(job, e)
                        continue
                    except Exception as e:  # noqa: BLE001 - stop asking, keep what is in flight
                        error = error or e
                        continue
                    for (job, i), c in zip(item, answers):
                        self.accept(job, i, c)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.ledger.sync()


def binding(files: list[str], prompt, backend_name: str, api: str, settings: Settings, tokenizer: str | None,
            where: dict | None = None) -> dict:
    """The plan a folder is bound to; ``where`` only when given, so folders started without one still resume."""
    plan = {"inputs": [{"path": str(Path(f).resolve()), "sha256": _file_sha256(f)} for f in files],
            "prompt": {"name": prompt.name, "sha256": prompt.sha256}, "model": backend_name, "api": api,
            "generation": settings.generation(), "tokenizer": tokenizer,
            "checks": {"max_input_similarity": settings.checks.max_input_similarity,
                       "max_prompt_copy": settings.checks.max_prompt_copy}}
    if where:
        plan["where"] = where
    return plan


def check_rephrase_where(where: dict | None) -> dict | None:
    """The mixer's checks on a ``where`` mapping, then its canonical spelling; RephraseError in one line."""
    from cuvee.mixer.where import canonical, check_where

    if where is None:
        return None
    if not isinstance(where, dict) or not where:
        raise RephraseError(f"--where: give a mapping of metadata key to condition, e.g. "
                            f"{{quality_bucket: {{lte: 9}}}}; got {str(where)[:80]!r}")
    bad = [k for k in where if not isinstance(k, str)]
    if bad:
        raise RephraseError(f"--where: keys are metadata key names (strings), got {bad[0]!r}")
    try:
        json.dumps(where, allow_nan=False)
    except TypeError as e:
        raise RephraseError(f"--where: {e}") from None
    except ValueError:
        raise RephraseError("--where: NaN and infinite values match nothing; give finite numbers") from None
    try:
        return canonical(check_where(where, "--where"))
    except (TypeError, ValueError) as e:
        msg = " ".join(str(e).split())
        raise RephraseError(msg if msg.startswith("--where") else f"--where: {msg}") from None


def _refuse_overlap(out: Path, inputs: list[str]) -> None:
    o = out.resolve()
    for p in inputs:
        q = Path(p).resolve()
        if o == q or q in o.parents or o in q.parents:
            raise RephraseError(f"--out {out} overlaps the input {p}: the rewrites would be read back as input; "
                                "choose a folder outside the inputs")


def rephrase(inputs: list[str], out: str | Path, backend, prompt, settings: Settings, *, api: str,
             tokenizer=None, tokenizer_name: str | None = None, limit: int | None = None, fresh: bool = False,
             price_per_mtok: tuple[float, float] | None = None, where: dict | None = None) -> dict:
    """Rewrite the documents of ``inputs`` (those matching ``where``, if given) into ``out``; returns the summary
    (also ``out/rephrase_summary.json``)."""
    from cuvee.classifiers.annotate import resolve_inputs
    from cuvee.folders import FolderError, bind, claim, empty_owned, locked
    from cuvee.pipeline.io import expand_paths, iter_documents

    t0 = time.perf_counter()
    out = Path(out)
    where = check_rephrase_where(where)
    inputs = resolve_inputs(inputs)
    try:
        files = expand_paths(inputs)
    except FileNotFoundError as e:
        raise RephraseError(str(e)) from None
    _refuse_overlap(out, inputs)
    counter = TokenCounter(tokenizer) if tokenizer is not None else None
    try:
        claim(out, "rephrase", what="rephrase folder")
        with locked(out, "rephrase folder"):
            if fresh:
                empty_owned(out, "rephrase", what="rephrase folder")
            bind(out, binding(files, prompt, backend.name, api, settings, tokenizer_name, where), what="rephrase folder")
            ledger = Ledger(out)
            try:
                r = _Rephraser(backend, prompt, settings, counter, ledger, api, where)
                t_gen = time.perf_counter()
                error = r.drive(r.units(r.jobs(iter_documents(files), limit)))
                gen_s = time.perf_counter() - t_gen
                summary = _summary(out, r, ledger, prompt, backend, gen_s, time.perf_counter() - t0, price_per_mtok)
            finally:
                ledger.close()
            typo = r.where_typo() if error is None else None
            if typo:
                summary["error"] = typo
            if error is not None:
                summary["error"] = " ".join(str(error).split())
            (out / SUMMARY).write_text(json.dumps(summary, indent=2))
    except FolderError as e:
        raise RephraseError(str(e)) from None
    if typo:
        raise RephraseError(f"{typo}; nothing was generated: rerun with the corrected --where and --fresh")
    if error is not None:
        raise RephraseError(f"{summary['error']} ({r.tally.kept} documents kept this run, in {out}; rerun to resume)")
    return summary


def _cost(prompt_tokens: int, completion_tokens: int, price) -> float | None:
    return round(prompt_tokens / 1e6 * price[0] + completion_tokens / 1e6 * price[1], 6) if price else None


def _summary(out: Path, r: _Rephraser, ledger: Ledger, prompt, backend, gen_s: float, wall: float, price) -> dict:
    t = r.tally
    tokens = t.prompt_tokens + t.completion_tokens
    pp, pc = ledger.pending_part_tokens()
    totals = ledger.totals
    folder_pt, folder_ct = totals.prompt_tokens + pp, totals.completion_tokens + pc
    summary = {
        "output": str(out), "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "where": r.where or None,
        "this_run": {
            **{k: v for k, v in r.inputs.items() if k != "skipped"}, "skipped_input": dict(sorted(r.inputs["skipped"].items())),
            "kept": t.kept, "dropped": sum(t.dropped.values()), "dropped_by_reason": dict(sorted(t.dropped.items())),
            "failed": sum(t.failed.values()), "failed_by_reason": dict(sorted(t.failed.items())),
            "generations": t.generations, "pieces_reused": r.resumed_pieces, "retries": t.retries,
            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens, "generations_uncounted": t.uncounted,
            "wall_s": round(wall, 3), "generate_s": round(gen_s, 3),
            "tokens_per_s": round(tokens / gen_s, 1) if gen_s > 0 and tokens else None,
            "completion_tokens_per_s": round(t.completion_tokens / gen_s, 1) if gen_s > 0 and t.completion_tokens else None,
            "estimated_cost": _cost(t.prompt_tokens, t.completion_tokens, price)},
        "folder": {"documents": totals.documents, "dropped": sum(totals.dropped.values()),
                   "dropped_by_reason": dict(sorted(totals.dropped.items())), "unfinished_documents": len(ledger.parts),
                   "prompt_tokens": folder_pt, "completion_tokens": folder_ct, "torn_lines_cut": ledger.torn_lines_cut,
                   "estimated_cost": _cost(folder_pt, folder_ct, price)},
    }
    if price:
        summary["price_per_mtok"] = {"input": price[0], "output": price[1]}
    return summary
