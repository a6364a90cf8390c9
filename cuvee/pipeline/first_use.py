"""Work a machine does once (a cache to build, compiled kernels to write), done before a run's tasks start and
said once on the console, in its own style: ``gopher_repetition: compiling its numba kernels, once per machine
... 6.9 s``.

Why: on a new machine each task of the first run compiled the same numba kernels at the same time, silently
(one stage took 31 s instead of 3 s), and the URL blocklist build leaked a log line with machine paths. A
stage's builder declares such work with :func:`before_run`; ``cuvee run`` calls :func:`prepare_machine` in the
parent just before the tasks start (so ``cuvee validate`` never waits for it), where work already done costs
one cheap check (``needed``), and the tasks then only load what was made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cuvee.pipeline.console import timed


@dataclass(frozen=True)
class FirstUse:
    stage: str  # the stage the work is for, as the console names it
    what: str  # "compiling its numba kernels"
    needed: Callable[[], bool]  # cheap: whether this machine still has to do it
    do: Callable[[], object]


_declared: dict[tuple[str, str], FirstUse] = {}


def before_run(stage: str, what: str, needed: Callable[[], bool], do: Callable[[], object]) -> None:
    """Declare machine-level work for a stage (called by its builder; the same work declared twice counts once)."""
    _declared.setdefault((stage, what), FirstUse(stage, what, needed, do))


def prepare_machine(stream=None) -> float:
    """Do the declared work this machine still needs, each saying what and how long on one line; returns the
    seconds spent (0 when everything was already there)."""
    spent = 0.0
    while _declared:
        item = _declared.pop(next(iter(_declared)))  # in the order the stages declared them
        if item.needed():
            spent += timed(f"{item.stage}: {item.what}, once per machine", item.do, stream)
    return spent


def kernels_compiled(*kernels) -> bool:
    """Whether numba's on-disk cache holds each kernel (numba dispatchers made with ``cache=True``) for its current
    source: an index read, nothing loaded or compiled. True when numba's cache cannot be asked, so a numba
    without this layout only loses the early notice."""
    try:
        return all(k._cache._cache_file._load_index() for k in kernels)
    except Exception:  # noqa: BLE001 - numba's cache layout is not public; unknown means "say nothing"
        return True


def kernels_before_run(stage: str, kernels, warm_up: Callable[[], object]) -> None:
    """Declare a stage's numba kernels: compiled by ``warm_up`` before the run when numba's cache lacks them."""
    before_run(stage, "compiling its numba kernels", lambda: not kernels_compiled(*kernels), warm_up)
