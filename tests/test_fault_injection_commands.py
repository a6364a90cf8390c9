"""Fault injection, minimal version, for every command that writes (issues #25, #33): one kill -9 mid-work and a
rerun must give the uninterrupted output; a changed input, a concurrent second process and a folder (or file)
cuvee did not create must each be refused in one line, leaving everything as it was. All real: the CLI as
subprocesses, files in tmp_path, cuvee's own OpenAI-compatible server on 127.0.0.1 for annotate and rephrase, tiny
CPU models for train, anneal, export and mix search. One driver for all (benchmarks/_faults/driver.py); the full
version (several kill points, refusals after a finished run too, the second reference run) is
benchmarks/fault_injection_commands.py.

`classify-head` (a transformer head over the shipped MiniLM) is the benchmark's only: ~15 s of CPU per run, and its
folder is the same kernel workdir as every other here; tests/test_kernel_seams.py runs it once for its proof."""

import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from _faults.driver import drive
from fault_injection_commands import COMMANDS, scenario

CI = [c for c in COMMANDS if c != "classify-head"]


def test_every_writing_command_has_a_scenario():
    """Every command tests/test_kernel_seams.py declares a writer is driven here (demo is run, mix and card)."""
    import importlib

    from test_kernel_seams import WRITERS

    driven = {getattr(importlib.import_module(f"_faults.{m}"), c).name.split(" --")[0] for m, c in COMMANDS.values()}
    assert set(WRITERS) - {"demo"} <= driven, set(WRITERS) - {"demo"} - driven


def _drive(command: str, tmp: Path):
    """One command's quick drive (or the exception it raised, re-raised by that command's test)."""
    scn = None
    try:
        scn = scenario(command, tmp, seed=0, quick=True)
        return drive(scn, tmp, points=1, rng=random.Random(0), say=lambda s: None, quick=True)
    except Exception as e:  # noqa: BLE001 - reported by the command's own test
        return e
    finally:
        getattr(scn, "close", lambda: None)()


@pytest.fixture(scope="module")
def driven(tmp_path_factory) -> dict:
    """Every command's drive, two at a time: a drive is subprocesses of one CPU thread each plus a polling parent,
    so on a 2-core machine two drives take about the time of one (three at a time took longer: 144 s against
    116 s). Each drive has its own folders, its own
    loopback server where it needs one and event-based kill points (counts and jobs, never a time), so running
    beside another changes nothing it checks."""
    tmp = tmp_path_factory.mktemp("faults")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CI, pool.map(lambda c: _drive(c, tmp / c.replace(" ", "_")), CI)))


@pytest.mark.slow
@pytest.mark.parametrize("command", CI)
def test_kill_rerun_changed_input_concurrent_and_foreign(command, driven):
    res = driven[command]
    if isinstance(res, Exception):
        raise res
    assert len(res.points) == 1 and "rc" not in res.points[0].kills[0], "the kill did not happen"
    assert not res.failures(), "\n".join(res.failures())
    labels = [r.label for r in res.refusals]
    assert any("second process" in x for x in labels) and any("cuvee did not" in x for x in labels), labels
