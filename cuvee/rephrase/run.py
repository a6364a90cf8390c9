"""``cuvee rephrase``: rewrite a run's documents with an LLM into a new folder the mixer reads as a source.

The Nemotron-CC recipe (Su et al. 2024) gets more unique tokens by rewriting documents: low-quality ones in
Wikipedia style, high-quality ones into question/answer pairs, distilled passages, extracted knowledge or
knowledge lists (prompts in ``cuvee/assets/prompts/rephrase_*.txt``, written by cuvee from the papers'
descriptions). Documents are cut into pieces of at most ``max_input_tokens`` tokens (``chunks.py``), each
piece is rewritten by a :mod:`cuvee.llm` backend (an OpenAI-compatible endpoint with K requests in flight,
retries, deadlines and size caps, or a local causal LM in batches) through the one LLM job driver, the pieces
are checked (``checks.py``) and joined. The output folder is claimed, locked and bound to its plan (inputs'
content, prompt hash, model, generation settings, ``where``): a rerun with anything changed is refused before
any request; a rerun with the same plan resumes, asking only for pieces no file records (``records.py``).
``where`` (the mixer's conditions, :mod:`cuvee.mixer.where`) limits the rewrites to the documents whose metadata
matches, e.g. only the low-quality buckets, so the generation budget is not spent on documents the mix leaves
out; the others are counted as ``skipped_by_where``. A ``where`` that selects no document is refused, as a mix
source left empty by its ``where`` is.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuvee.kernel.errors import UserError
from cuvee.llm.backend import Backend, Completion
from cuvee.llm.driver import Tally, cost, drive
from cuvee.llm.inputs import unusable
from cuvee.mixer.where import failed_key, missing_keys
from cuvee.rephrase.checks import Checks
from cuvee.rephrase.chunks import TokenCounter, join_rewrites, split_document
from cuvee.rephrase.records import SUMMARY, Records, RephraseError


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


@dataclass
class _Job:
    """One source document in progress: its pieces and the answers accepted so far."""

    doc: object
    pieces: list[str]
    answers: dict[int, dict] = field(default_factory=dict)
    closed: bool = False


class _Rephraser:
    """One pass over the inputs into one folder's records; built per call of :func:`rephrase`."""

    def __init__(self, backend: Backend, prompt, settings: Settings, counter: TokenCounter | None, records: Records,
                 where: dict | None = None):
        self.backend, self.prompt, self.settings, self.counter, self.records = backend, prompt, settings, counter, records
        self.where = where or {}
        self.instructions = prompt.text.replace("{text}", " ")
        self.provenance = {"rephrase_prompt": prompt.name, "rephrase_prompt_sha256": prompt.sha256,
                           "rephrase_model": backend.name, "rephrase_api": backend.api,
                           "rephrase_generation": settings.generation()}
        self.tally = Tally("rephrase")
        self.kept = 0
        self.dropped: dict[str, int] = {}
        self.inputs: dict = {"documents_read": 0, "already_done": 0, "remaining": 0, "skipped_by_where": 0, "skipped": {}}
        self.where_failed: dict[str, int] = {}  # documents left out, by the first where key they fail
        self.meta_keys: set[str] = set()
        self.resumed_pieces = 0

    def jobs(self, docs, limit: int | None):
        """Source documents still to do, in input order; everything else is counted."""
        seen: set[str] = set()
        started = 0
        for doc in docs:
            self.inputs["documents_read"] += 1
            skip = "duplicate_id" if doc.id in seen else unusable(doc)
            seen.add(doc.id)
            if skip:
                self.inputs["skipped"][skip] = self.inputs["skipped"].get(skip, 0) + 1
            elif self.where and not self._selected(doc.metadata or {}):
                self.inputs["skipped_by_where"] += 1
            elif doc.id in self.records.done:
                self.inputs["already_done"] += 1
            elif limit is not None and started >= limit:
                self.inputs["remaining"] += 1
            else:
                started += 1
                job = _Job(doc, split_document(doc.text, self.settings.max_input_tokens, self.counter))
                for i, rec in self.records.parts.get(doc.id, {}).items():
                    if i < len(job.pieces):
                        job.answers[i] = rec
                self.resumed_pieces += len(job.answers)
                yield job

    def _selected(self, meta: dict) -> bool:
        self.meta_keys.update(meta)
        key = failed_key(self.where, meta)
        if key is not None:
            self.where_failed[key] = self.where_failed.get(key, 0) + 1
        return key is None

    def selected_nothing(self) -> str | None:
        """When ``where`` left out every document it saw: why, in one line (the mixer's rule for an empty source)."""
        if not self.where or not self.inputs["skipped_by_where"]:
            return None
        if self.inputs["documents_read"] > self.inputs["skipped_by_where"] + sum(self.inputs["skipped"].values()):
            return None
        failed = ", ".join(f"{n} failed {k!r}" for k, n in sorted(self.where_failed.items()))
        hint = missing_keys(self.where, self.meta_keys)
        return (f"--where: no document matched ({failed})" + (f"; {hint}" if hint else "")
                + f"; metadata keys seen: {', '.join(sorted(self.meta_keys)[:20]) or 'none'}")

    def units(self, jobs):
        for job in jobs:
            missing = [i for i in range(len(job.pieces)) if i not in job.answers]
            if not missing:  # every piece was on disk: finish it without asking for anything
                self._finish(job)
            for i in missing:
                yield job, i

    def accept(self, unit: tuple[_Job, int], c: Completion) -> None:
        job, i = unit
        rec = {"id": job.doc.id, "piece": i, "pieces": len(job.pieces), "text": c.text, "finish_reason": c.finish_reason,
               "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        if job.closed:  # an earlier piece failed a check: the document is already dropped
            return
        reason = c.problem or self.settings.checks.failure(c.text, job.pieces[i], self.instructions, c.finish_reason,
                                                           c.completion_tokens, self.settings.max_new_tokens)
        if reason:
            job.closed = True
            spent = [*job.answers.values(), rec]
            self.records.reject({"id": job.doc.id, "reason": reason, "piece": i, "pieces": len(job.pieces),
                                 "sample": c.text[:200], "finish_reason": c.finish_reason,
                                 "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in spent),
                                 "completion_tokens": sum(r["completion_tokens"] or 0 for r in spent),
                                 "prompt_sha256": self.prompt.sha256, "model": self.backend.name})
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            return
        job.answers[i] = rec
        if len(job.answers) < len(job.pieces):
            self.records.part(rec)
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
        self.records.document({"id": f"{job.doc.id}#{self.prompt.name}", "text": join_rewrites([a["text"] for a in answers]),
                               "metadata": meta})
        self.kept += 1

    def drive(self, units) -> Exception | None:
        return drive(self.backend, units, lambda u: self.prompt.fill(u[0].pieces[u[1]]), self.accept, self.tally,
                     describe=lambda u: f"document {u[0].doc.id} piece {u[1]}")


def binding(files: list[str], prompt, backend_name: str, api: str, settings: Settings, tokenizer: str | None,
            where: dict | None = None) -> dict:
    """The plan a folder is bound to; ``where`` only when given, so folders started without one still resume."""
    plan = {"inputs": [str(Path(f).resolve()) for f in files],  # their stamps: the kernel's changed-input check
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


def rephrase(inputs: list[str], out: str | Path, backend: Backend, prompt, settings: Settings, *,
             tokenizer=None, tokenizer_name: str | None = None, limit: int | None = None, fresh: bool = False,
             price_per_mtok: tuple[float, float] | None = None, where: dict | None = None) -> dict:
    """Rewrite the documents of ``inputs`` (those matching ``where``, if given) into ``out``; returns the summary
    (also ``out/rephrase_summary.json``)."""
    from cuvee.kernel.atomic import write_json
    from cuvee.kernel.stamps import stamps
    from cuvee.kernel.workdir import Workdir, owned
    from cuvee.llm.inputs import resolve_inputs
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
    plan = binding(files, prompt, backend.name, backend.api, settings, tokenizer_name, where)
    with owned(out, Workdir("rephrase", "rephrase folder"), plan, fresh=fresh,
               inputs=stamps(str(Path(f).resolve()) for f in files)):
        records = Records(out)
        try:
            r = _Rephraser(backend, prompt, settings, counter, records, where)
            t_gen = time.perf_counter()
            error = r.drive(r.units(r.jobs(iter_documents(files), limit)))
            gen_s = time.perf_counter() - t_gen
        finally:
            records.close()
        summary = _summary(out, r, records, prompt, backend, gen_s, time.perf_counter() - t0, price_per_mtok)
        empty = r.selected_nothing() if error is None else None
        if error is not None or empty:
            summary["error"] = empty or " ".join(str(error).split())
        write_json(out / SUMMARY, summary)
    if empty:
        raise RephraseError(f"{empty}; nothing was generated: rerun with the corrected --where and --fresh")
    if error is not None:
        msg = summary["error"] if isinstance(error, UserError) else f"{type(error).__name__}: {summary['error']}"
        raise RephraseError(f"{msg} ({r.kept} documents kept this run, in {out}; rerun to resume)")
    return summary


def _summary(out: Path, r: _Rephraser, records: Records, prompt, backend, gen_s: float, wall: float, price) -> dict:
    t = r.tally
    pp, pc = records.pending_part_tokens()
    totals = records.totals
    folder_pt, folder_ct = totals.prompt_tokens + pp, totals.completion_tokens + pc
    summary = {
        "output": str(out), "model": backend.name, "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "where": r.where or None,
        "this_run": {
            **{k: v for k, v in r.inputs.items() if k != "skipped"}, "skipped_input": dict(sorted(r.inputs["skipped"].items())),
            "kept": r.kept, "dropped": sum(r.dropped.values()), "dropped_by_reason": dict(sorted(r.dropped.items())),
            "failed": sum(t.failed.values()), "failed_by_reason": dict(sorted(t.failed.items())),
            "generations": t.generations, "pieces_reused": r.resumed_pieces, "retries": t.retries,
            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens, "generations_uncounted": t.uncounted,
            "wall_s": round(wall, 3), "generate_s": round(gen_s, 3), **t.rates(gen_s),
            "estimated_cost": cost(t.prompt_tokens, t.completion_tokens, price)},
        "folder": {"documents": totals.documents, "dropped": sum(totals.dropped.values()),
                   "dropped_by_reason": dict(sorted(totals.dropped.items())), "unfinished_documents": len(records.parts),
                   "prompt_tokens": folder_pt, "completion_tokens": folder_ct, "torn_lines_cut": records.torn_lines_cut,
                   "estimated_cost": cost(folder_pt, folder_ct, price)},
    }
    if price:
        summary["price_per_mtok"] = {"input": price[0], "output": price[1]}
    return summary
