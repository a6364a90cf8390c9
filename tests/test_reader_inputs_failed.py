"""A run whose every input file fails (all unreachable, all corrupt) exits non-zero with one line, and still
writes stats.json; a run where only some fail goes on and exits 0."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cuvee.pipeline.runner import InputsFailed, run_recipe


def _recipe(tmp_path, inp: dict, name: str = "failing") -> dict:
    return {"name": name, "run_dir": str(tmp_path / "run"), "input": inp, "stages": [],
            "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2, "workers": 1}}


def _corrupt_inputs(folder: Path, n: int = 2) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"part{i}.jsonl.gz").write_bytes(b"this is not gzip at all\n" * 10)


def test_every_local_file_corrupt_is_an_error_and_stats_are_written(tmp_path):
    _corrupt_inputs(tmp_path / "in")
    with pytest.raises(InputsFailed, match=r"all 2 input file\(s\) failed to read \(0 records read\)"):
        run_recipe(_recipe(tmp_path, {"paths": [str(tmp_path / "in")], "format": "jsonl"}))
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["accounting"]["inputs"]["files_failed"] == 2 and stats["accounting"]["records_read"] == 0


def test_cli_says_it_in_one_line_and_exits_non_zero(tmp_path):
    _corrupt_inputs(tmp_path / "in")
    (tmp_path / "r.yaml").write_text(json.dumps(_recipe(tmp_path, {"paths": [str(tmp_path / "in")], "format": "jsonl"})))
    r = subprocess.run([sys.executable, "-m", "cuvee.cli", "run", str(tmp_path / "r.yaml")], capture_output=True,
                       text=True, check=False, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert r.returncode != 0
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert "Traceback" not in r.stderr
    assert err[-1].startswith("Error: all 2 input file(s) failed to read"), r.stderr
    assert (tmp_path / "run" / "stats.json").exists()


def test_some_files_failing_still_exits_zero(tmp_path):
    _corrupt_inputs(tmp_path / "in", n=1)
    (tmp_path / "in" / "good.jsonl").write_text('{"id": "a", "text": "a good document"}\n')
    stats = run_recipe(_recipe(tmp_path, {"paths": [str(tmp_path / "in")], "format": "jsonl"}))
    inp = stats["accounting"]["inputs"]
    assert inp["files_failed"] == 1 and inp["files_read"] == 1 and stats["accounting"]["kept"] == 1


@pytest.fixture
def empty_http_server(tmp_path):
    """A real HTTP server on 127.0.0.1 that has none of the listed files (every GET is a 404)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = type("H", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(root), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_every_remote_file_unreachable_is_an_error(tmp_path, empty_http_server):
    listing = tmp_path / "warc.paths.gz"
    names = [f"crawl-data/CC-MAIN-2024-22/segments/1/warc/f{i}.warc.gz" for i in range(3)]
    listing.write_bytes(gzip.compress(("\n".join(names) + "\n").encode()))
    cc = {"snapshot": "CC-MAIN-2024-22", "files": 3, "paths_file": str(listing), "base_url": empty_http_server}
    with pytest.raises(InputsFailed, match=r"all 3 input file\(s\) failed"):
        run_recipe(_recipe(tmp_path, {"common_crawl": cc, "retries": 0}))
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["accounting"]["inputs"]["files_failed"] == 3
