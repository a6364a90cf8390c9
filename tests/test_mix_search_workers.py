"""`cuvee mix search --workers K`: proxies and proof runs in K real worker processes give the records, fits,
pick and report of the sequential search; a worker killed mid-job leaves only its job to the rerun; a second
search on the same folder is refused; a worker refuses a folder whose search file changed."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from test_mix_search import _config, _data, _yaml

REPO = Path(__file__).resolve().parents[1]
TIMINGS = ("wall_s", "cpu_s")


def tiny(files: dict) -> dict:
    """5 proxies of 10 steps and a 2-seed proof: 11 jobs of well under a second each."""
    cfg = _config(files, mixtures=5, proof={"seeds": [0, 1]})
    cfg["proxy"]["tokens"] = 512 * 10
    cfg["targets"][0]["max_docs"] = 30
    return cfg


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def cuvee(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cuvee.cli", "mix", "search", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO, **kw)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def stripped(x, out: Path):
    """A report or record without timings and with the folder's own path taken out."""
    if isinstance(x, dict):
        return {k: stripped(v, out) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [stripped(v, out) for v in x]
    return x.replace(str(out), "OUT") if isinstance(x, str) else x


def records(out: Path) -> dict[str, dict]:
    return {f"{p.parent.name}/{p.name}": stripped(json.loads(p.read_text()), out)
            for sub in ("proxies", "proof") for p in sorted((out / sub).glob("*.json"))}


def trained(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


EXPECTED = {f"p{i:03d}" for i in range(5)} | {f"{a}_seed{s}" for a in ("pick", "natural", "uniform") for s in (0, 1)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The tiny search run sequentially in this process: the reference every placement must reproduce."""
    from cuvee.mixsearch.search import run_search

    d = tmp_path_factory.mktemp("workers")
    cfg = _yaml(d / "search.yaml", tiny(_data(d)))
    out = d / "sequential"
    report = run_search(cfg, out, say=lambda m: None)
    return {"dir": d, "cfg": cfg, "out": out, "report": stripped(report, out), "records": records(out),
            "pick": pick_text(out)}


def pick_text(out: Path) -> tuple[str, str]:
    """The search's one pick file (pick.yaml, or pick.NOT-SUPPORTED.yaml when unsupported): name and text."""
    (path,) = out.glob("pick*.yaml")
    return path.name, path.read_text().replace(str(out), "OUT")


def same_as_sequential(base: dict, out: Path) -> None:
    assert records(out) == base["records"]  # every record's bytes but its timings
    assert stripped(json.loads((out / "report.json").read_text()), out) == base["report"]
    assert pick_text(out) == base["pick"]


def test_two_workers_give_the_sequential_records_pick_and_report(base):
    """Two workers, one per device: each sees only its own (CUDA_VISIBLE_DEVICES)."""
    out = base["dir"] / "two"
    proc = cuvee(str(base["cfg"]), "--out", str(out), "--devices", "3,5")
    code, text, err = finish(proc)
    assert code == 0, err[-2000:]
    assert "proxies: 2 worker process(es) on devices 3,5" in text and "proof: 2 worker process(es)" in text
    name = base["pick"][0]
    assert text.strip().splitlines()[-1] == (  # the CLI's last line says whether the pick is a mix to train
        f"[search] pick supported: ready mix config {out / name} (report.md next to it)" if name == "pick.yaml" else
        f"[search] pick NOT SUPPORTED ({len(base['report']['pick']['not_supported_because'])} reason"
        f"{'s' * (len(base['report']['pick']['not_supported_because']) != 1)} in report.md): written as {out / name} "
        f"for inspection, not as a mix to train")
    for k, device in ((0, 3), (1, 5)):
        assert f"CUDA_VISIBLE_DEVICES={device}, 1 torch thread(s)" in (out / "logs" / f"proxies-w{k}.log").read_text()
    same_as_sequential(base, out)
    events = trained(out)
    assert collections.Counter(e["job"] for e in events) == dict.fromkeys(EXPECTED, 1)
    assert all(not e["by"].startswith(f"{proc.pid}@") for e in events)  # trained by the workers, not the coordinator
    assert (out / "logs" / "proxies-w0.log").exists() and (out / "logs" / "proxies-w1.log").exists()


def _held_job(out: Path) -> tuple[int, str] | None:
    """(pid, job) of a worker holding a job whose record is not written yet: a worker mid-job."""
    for lock in sorted((out / "locks").glob("*.lock")) if (out / "locks").exists() else []:
        text = lock.read_text()
        phase, stem = lock.stem.split("-", 1)
        if text.startswith("pid ") and not (out / phase / f"{stem}.json").exists():
            return int(text.split()[1]), stem
    return None


def test_worker_killed_mid_job_then_rerun_trains_only_the_missing_jobs(base):
    from cuvee.mixsearch.search import run_search

    out = base["dir"] / "killed"
    proc = cuvee(str(base["cfg"]), "--out", str(out), "--workers", "2")
    deadline, killed = time.monotonic() + 300, None
    while killed is None:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline
        held = _held_job(out)
        if held:
            try:
                os.kill(held[0], signal.SIGKILL)
                killed = held[1]
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    code, _, err = finish(proc)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code != 0:  # the other worker had passed the killed job: the search stops and says how to go on
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "rerun the same command" in lines[0], err
        assert "worker" in lines[0] and "exited with code -9" in lines[0], err
    before = collections.Counter(e["job"] for e in trained(out))
    assert set(before.values()) <= {1}
    run_search(base["cfg"], out, say=lambda m: None)  # resumed in this process: placement is not in the plan
    after = collections.Counter(e["job"] for e in trained(out))
    assert after == dict.fromkeys(EXPECTED, 1)  # the rerun trained exactly what had no record
    assert killed in after
    same_as_sequential(base, out)


def test_a_second_search_on_the_same_folder_is_refused_with_one_line(base, capsys):
    """The coordinator holds the folder lock for the whole search: a second `cuvee mix search` on the folder
    (in this process, started while the first trains) stops with one line; the first trains every job once."""
    from cuvee.cli import main

    cfg = {**yaml.safe_load(base["cfg"].read_text())}
    cfg["proxy"]["tokens"] = 512 * 60  # long enough for the second to arrive while the first works
    path = _yaml(base["dir"] / "longer.yaml", cfg)
    out = base["dir"] / "concurrent"
    first = cuvee(str(path), "--out", str(out), "--workers", "1")
    lock = out / ".cuvee.lock"
    deadline = time.monotonic() + 300
    while not (lock.exists() and lock.read_text().startswith("pid ")):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-2000:]
        time.sleep(0.02)
    with pytest.raises(SystemExit) as e:
        main(["mix", "search", str(path), "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert first.poll() is None, "the first search ended before the second started: nothing was tested"
    assert e.value.code == 1 and len(lines) == 1 and "in use by another cuvee process" in lines[0], err
    code, _, err = finish(first)
    assert code == 0, err[-2000:]
    assert collections.Counter(e["job"] for e in trained(out)) == dict.fromkeys(EXPECTED, 1)


def test_a_worker_refuses_a_folder_whose_search_file_changed(base):
    """A SLURM task or worker re-validates the folder's binding before it trains anything."""
    changed = _yaml(base["dir"] / "changed.yaml", {**yaml.safe_load(base["cfg"].read_text()), "mixtures": 6})
    out = base["dir"] / "sequential"
    n = len(trained(out))
    r = subprocess.run([sys.executable, "-m", "cuvee.mixsearch.workers", "--config", str(changed), "--out", str(out),
                        "--phase", "proxies", "--index", "0"], capture_output=True, text=True, env=_env(), cwd=REPO,
                       timeout=600)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr[-2000:]
    assert "different plan" in lines[0] and "mixtures" in lines[0]
    assert len(trained(out)) == n


@pytest.mark.parametrize("args, expect", [
    (["--workers", "0"], "'--workers': 0 is not in the range 1<=x<=1024"),
    (["--devices", "0,x"], "distinct device numbers"),
    (["--devices", "1,1"], "distinct device numbers"),
    (["--slurm", "--workers", "2"], "with --slurm each job is an array task"),
    (["--no-wait"], "--no-wait goes with --slurm"),
    (["--gpus-per-task", "1"], "--gpus-per-task goes with --slurm"),
    (["--slurm", "--partition", "a;b"], "a SLURM partition name"),
    (["--slurm", "--time", "soon"], "a SLURM time limit"),
])
def test_bad_placement_flags_are_one_line_before_any_work(tmp_path, capsys, args, expect):
    from cuvee.cli import main

    cfg = _yaml(tmp_path / "s.yaml", tiny({n: str(tmp_path / f"{n}.jsonl") for n in ("en", "de", "ru", "target")}))
    with pytest.raises(SystemExit) as e:
        main(["mix", "search", str(cfg), "--out", str(tmp_path / "o"), *args])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert e.value.code in (1, 2) and len(lines) == 1 and lines[0].startswith("Error: ") and expect in lines[0], lines
    assert not (tmp_path / "o").exists()
