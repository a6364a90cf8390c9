"""The README's first command, `cuvee demo`, end to end on the bundled sample: pipeline -> mix -> card.

It once failed for weeks unnoticed (trafilatura 2.x's pipe-row tables made FineWeb's line rule drop 21 of
25 pages, and the mix then lacked web tokens), because no test ran it. This one does, from a folder that
is not the checkout, as a user would."""

from __future__ import annotations

import json


def test_cuvee_demo_runs_end_to_end(demo_run):
    tmp_path, r = demo_run  # conftest: one `cuvee demo` run, shared with tests/test_kernel_seams.py
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[balanced]" in r.stdout and "dataset card:" in r.stdout
    run = tmp_path / "demo"
    stats = json.loads((run / "stats.json").read_text())
    fineweb = next(s for s in stats["stages"] if s["name"] == "fineweb_quality")
    # tables as pipe rows: 4 of 25 kept; tables as lines: 34 of 41 (most pages past Gopher and C4 pass FineWeb)
    assert fineweb["docs_in"] > 20 and fineweb["docs_out"] >= fineweb["docs_in"] / 2, fineweb
    manifest = json.loads((run / "mix" / "manifest.json").read_text())
    assert {s["name"] for s in manifest["sources"]} == {"web", "curated"}
    assert all(s["realised_tokens"] > 0 for s in manifest["sources"])
    assert list((run / "mix").glob("*.bin")) and list((run / "mix").glob("*.idx"))
    card = (run / "output" / "README.md").read_text()
    assert card.startswith("---") and "web" in card
    # the last lines list every output (each exists) and the next command to try
    tail = r.stdout[r.stdout.index("\noutputs:\n"):].splitlines()[2:]
    listed = dict(line.strip().split(": ", 1) for line in tail if line.startswith("  "))
    assert set(listed) == {"run folder", "stats", "documents", "mix shards", "mix manifest", "dataset card",
                           "card html"}, listed
    assert all((tmp_path / path.strip()).exists() for path in listed.values()), listed
    assert listed["stats"].strip().endswith("stats.json") and listed["card html"].strip().endswith("card.html")
    nxt = tail[-1]
    # README's newcomer path goes on with a model trained on this mix: the command names the mix just built
    assert nxt.startswith("next: ") and "cuvee train configs/train/demo_mix.yaml --set 'data.paths=[" in nxt, nxt
    trained_on = nxt.split("data.paths=[", 1)[1].split("]", 1)[0]
    assert (tmp_path / trained_on / "manifest.json").samefile(run / "mix" / "manifest.json"), nxt


def test_a_second_demo_resumes_its_run_and_mix(demo_run):
    """Like every command, a rerun resumes: the pipeline's documents are found finished and left as they are, the
    mix is rebuilt byte for byte (cuvee mix's rule), the card written again; `--fresh` is the way to start over."""
    import hashlib
    import subprocess
    import sys

    tmp_path, first = demo_run
    assert first.returncode == 0
    run = tmp_path / "demo"
    docs = {p: p.stat().st_mtime_ns for p in (run / "output").rglob("*.parquet")}
    shards = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run / "mix").glob("*.bin")}
    assert docs and shards
    r = subprocess.run([sys.executable, "-m", "cuvee.cli", "demo", "--run-dir", "demo"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in docs} == docs
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in shards} == shards
    assert json.loads((run / "stats.json").read_text())["accounting"]["balanced"]
