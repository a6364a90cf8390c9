"""A remote input that stalls gives up after ``input.timeout_s`` per attempt (not fsspec's ~300 s), is retried, and
is then counted as failed. A real HTTP server on 127.0.0.1 sends the first bytes of a range and then stalls; it
records whether the client or the server ended each stalled request."""

from __future__ import annotations

import gzip
import json
import select
import socket
import threading

import fsspec
import pytest

from cuvee.pipeline.plan import binding_recipe
from cuvee.pipeline.recipe import RecipeError, parse_recipe
from cuvee.pipeline.remote import timeout_options
from cuvee.pipeline.runner import InputsFailed, run_recipe

BODY = b"WARC/1.0\r\n" + b"x" * 200_000
SERVER_PATIENCE_S = 90  # the server's own limit on a stall, far above the client's timeout


class StallingServer:
    """HEAD answers size and range support; each GET sends its headers and 10 body bytes, then stalls."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self._gets: list[str] = []  # per GET: who ended the stall, "client" or "server"
        self._ended = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        f = conn.makefile("rb")
        try:
            while True:
                request = f.readline()
                if not request:
                    return
                while f.readline() not in (b"\r\n", b""):
                    pass
                if request.startswith(b"HEAD"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nAccept-Ranges: bytes\r\n\r\n" % len(BODY))
                    continue
                n = len(BODY)
                conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\n"
                             b"Content-Range: bytes 0-%d/%d\r\n\r\n" % (n, n - 1, n) + BODY[:10])
                readable, _, _ = select.select([conn], [], [], SERVER_PATIENCE_S)
                with self._ended:
                    self._gets.append("client" if readable else "server")  # readable: the client closed it
                    self._ended.notify_all()
                return
        except OSError:
            return
        finally:
            conn.close()

    def ended(self, n: int) -> list[str]:
        """Who ended each stalled GET, once ``n`` have ended (the server thread records it after the client left)."""
        with self._ended:
            self._ended.wait_for(lambda: len(self._gets) >= n, timeout=SERVER_PATIENCE_S + 10)
            return list(self._gets)

    def close(self):
        self.sock.close()


@pytest.fixture
def stalling_server():
    server = StallingServer()
    try:
        yield server
    finally:
        server.close()


def test_a_stalled_remote_file_times_out_per_attempt_and_is_counted_failed(tmp_path, stalling_server):
    listing = tmp_path / "warc.paths.gz"
    listing.write_bytes(gzip.compress(b"crawl-data/CC-MAIN-2024-22/segments/1/warc/stall.warc.gz\n"))
    cc = {"snapshot": "CC-MAIN-2024-22", "files": 1, "paths_file": str(listing), "base_url": stalling_server.url}
    recipe = {"name": "stall", "run_dir": str(tmp_path / "run"), "stages": [], "output": {"format": "jsonl"},
              "input": {"common_crawl": cc, "timeout_s": 1, "retries": 2, "backoff_s": 0},
              "executor": {"kind": "local", "tasks": 1}}
    with pytest.raises(InputsFailed, match=r"all 1 input file\(s\) failed"):
        run_recipe(recipe)
    assert stalling_server.ended(3) == ["client"] * 3  # the first attempt and 2 retries, each given up by the client
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["accounting"]["inputs"]["files_failed"] == 1
    assert stats["stages"][0]["counters"]["read_retries"] == 2


def test_the_timeout_reaches_fsspecs_http_client(stalling_server):
    fs = fsspec.filesystem("http", skip_instance_cache=True, **timeout_options(stalling_server.url, 1))
    with pytest.raises(TimeoutError), fs.open(stalling_server.url + "x.warc.gz", "rb") as f:
        f.read(1000)
    assert stalling_server.ended(1) == ["client"]


def test_the_timeout_reaches_botocore_for_s3():
    opts = timeout_options("s3://bucket/key", 7, {"anon": True, "client_kwargs": {"region_name": "us-east-1"},
                                                 "config_kwargs": {"read_timeout": 9}})
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **opts)
    fs.connect()
    config = fs.s3.meta.config
    assert config.connect_timeout == 7 and config.read_timeout == 9  # a value the user set wins


def _input_recipe(**inp) -> dict:
    return {"name": "t", "input": {"paths": ["data/sample"], **inp}, "stages": []}


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e9, "soon"])
def test_timeout_is_validated(bad):
    with pytest.raises(RecipeError, match="timeout_s"):
        parse_recipe(_input_recipe(timeout_s=bad))


def test_timeout_has_a_default_and_does_not_bind_the_run_folder():
    recipe = parse_recipe(_input_recipe())
    assert recipe.input.timeout_s == 60
    assert "timeout_s" not in binding_recipe(recipe)["input"]
    assert binding_recipe(parse_recipe(_input_recipe(timeout_s=5))) == binding_recipe(recipe)
