"""The card of a mix folder and of a training folder, from provenance: the removal waterfall, exact tokens by
source, language and epoch, traced spot checks, checked against the run's stats.json, the manifest and sums computed
here from the raw shard files; the HTML card rendered by headless Chromium. The demo run, mix and training run are
tests/test_trace.py's session fixtures (built once)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from cuvee.cli import main
from tests import test_trace as shared
from tests.test_trace import locate, output_row

demo, trained = shared.demo, shared.trained  # tests/test_trace.py's session fixtures: the demo is built once


def _section(md: str, heading: str) -> str:
    start = md.index(heading)
    nxt = [i for i in (md.find("\n## ", start + 1), md.find("\n### ", start + 1)) if i > 0]
    return md[start:min(nxt) if nxt else len(md)]


def _rows(block: str) -> list[list[str]]:
    lines = [x for x in block.splitlines() if x.startswith("|")]
    return [[c.strip() for c in x.strip("|").split("|")] for x in lines[2:]]


def _num(s: str) -> int:
    return int(s.replace(",", ""))


@pytest.fixture(scope="module")
def mix_card(demo):
    res = CliRunner().invoke(main, ["card", str(demo["mix"]), "--spot-checks", "4", "--max-token-docs", "0"])
    assert res.exit_code == 0, res.output
    return {"readme": demo["mix"] / "README.md", "html": demo["mix"] / "card.html",
            "text": (demo["mix"] / "README.md").read_text()}


def test_mix_card_waterfall_and_tokens_are_the_provenance(demo, mix_card):
    """The waterfall's rows are the run's stats.json stages and the mix's counters; the token tables are the sums,
    computed here from the raw .idx and .docs files and the output rows, by source, language and epoch."""
    md = mix_card["text"]
    stats = json.loads((demo["run"] / "stats.json").read_text())
    m = json.loads((demo["mix"] / "manifest.json").read_text())
    rows = _rows(_section(md, "### Removal waterfall"))
    stages = [s for s in stats["stages"] if s.get("docs_in") is not None]
    assert [(_num(r[1]), _num(r[4])) for r in rows[: len(stages)]] == [(s["docs_in"], s["docs_out"]) for s in stages]
    mix_rows = {r[0]: r for r in rows[len(stages):]}
    for s in m["sources"]:
        sel = mix_rows[f"mix {s['name']}: selection"]
        assert (_num(sel[1]), _num(sel[4])) == (s["counters"]["read"], s["counters"]["kept"])
    by = {"source": {}, "epoch": {}, "language": {}}
    tokens = 0
    for token in range(0, m["total_tokens"]):  # document by document, from the raw files
        if token < tokens:
            continue
        d = locate(demo["mix"], token)
        n = len(d["tokens"])
        tokens = token + n - d["offset"]
        lang = output_row(d["file"], d["row"])["metadata"]["language"] if d["file"].endswith(".parquet") else "unknown"
        for dim, v in (("source", d["source"]), ("epoch", str(d["epoch"])), ("language", lang)):
            by[dim][v] = by[dim].get(v, 0) + n
    for dim, title in (("source", "By source:"), ("epoch", "By epoch:"), ("language", "By language:")):
        block = md[md.index(title):]
        block = block[: block.index("\n\n", block.index("|"))]
        assert {r[0]: _num(r[1]) for r in _rows(block)} == by[dim]
    assert by["source"] == {s["name"]: s["realised_tokens"] for s in m["sources"]}


def test_mix_card_spot_checks_and_its_html_in_a_browser(demo, mix_card, tmp_path):
    """Four seeded tokens traced and verified; the HTML card, rendered by headless Chromium, shows the waterfall
    and the spot-check tables (one row per step, per token) and every plot; the mix still verifies."""
    spot = _rows(_section(mix_card["text"], "### Spot checks"))
    assert len(spot) == 4 and all(r[-1].startswith("OK") for r in spot)
    assert CliRunner().invoke(main, ["mix", str(demo["mix"]), "--verify"]).exit_code == 0
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("Debian `chromium` is not installed; the browser check needs it")
    import subprocess

    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = mix_card["html"].resolve().as_uri()
    shot = tmp_path / "card.png"
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,6000", url], check=True, capture_output=True,
                   timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=120).stdout
    waterfall = re.search(r'<table id="removal-waterfall">(.*?)</table>', dom, re.DOTALL)
    checks = re.search(r'<table id="spot-checks">(.*?)</table>', dom, re.DOTALL)
    assert waterfall and checks, "provenance tables missing from the rendered DOM"
    assert len(re.findall(r"<tr>", waterfall.group(1))) == len(_rows(_section(mix_card["text"], "### Removal"))) + 1
    assert len(re.findall(r"<tr>", checks.group(1))) == 5 and checks.group(1).count(">OK: ") == 4
    imgs = re.findall(r'<img[^>]*src="data:image/png;base64,', dom)
    assert len(imgs) == len(list((demo["mix"] / "card_images").glob("*.png"))) >= 5


def test_training_folder_card_says_what_the_model_read(demo, trained):
    res = CliRunner().invoke(main, ["card", str(trained["folder"]), "--spot-checks", "0", "--max-token-docs", "0"])
    assert res.exit_code == 0, res.output
    md = (trained["folder"] / "README.md").read_text()
    assert "## Provenance" in md and "## Training run" in md
    info = {r[0]: r[1] for r in _rows(_section(md, "## Training run"))}
    cfg = trained["cfg"]
    read = sum(_num(v.split(" ")[0]) for k, v in info.items() if k.startswith("tokens read from"))
    assert read == cfg.steps * cfg.micro_batch * cfg.grad_accum * cfg.data.seq_len  # every row is full
