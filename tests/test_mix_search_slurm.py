"""`cuvee mix search --slurm`: the proxies as ONE job array on a real one-node SLURM cluster (started by the
test) give the local search's records and pick; a rerun while the array is queued submits nothing; a task
that fails is named, with its log, in one line."""

from __future__ import annotations

import collections
import json
import subprocess
import time

import pytest
import yaml

from test_mix_search import _data, _yaml
from test_mix_search_workers import cuvee, finish, pick_text, records, stripped, tiny, trained

pytestmark = [pytest.mark.slurm]

SLURM = ["--slurm", "--partition", "debug", "--time", "00:10:00", "--mem-per-cpu-gb", "1"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The tiny search without the proof (one array per search), run here in this process."""
    from cuvee.mixsearch.search import run_search

    d = tmp_path_factory.mktemp("slurm_search")
    cfg = _yaml(d / "search.yaml", {**tiny(_data(d)), "proof": {"enabled": False}})
    out = d / "local"
    report = run_search(cfg, out, say=lambda m: None)
    return {"dir": d, "cfg": cfg, "out": out, "report": stripped(report, out), "records": records(out)}


def _partition(state: str) -> None:
    """DOWN keeps submitted tasks queued (deterministically), UP lets them run."""
    subprocess.run(["scontrol", "update", "PartitionName=debug", f"State={state}"], check=True, timeout=60)


def _queued() -> set[str]:
    r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True, timeout=60)
    return {line.split("_")[0] for line in r.stdout.split()}


def _arrays(out) -> list[dict]:
    return json.loads((out / "slurm" / "jobs.json").read_text())["arrays"]


def test_proxies_as_a_slurm_array_give_the_local_pick_and_a_rerun_while_queued_submits_nothing(cluster, local):
    out = local["dir"] / "slurm"
    cfg = str(local["cfg"])
    _partition("DOWN")
    try:
        code, text, err = finish(cuvee(cfg, "--out", str(out), *SLURM, "--no-wait"))
        assert code == 0 and "submitted SLURM array" in text and "rerun the same command" in text, err[-2000:]
        [array] = _arrays(out)
        assert array["phase"] == "proxies" and array["indices"] == [0, 1, 2, 3, 4]
        assert "--index \"$SLURM_ARRAY_TASK_ID\"" in (out / "slurm" / "proxies.sbatch").read_text()
        code, _, err = finish(cuvee(cfg, "--out", str(out), *SLURM, "--no-wait"))  # still queued: refused
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 1 and len(lines) == 1 and "still queued or running" in lines[0], err
        assert array["job_id"] in lines[0] and "nothing submitted again" in lines[0]
        assert _queued() == {array["job_id"]} and len(_arrays(out)) == 1
    finally:
        _partition("UP")
    code, text, err = finish(cuvee(cfg, "--out", str(out), *SLURM))  # waits for the queued array, then goes on
    assert code == 0, err[-2000:]
    assert "still queued or running: waiting for them" in text
    assert len(_arrays(out)) == 1  # the rerun submitted nothing: every proxy came from the first array
    assert collections.Counter(e["job"] for e in trained(out)) == {f"p{i:03d}": 1 for i in range(5)}
    logs = sorted(p.name for p in (out / "slurm" / "logs").iterdir())
    assert logs == [f"proxies-{array['job_id']}_{i}.out" for i in range(5)]
    assert records(out) == local["records"]
    assert stripped(json.loads((out / "report.json").read_text()), out) == local["report"]
    assert pick_text(out) == pick_text(local["out"])


def test_a_failed_array_task_is_one_line_naming_its_log(cluster, local):
    """The search file changes while the array is queued: each task re-checks the folder's plan and refuses."""
    path = _yaml(local["dir"] / "changing.yaml", yaml.safe_load(local["cfg"].read_text()))
    out = local["dir"] / "failing"
    _partition("DOWN")
    try:
        proc = cuvee(str(path), "--out", str(out), *SLURM)
        deadline = time.monotonic() + 300
        while not (out / "slurm" / "jobs.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        _yaml(path, {**yaml.safe_load(path.read_text()), "mixtures": 6})
    finally:
        _partition("UP")
    code, _, err = finish(proc)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    [array] = _arrays(out)
    assert code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), err
    assert f"SLURM task {array['job_id']}_0" in lines[0] and f"proxies-{array['job_id']}_0.out" in lines[0], lines
    assert "different plan" in lines[0] and "5 of 5 proxies job(s) left no record" in lines[0], lines
    assert trained(out) == []
