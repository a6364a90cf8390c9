"""stats.json lists the output's document files wherever the output lives: a local folder, or an S3 bucket
(a real moto server on 127.0.0.1, reached through fsspec as a run's writer reaches it)."""

import socket

import pytest

from cuvee.pipeline.recipe import parse_recipe
from cuvee.pipeline.stats import collect_stats, output_files

DOCS = ["en/00000.jsonl.gz", "en/00001.jsonl.gz", "fr/00000.jsonl.gz", "top.parquet"]
OTHER = ["en/.00002.jsonl.gz.tmp", "README.txt", "logs/stats.json"]


def _recipe(tmp_path, out: str):
    (tmp_path / "in").mkdir(exist_ok=True)
    return parse_recipe({"name": "t", "run_dir": str(tmp_path / "run"),
                         "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
                         "output": {"format": "jsonl", "path": out}})


def test_local_output_files_are_listed_recursively(tmp_path):
    out = tmp_path / "out"
    for name in DOCS + OTHER:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"x")
    stats = collect_stats([], _recipe(tmp_path, str(out)), tmp_path / "run")
    assert stats["output"]["files"] == sorted(str(out / n) for n in DOCS)
    assert output_files(str(tmp_path / "missing")) == []


@pytest.fixture
def s3_endpoint(monkeypatch):
    pytest.importorskip("s3fs")
    import boto3
    import fsspec.config
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # how a user points fsspec (and so datatrove's writers) at an S3-compatible store: fsspec's config
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                                                   "client_kwargs": {"region_name": "us-east-1"}})
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="runs")
        for name in DOCS + OTHER:
            s3.put_object(Bucket="runs", Key=f"t/output/{name}", Body=b"x")
        s3.put_object(Bucket="runs", Key="t/output-other/en/00000.jsonl.gz", Body=b"x")  # a sibling prefix
        yield endpoint
    finally:
        server.stop()


def test_s3_output_files_are_listed(tmp_path, s3_endpoint):
    """Listed with a local Path.rglob, an ``s3://`` output reported no files at all."""
    stats = collect_stats([], _recipe(tmp_path, "s3://runs/t/output"), tmp_path / "run")
    assert stats["output"]["path"] == "s3://runs/t/output"
    assert stats["output"]["files"] == sorted(f"s3://runs/t/output/{n}" for n in DOCS)
    assert output_files("s3://runs/t/output/") == stats["output"]["files"]
    assert output_files("s3://runs/t/nothing") == []
