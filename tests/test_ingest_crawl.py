"""Crawl-native input end to end: a snapshot listing, a seeded sample, S3 and HTTP(S) reads with retries.

Real servers on loopback, started and stopped here: moto in server mode for S3, and a small HTTP server
that answers ``Range:`` requests (``http.server``'s own handler does not) and can cut a connection
mid-body or answer 503 to exercise the retries. The snapshot layout is built from the bundled real
Common Crawl records (data/sample), one record group per file.
"""

from __future__ import annotations

import gzip
import io
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from cuvee.kernel.workdir import FolderError
from cuvee.pipeline.crawl import CommonCrawlInput, ListingError, expand, sample_indices
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError, parse_recipe
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
SNAP = "CC-MAIN-2024-22"
SEGMENT = "crawl-data/CC-MAIN-2024-22/segments/1715971057216.39/warc"


# ------------------------------------------------------------------------------------------ layout


def _split_sample(n_files: int) -> list[bytes]:
    """The bundled CC-MAIN-2020-34 sample's records dealt round-robin into ``n_files`` gzipped WARCs."""
    outs = [io.BytesIO() for _ in range(n_files)]
    writers = [WARCWriter(o, gzip=True) for o in outs]
    with open(REPO / "data/sample/CC-MAIN-2020-34-sample.warc.gz", "rb") as f:
        for i, rec in enumerate(ArchiveIterator(f)):
            writers[(i // 3) % n_files].write_record(rec)  # request/response/metadata triples stay together
    return [o.getvalue() for o in outs]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """A local tree in Common Crawl's layout: crawl-data/<snap>/warc.paths.gz + 4 WARC files."""
    root = tmp_path_factory.mktemp("cc")
    names = []
    for i, data in enumerate(_split_sample(4)):
        rel = f"{SEGMENT}/CC-MAIN-20240521-{i:05d}.warc.gz"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        names.append(rel)
    listing = root / f"crawl-data/{SNAP}/warc.paths.gz"
    listing.write_bytes(gzip.compress(("\n".join(names) + "\n").encode(), mtime=0))
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------- HTTP server


class _RangeHandler(BaseHTTPRequestHandler):
    """Static files with Range support; ``faults[name]`` is a list of actions for that file's successive
    ranged GETs: "ok", "cut" (send headers, half the body, drop the connection) or "503"."""

    root: Path
    faults: dict[str, list[str]] = {}
    ranged_gets: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def _file(self) -> Path | None:
        p = (self.root / self.path.lstrip("/").split("?")[0]).resolve()
        return p if p.is_file() and p.is_relative_to(self.root.resolve()) else None

    def do_HEAD(self):
        p = self._file()
        if p is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(p.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self):
        p = self._file()
        if p is None:
            self.send_error(404)
            return
        data = p.read_bytes()
        rng = self.headers.get("Range")
        action = "ok"
        if rng:
            with self.lock:
                k = self.ranged_gets.get(p.name, 0)
                self.ranged_gets[p.name] = k + 1
                plan = self.faults.get(p.name, [])
                action = plan[k] if k < len(plan) else (plan[-1] if plan and plan[-1] == "503!" else "ok")
        if action in ("503", "503!"):
            self.send_error(503)
            return
        status, body = 200, data
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            a = int(m.group(1))
            b = int(m.group(2)) if m.group(2) else len(data) - 1
            b = min(b, len(data) - 1)
            body, status = data[a:b + 1], 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.end_headers()
        if action == "cut":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


@pytest.fixture
def http_server(snapshot):
    handler = type("H", (_RangeHandler,), {"root": snapshot, "faults": {}, "ranged_gets": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------------------- S3 server


@pytest.fixture(scope="module")
def s3_server(snapshot):
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="commoncrawl-mirror")
        for f in snapshot.rglob("*"):
            if f.is_file():
                s3.put_object(Bucket="commoncrawl-mirror", Key=str(f.relative_to(snapshot)), Body=f.read_bytes())
        yield endpoint
    finally:
        server.stop()


S3_OPTS = {"client_kwargs": {"region_name": "us-east-1"}}


@pytest.fixture
def s3_credentials(monkeypatch):
    """moto accepts any credentials; they come from the environment, as a recipe may not hold them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")


# ------------------------------------------------------------------------------------------- runs


def _recipe(tmp_path, name: str, cc: dict | None = None, paths: list[str] | None = None, **input_extra) -> dict:
    inp = {"common_crawl": cc} if cc is not None else {"paths": paths}
    inp.update(input_extra)
    return {
        "name": name,
        "run_dir": str(tmp_path / name),
        "input": inp,
        "stages": [{"stage": "response_check"}],
        "output": {"format": "jsonl"},
        "executor": {"kind": "local", "tasks": 2, "workers": 1},
    }


def _docs(stats) -> dict[str, str]:
    return {d.id: d.text for d in iter_documents(stats["output"]["files"])}


@pytest.fixture(scope="module")
def local_reference(snapshot, tmp_path_factory):
    """The same 4 files read from local disk through ``input.paths``."""
    tmp = tmp_path_factory.mktemp("ref")
    stats = run_recipe(_recipe(tmp, "local", paths=[str(snapshot / SEGMENT)]))
    docs = _docs(stats)
    assert len(docs) == 16  # the sample's 16 HTML responses
    return docs


def test_s3_snapshot_end_to_end_matches_local_read(s3_server, s3_credentials, local_reference, tmp_path):
    cc = {"snapshot": SNAP, "kind": "warc", "files": 4, "source": "s3", "base_url": "s3://commoncrawl-mirror/",
          "storage_options": {**S3_OPTS, "endpoint_url": s3_server}}
    stats = run_recipe(_recipe(tmp_path, "s3", cc))
    assert _docs(stats) == local_reference
    inp = stats["accounting"]["inputs"]
    assert inp["files_planned"] == inp["files_read"] == 4 and inp["files_failed"] == 0
    assert stats["accounting"]["balanced"]
    with pytest.raises(RecipeError, match="credentials do not belong in a recipe"):
        run_recipe(_recipe(tmp_path, "s3_secret", {**cc, "storage_options": {"secret": "x"}}))


def test_http_snapshot_survives_cut_connections_and_503(http_server, local_reference, tmp_path):
    base, handler = http_server
    names = sorted(p.name for p in (Path(handler.root) / SEGMENT).iterdir())
    handler.faults.update({names[0]: ["cut", "cut"], names[2]: ["503", "cut"], names[3]: ["cut"]})
    cc = {"snapshot": SNAP, "kind": "warc", "files": 1.0, "base_url": base}
    stats = run_recipe(_recipe(tmp_path, "http", cc, backoff_s=0.01))
    assert _docs(stats) == local_reference  # no record lost or repeated across the resumed reads
    reader = next(s for s in stats["stages"] if s["name"] == "reader")["counters"]
    assert reader["read_retries"] == 5
    inp = stats["accounting"]["inputs"]
    assert inp["files_read"] == 4 and inp["files_failed"] == 0


def test_retrying_file_resumes_mid_stream_at_the_byte_reached(http_server):
    """Small range reads; the 3rd and 6th requests are cut mid-body and the 4th answers 503: the bytes read
    through the retries equal the file's, in order, with no gap or repeat."""
    import fsspec

    from cuvee.pipeline.remote import RetryingFile, RetryPolicy

    base, handler = http_server
    rel = sorted((Path(handler.root) / SEGMENT).iterdir())[1]
    expected = rel.read_bytes()
    handler.faults[rel.name] = ["ok", "ok", "cut", "503", "ok", "cut"]
    fs = fsspec.filesystem("http", block_size=1000, cache_type="none")
    url = base + str(rel.relative_to(handler.root))
    retries = []
    f = RetryingFile(lambda: fs.open(url, "rb", block_size=1000, cache_type="none"), RetryPolicy(4, 0.01), retries.append)
    got = b"".join(iter(lambda: f.read(1000), b""))
    assert got == expected and len(expected) > 6000
    assert len(retries) == 3 and handler.ranged_gets[rel.name] >= len(expected) // 1000 + 3


def test_http_file_failing_for_good_is_counted_and_the_run_goes_on(http_server, local_reference, tmp_path):
    base, handler = http_server
    names = sorted(p.name for p in (Path(handler.root) / SEGMENT).iterdir())
    handler.faults[names[1]] = ["503!"]  # every ranged GET of this file fails
    cc = {"snapshot": SNAP, "kind": "warc", "files": 4, "base_url": base, "storage_options": {"block_size": 2048}}
    stats = run_recipe(_recipe(tmp_path, "http_fail", cc, retries=2, backoff_s=0.01))
    inp = stats["accounting"]["inputs"]
    assert inp["files_failed"] == 1 and inp["files_read"] == 3
    docs = _docs(stats)
    assert 0 < len(docs) < len(local_reference) and set(docs) <= set(local_reference)


def test_unknown_snapshot_is_one_line_error_before_work(http_server, tmp_path):
    base, _ = http_server
    cc = {"snapshot": "CC-MAIN-2099-01", "kind": "warc", "files": 1, "base_url": base}
    with pytest.raises(RecipeError, match="no listing at .*CC-MAIN-2099-01.*unknown snapshot"):
        run_recipe(_recipe(tmp_path, "unknown", cc, retries=0))
    assert not (tmp_path / "unknown" / "output").exists()


def test_sampling_is_deterministic_and_bound_to_the_plan(snapshot, http_server, tmp_path):
    base, _ = http_server
    listing = str(snapshot / f"crawl-data/{SNAP}/warc.paths.gz")

    def urls(**kw):
        return expand(CommonCrawlInput(snapshot=SNAP, base_url=base, paths_file=listing, **kw)).urls

    two = urls(files=2, seed=0)
    assert len(two) == 2 and two == urls(files=2, seed=0) and all(u.startswith(base + SEGMENT) for u in two)
    assert urls(files=0.5, seed=0) == two  # 0.5 of 4 = the same 2 as files: 2
    assert len(set(urls(files=2, seed=s) for s in range(6))) > 1  # the seed matters
    assert list(urls(files=1.0)) == sorted(urls(files=1.0)) and len(urls(files=1.0)) == 4  # listing order
    assert sample_indices(10, 3, 7) == sample_indices(10, 3, 7)
    with pytest.raises(ListingError, match="more files than the listing has"):
        urls(files=5)

    cc = {"snapshot": SNAP, "files": 2, "seed": 0, "base_url": base, "paths_file": listing}
    run_recipe(_recipe(tmp_path, "bound", cc))
    cc["seed"] = 3 if set(urls(files=2, seed=3)) != set(two) else 4
    with pytest.raises(FolderError, match="plan"):
        run_recipe(_recipe(tmp_path, "bound", cc))


def test_local_paths_file_and_config_validation(snapshot, local_reference, tmp_path):
    listing = str(snapshot / f"crawl-data/{SNAP}/warc.paths.gz")
    cc = {"snapshot": SNAP, "files": 4, "base_url": snapshot.as_uri() + "/", "paths_file": listing}
    stats = run_recipe(_recipe(tmp_path, "pathsfile", cc))
    assert _docs(stats) == local_reference

    def err(inp):
        with pytest.raises(RecipeError) as e:
            parse_recipe({"name": "x", "input": inp})
        return str(e.value)

    assert "exactly one" in err({"paths": ["a"], "common_crawl": {"snapshot": SNAP, "files": 1}})
    assert "exactly one" in err({})
    assert "snapshot" in err({"common_crawl": {"snapshot": "2024-22", "files": 1}})
    assert "files" in err({"common_crawl": {"snapshot": SNAP, "files": 0}})
    assert "files" in err({"common_crawl": {"snapshot": SNAP, "files": 1.5}})
    assert "unknown key" in err({"common_crawl": {"snapshot": SNAP, "files": 1, "sead": 1}})
    assert "contradicts" in err({"common_crawl": {"snapshot": SNAP, "files": 1, "kind": "wet"}, "format": "warc"})


def test_example_recipe_validates():
    from cuvee.pipeline.recipe import load_recipe

    r = load_recipe(REPO / "recipes/cc_snapshot.yaml")
    assert r.input.common_crawl.snapshot == SNAP and r.input.common_crawl.source == "https"


def test_unreachable_base_is_not_reported_as_an_unknown_snapshot(tmp_path):
    port = _free_port()  # nothing listens there
    cc = {"snapshot": SNAP, "kind": "warc", "files": 1, "base_url": f"http://127.0.0.1:{port}/"}
    with pytest.raises(RecipeError, match="cannot reach .*check the network"):
        run_recipe(_recipe(tmp_path, "unreachable", cc, retries=0))
