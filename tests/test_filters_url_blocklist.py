"""The URL filter's UT1 blocklist cache: built once per machine, in the parent with a visible line before
any task starts, never by two processes at once, and answering exactly as datatrove's parse would."""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import random
import string
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from datatrove.pipeline.filters.url_filter import get_list

from cuvee.filters.domain_set import SortedDomainSet, datatrove_blocklist

REPO = Path(__file__).resolve().parents[1]
WARC = REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz"


def _domains(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [("".join(rng.choice(string.ascii_lowercase + "-0") for _ in range(rng.randint(1, 18)))
             + rng.choice([".com", ".de", ".co.uk"])) for _ in range(n)]


def _tarball(tmp: Path, domains: list[str], urls: list[str]) -> Path:
    path = tmp / "blacklists.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in (("urls", urls), ("domains", domains)):
            data = "\n".join(lines).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_sorted_list_fast_path_and_dirty_list_answer_like_datatrove(tmp_path):
    doms = _domains(3000)
    probes = doms + [d + "x" for d in doms[:500]] + ["", "#c", " a.com", "a.com "]
    for name, text in (("clean", "\n".join(sorted(set(doms)))),  # the shape of datatrove's snapshot
                       ("dirty", "# c\n" + "\n".join(f" {d}\t" if i % 7 == 0 else d for i, d in enumerate(doms))
                        + "\n\n\r\nb\xfccher.de\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        reference = get_list(str(tmp_path), name, set(), do_normalize=False)
        ours = SortedDomainSet.from_list_bytes((tmp_path / name).read_bytes())
        assert set(ours) == reference and len(ours) == len(reference), name
        assert [p for p in probes if (p in ours) != (p in reference)] == [], name


def _build(args):
    tarball, cache, barrier = args
    lines: list[str] = []
    barrier.wait()
    ds, urls_dir = datatrove_blocklist(Path(tarball), Path(cache), announce=lines.append)
    return sum("building" in ln for ln in lines), len(ds), (urls_dir / "urls").read_text()


def test_built_once_when_processes_start_together(tmp_path):
    doms = sorted(set(_domains(300_000)))
    tarball = _tarball(tmp_path, doms, ["bad.example/path", "x.org/y"])
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            results = pool.map(_build, [(str(tarball), str(tmp_path / "cache"), barrier)] * 4)
    assert sum(built for built, _, _ in results) == 1, results  # one builder; the others waited and loaded it
    assert {n for _, n, _ in results} == {len(doms)}
    assert all(urls == "bad.example/path\nx.org/y" for _, _, urls in results)
    again: list[str] = []
    datatrove_blocklist(tarball, tmp_path / "cache", announce=again.append)
    assert again == []  # cached: nothing to build, nothing said


def test_a_run_builds_it_in_the_parent_with_a_visible_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "u", "input": {"paths": [str(WARC)]},
                                      "stages": [{"stage": "url_filter"}], "output": {"format": "jsonl"},
                                      "executor": {"kind": "local", "tasks": 2}}))
    env = {**os.environ, "CUVEE_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-m", "cuvee.cli", "run", str(recipe), "--run-dir", "run"],
                           capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    err = first.stderr.splitlines()
    building = [i for i, ln in enumerate(err) if ln.startswith("url_filter: building the URL blocklist cache")]
    phases = [i for i, ln in enumerate(err) if ln.startswith("seg00")]
    assert len(building) == 1 and phases and building[0] < phases[0], first.stderr  # before the tasks' lines
    task_logs = "".join(f.read_text() for f in (tmp_path / "run" / "logs").rglob("task_*.log"))
    assert "cached" not in task_logs and "building" not in task_logs  # no task built it
    second = subprocess.run([sys.executable, "-m", "cuvee.cli", "validate", str(recipe)], capture_output=True,
                            text=True, check=False, cwd=tmp_path, env=env, timeout=600)
    assert second.returncode == 0 and "building" not in second.stderr, second.stderr
