"""Fault injection, minimal version, for every command that writes besides `cuvee run` (issue #25): one kill -9
mid-work and a rerun must give the uninterrupted output; changed input after the kill and a concurrent second
process must each be refused in one line, leaving the folder as it was. All real: the CLI as subprocesses,
files in tmp_path, cuvee's own OpenAI-compatible server on 127.0.0.1 for annotate, a tiny CPU model for train.
The full version (several kill points, refusals after a finished run too) is
benchmarks/fault_injection_commands.py."""

import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from _faults.driver import drive
from fault_injection_commands import scenario


@pytest.mark.slow
@pytest.mark.parametrize("command", ["dedup", "annotate", "mix", "train"])
def test_kill_rerun_changed_input_and_concurrent_process(command, tmp_path):
    scn = scenario(command, tmp_path, seed=0)
    try:
        res = drive(scn, tmp_path, points=1, rng=random.Random(0), say=lambda s: None, quick=True)
    finally:
        getattr(scn, "close", lambda: None)()
    assert len(res.points) == 1 and "rc" not in res.points[0].kills[0], "the kill did not happen"
    assert not res.failures(), "\n".join(res.failures())
