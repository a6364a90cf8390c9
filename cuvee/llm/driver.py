"""The one driver of LLM jobs (annotate, rephrase, any later per-record job) and its tally.

A job is a stream of units (a document, a piece of one), a prompt per unit and an ``accept`` that records each
answer (in the job's :class:`cuvee.kernel.ledger.Ledger`). The driver keeps ``backend.concurrency`` calls in
flight, each with up to ``backend.batch_size`` prompts, and hands the answers to ``accept`` in this thread:

* as they arrive (rephrase: a generation is expensive, and a kill loses only the calls in flight), or
* ``ordered``, in the order of the units (annotate: the file is the same bytes at any concurrency and after any
  kill). An answer then waits for the earlier ones; so that one slow call does not stall the others, up to
  :data:`LOOKAHEAD` times ``concurrency`` calls may wait, answered, behind it (a kill loses those too).

An unusable answer (:class:`~cuvee.llm.backend.ResponseError`) is counted under its reason and left for a rerun;
any other error stops new calls, the answers of calls already made are still accepted, and the error is returned
to the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from itertools import islice, takewhile
from typing import TypeVar

from cuvee.llm.backend import Backend, Completion, ResponseError

log = logging.getLogger(__name__)
Unit = TypeVar("Unit")
LOOKAHEAD = 4  # ordered: calls that may wait, answered, behind the oldest one, per call in flight


@dataclass
class Tally:
    """What the model was asked this run: answers, retries, tokens (answers without counts are ``uncounted``)
    and unusable answers by reason."""

    job: str
    generations: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    uncounted: int = 0
    failed: dict = field(default_factory=dict)

    def count(self, c: Completion) -> None:
        self.generations += 1
        self.retries += c.retries
        if c.prompt_tokens is None or c.completion_tokens is None:
            self.uncounted += 1
        else:
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens

    def fail(self, what: str, e: ResponseError) -> None:
        self.failed[e.reason] = self.failed.get(e.reason, 0) + 1
        log.warning("%s: %s not done (%s): %s", self.job, what, e.reason, " ".join(str(e).split())[:300])

    def rates(self, seconds: float) -> dict:
        tokens = self.prompt_tokens + self.completion_tokens
        return {"tokens_per_s": round(tokens / seconds, 1) if seconds > 0 and tokens else None,
                "completion_tokens_per_s": round(self.completion_tokens / seconds, 1)
                if seconds > 0 and self.completion_tokens else None}


def cost(prompt_tokens: int, completion_tokens: int, price: tuple[float, float] | None) -> float | None:
    """Estimated cost at ``price`` = (input, output) per million tokens; None without a price."""
    return round(prompt_tokens / 1e6 * price[0] + completion_tokens / 1e6 * price[1], 6) if price else None


def drive(backend: Backend, units: Iterable[Unit], prompt: Callable[[Unit], str],
          accept: Callable[[Unit, Completion], None], tally: Tally, describe: Callable[[Unit], str] = str,
          ordered: bool = False) -> Exception | None:
    """Ask ``backend`` for every unit and ``accept`` each answer; returns the error that stopped it, if any."""
    units = iter(units)
    k = max(1, backend.concurrency)
    calls: list = []  # (future, units of the call), oldest first
    error: Exception | None = None
    pool = ThreadPoolExecutor(max_workers=k)
    try:
        while True:
            while error is None and len(calls) < (LOOKAHEAD * k if ordered else k) and \
                    sum(not f.done() for f, _ in calls) < k:
                item = list(islice(units, max(1, backend.batch_size)))
                if not item:
                    break
                calls.append((pool.submit(backend.complete_many, [prompt(u) for u in item]), item))
            if not calls:
                return error
            ready = list(takewhile(lambda c: c[0].done(), calls)) if ordered else [c for c in calls if c[0].done()]
            if not ready:
                wait([f for f, _ in calls if not f.done()], return_when=FIRST_COMPLETED)
                continue
            for call in ready:
                calls.remove(call)
                fut, item = call
                try:
                    answers = fut.result()
                except ResponseError as e:  # unusable: counted, left for a rerun
                    for u in item:
                        tally.fail(describe(u), e)
                    continue
                except Exception as e:  # noqa: BLE001 - stop asking, keep the answers of calls already made
                    error = error or e
                    continue
                for u, c in zip(item, answers, strict=True):
                    tally.count(c)
                    accept(u, c)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
