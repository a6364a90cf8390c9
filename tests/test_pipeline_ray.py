"""The same recipe through datatrove's Ray executor on a local Ray instance."""

from pathlib import Path

import pytest

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe
from test_pipeline_core import make_jsonl

ray = pytest.importorskip("ray")


def test_ray_run_matches_local(tmp_path):
    ids = make_jsonl(tmp_path / "in", n_files=2, per_file=30)
    base = {"name": "ray-t", "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": [{"stage": "length", "min_chars": 60}, {"stage": "sample", "rate": 0.7}]}
    local = run_recipe({**base, "run_dir": str(tmp_path / "local"), "executor": {"kind": "local", "tasks": 2, "workers": 1}})
    try:
        stats = run_recipe({**base, "run_dir": str(tmp_path / "ray"),
                            "executor": {"kind": "ray", "tasks": 2, "num_cpus": 2, "mem_per_cpu_gb": 0.5}})
    finally:
        ray.shutdown()
    assert stats["accounting"]["balanced"] and stats["accounting"]["records_read"] == len(ids)
    assert stats["accounting"]["by_reason"] == local["accounting"]["by_reason"]
    got = sorted(d.id for d in iter_documents(Path(tmp_path / "ray" / "output")))
    want = sorted(d.id for d in iter_documents(Path(tmp_path / "local" / "output")))
    assert got == want and len(got) == stats["accounting"]["kept"] > 0
