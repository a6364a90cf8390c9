"""One retry helper for every caller that talks to a network: bounded attempts, exponential backoff, jitter.

Callers differ only in which errors a later attempt can heal (a cut connection yes, a 404 no) and in
whether the server names its own delay (HTTP ``Retry-After``); both are parameters, so remote archive
reads (``remote.py``) and LLM requests (``cuvee/llm``) share this one loop.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

Classifier = Callable[[BaseException], bool]
DelayHint = Callable[[BaseException], "float | None"]


def _any_exception(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


class RetryPolicy:
    """``retries`` further attempts after the first, sleeping ``backoff_s * 2**k`` (+ up to 25 % jitter).

    ``transient(exc)`` says whether an error is worth another attempt (default: any ``Exception``);
    ``server_delay(exc)`` may return the delay the server asked for (capped by ``max_sleep_s``), which
    then replaces the backoff for that attempt.
    """

    def __init__(self, retries: int = 5, backoff_s: float = 1.0, max_sleep_s: float = 60.0,
                 transient: Classifier | None = None, server_delay: DelayHint | None = None):
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_sleep_s = max_sleep_s
        self.transient = transient or _any_exception
        self.server_delay = server_delay

    def delay(self, attempt: int, exc: BaseException | None = None) -> float:
        """Seconds to sleep after failed attempt ``attempt`` (0-based)."""
        hint = self.server_delay(exc) if (self.server_delay and exc is not None) else None
        if hint is not None:
            return min(max(float(hint), 0.0), self.max_sleep_s)
        return min(self.max_sleep_s, self.backoff_s * (2 ** attempt)) * (1 + 0.25 * random.random())

    def sleep(self, attempt: int, exc: BaseException | None = None) -> None:
        time.sleep(self.delay(attempt, exc))

    def call(self, fn: Callable[[], Any], on_retry: Callable[[BaseException], None] | None = None) -> Any:
        """``fn()``, retried on transient errors; the last error is raised when attempts run out."""
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as e:  # classified by self.transient
                if attempt >= self.retries or not self.transient(e):
                    raise
                if on_retry:
                    on_retry(e)
                self.sleep(attempt, e)
        raise AssertionError("unreachable")
