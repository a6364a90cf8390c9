"""What the search says while it works: one line when a phase starts, one when it ends (with its time), and
for loops a line per step or per few seconds, whichever is rarer, with the time left at the rate so far.

Every line goes through the search's ``say`` (the CLI prints it; ``--json`` and the tests pass a silent one),
so there is one channel and no second console; durations are written as ``cuvee run``'s phase lines write
them (cuvee/pipeline/console.py).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from cuvee.pipeline.console import _seconds as seconds

EVERY_S = 10.0  # a loop reports at most this often


class Ticker:
    """Progress through ``total`` steps of ``what``: :meth:`step` after each one (or :meth:`update` with the
    count done) says how far it is, at most every ``every_s`` seconds (never once all are done: the phase's end
    line follows)."""

    def __init__(self, say, what: str, total: int, every_s: float = EVERY_S, clock=time.perf_counter):
        self.say, self.what, self.total, self.every_s, self.clock = say, what, total, every_s, clock
        self.t0 = self.last = clock()
        self.done = 0

    def step(self, detail: str = "") -> None:
        self.update(self.done + 1, detail)

    def update(self, done: int, detail: str = "") -> None:
        self.done = done
        now = self.clock()
        if self.done >= self.total or now - self.last < self.every_s:
            return
        self.last = now
        took = now - self.t0
        left = f", ~{seconds(took / self.done * (self.total - self.done))} left" if self.done else ""
        self.say(f"[search] {self.what}: {self.done}/{self.total}{', ' + detail if detail else ''}, "
                 f"{seconds(took)}{left}")


@contextmanager
def timed(say, what: str, total: int | None = None, every_s: float = EVERY_S, clock=time.perf_counter,
          label: str | None = None):
    """``[search] <what> ...`` now and ``[search] <what>: done in <time>`` at the end; with ``total``, the block
    gets a :class:`Ticker` for its loop, whose lines start with ``label`` (default: ``what``)."""
    say(f"[search] {what} ...")
    t0 = clock()
    ticker = Ticker(say, label or what, total, every_s, clock) if total else None
    yield ticker
    say(f"[search] {what}: done in {seconds(clock() - t0)}")
