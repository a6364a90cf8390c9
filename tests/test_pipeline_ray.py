"""The same recipe through datatrove's Ray executor on a local Ray instance: the same output, and a console that
reads like the local executor's (its phase lines, no log-format lines; Ray's start-up lines go to the logs)."""

import re
from pathlib import Path

import pytest

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe
from test_pipeline_core import make_jsonl

ray = pytest.importorskip("ray")

LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\| (DEBUG|INFO|WARNING)\b|\b(INFO|WARNING) \S+\.py:\d+ --")


def _phases(console: str) -> list[str]:
    """The phase lines without their times and rates: what the run did, in order."""
    return [re.sub(r", [\d,.]+ docs/s|, [\d.]+ s$", "", ln) for ln in console.splitlines() if re.match(r"seg\d\d ", ln)]


def test_ray_run_matches_local(tmp_path, capfd):
    ids = make_jsonl(tmp_path / "in", n_files=2, per_file=30)
    base = {"name": "ray-t", "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": [{"stage": "length", "min_chars": 60}, {"stage": "sample", "rate": 0.7}]}
    local = run_recipe({**base, "run_dir": str(tmp_path / "local"), "executor": {"kind": "local", "tasks": 2, "workers": 1}},
                       progress=True)
    local_console = capfd.readouterr().err
    try:
        stats = run_recipe({**base, "run_dir": str(tmp_path / "ray"),
                            "executor": {"kind": "ray", "tasks": 2, "num_cpus": 2, "mem_per_cpu_gb": 0.5}},
                           progress=True)
    finally:
        ray.shutdown()
    ray_console = capfd.readouterr().err
    assert stats["accounting"]["balanced"] and stats["accounting"]["records_read"] == len(ids)
    assert stats["accounting"]["by_reason"] == local["accounting"]["by_reason"]
    got = sorted(d.id for d in iter_documents(Path(tmp_path / "ray" / "output")))
    want = sorted(d.id for d in iter_documents(Path(tmp_path / "local" / "output")))
    assert got == want and len(got) == stats["accounting"]["kept"] > 0
    # the console: the local run's phase lines, no log-format line (Ray's token notice, datatrove's "Logging
    # directory points to a local filesystem" once per job); one line says what the Ray start-up takes
    assert _phases(ray_console) == _phases(local_console) != [], (ray_console, local_console)
    assert [ln for ln in ray_console.splitlines() if LOG_LINE.search(ln)] == [], ray_console
    assert [ln for ln in ray_console.splitlines() if ln.startswith("ray: ")] == \
        [ln for ln in ray_console.splitlines() if re.fullmatch(r"ray: starting a local Ray instance \.\.\. [\d.]+ s", ln)]
    assert (tmp_path / "ray" / "logs" / "ray.log").read_text().strip(), "Ray's start-up lines go to the run's logs"
