"""The ``cluster`` stage (issue #35): k-means cluster ids as metadata, described in stats.json and the card, through
real recipe runs with the shipped MiniLM.

Expectations are independent of the stage: each document's cluster is recomputed as the arg-max cosine of its own
vector (encoded again here) against the saved centroids; the same documents dealt over 1 or 3 tasks get the same
clusters; the description's words are checked against a closed form of the distinctiveness score."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cuvee.card import write_card
from cuvee.dedup.topic_clusters import WORD, distinctive
from cuvee.pipeline.recipe import RecipeError, parse_recipe
from cuvee.pipeline.runner import run_recipe
from tests.test_semantic_dedup import ROWS, UNRELATED, encode, run

CLUSTER = [{"stage": "embed"}, {"stage": "cluster", "clusters": 3, "describe_terms": 5}]
HOSTILE = '<script>alert("x")</script> | `tick` [link](javascript:alert(1))'


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clusters")
    rows = [dict(r, title=HOSTILE if i == 0 else f"title {r['id']}") for i, r in enumerate(ROWS)]
    return {tasks: (*run(tmp, f"t{tasks}", rows, tasks, CLUSTER), tmp / f"t{tasks}") for tasks in (1, 3)}


def test_each_document_is_in_the_cluster_of_its_nearest_centroid(runs):
    kept, _, stats, run_dir = runs[1]
    assert set(kept) == {r["id"] for r in ROWS}  # nothing dropped
    centroids = np.fromfile(run_dir / "work" / "01_cluster" / "kmeans" / "centroids.f32", dtype=np.float32)
    centroids = centroids.reshape(3, -1)
    x = encode([r["text"] for r in ROWS]).astype(np.float16).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cos = x @ centroids.T
    for i, r in enumerate(ROWS):
        m = kept[r["id"]]
        assert m["cluster"] == int(np.argmax(cos[i])), r["id"]
        assert m["cluster_cosine"] == pytest.approx(float(cos[i].max()), abs=1e-4)
    assert {m["cluster"] for m in kept.values()} == {0, 1, 2}


def test_clusters_do_not_depend_on_the_task_count(runs):
    one, three = runs[1][0], runs[3][0]
    assert {i: m["cluster"] for i, m in one.items()} == {i: m["cluster"] for i, m in three.items()}


def test_report_counts_every_document_and_names_words_of_its_cluster(runs):
    kept, _, stats, _ = runs[3]
    (rep,) = stats["clusters"]
    assert rep["clusters"] == 3 and rep["documents"] == len(ROWS)
    by = {r["cluster"]: r for r in rep["by_cluster"]}
    assert {c: r["documents"] for c, r in by.items()} == Counter(m["cluster"] for m in kept.values())
    texts = {r["id"]: r["text"] for r in ROWS}
    for c, r in by.items():
        words_there = Counter(w for i, m in kept.items() if m["cluster"] == c for w in set(WORD.findall(texts[i].lower())))
        assert all(words_there[w] >= 2 for w in r["terms"]), (c, r["terms"])
        assert 1 <= len(r["samples"]) <= 3


def test_distinctive_is_share_times_log_lift_and_drops_words_common_everywhere():
    corpus = Counter({"the": 100, "rare": 3, "topic": 10, "once": 1})
    inside = Counter({"the": 10, "rare": 3, "topic": 6, "once": 1})
    # the: 1.0 x log(1.0 / 1.0) = 0 (left out); rare: 0.3 x log(0.3 / 0.03); topic: 0.6 x log(0.6 / 0.1)
    assert 0.3 * np.log(10) < 0.6 * np.log(6)
    assert distinctive(inside, 10, corpus, 100, top=5) == ["topic", "rare"]
    assert distinctive(inside, 10, corpus, 100, top=1) == ["topic"]


def test_card_describes_the_clusters_with_titles_escaped(runs):
    _, _, _, run_dir = runs[1]
    files = write_card(run_dir, max_token_docs=0, spot_checks=0)
    md = Path(files.readme).read_text()
    section = md.split("## Embeddings and clusters", 1)[1].split("\n## ", 1)[0]
    assert "all-MiniLM-L6-v2" in section and "ms of CPU per document" in section
    assert section.count("\n| ") == 1 + 3  # header + one row per cluster (the separator starts with |-)
    assert "&lt;script&gt;" in section and "<script>" not in md and "[link]" not in md  # the title, as text
    assert "<script>" not in Path(files.html).read_text()


def test_a_cluster_stage_without_embed_is_refused_before_work(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "a page"}) + "\n")
    with pytest.raises(RecipeError, match="add '- stage: embed' before it"):
        run_recipe({"name": "x", "run_dir": str(tmp_path / "x"), "input": {"paths": [str(tmp_path)], "format": "jsonl"},
                    "stages": [{"stage": "cluster"}], "output": {"format": "jsonl"}})
    assert not (tmp_path / "x").exists()


def test_text_key_reads_another_field_and_is_refused_for_crawl_input(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"page": t, "n": i}) + "\n" for i, t in enumerate(UNRELATED)))
    stats = run_recipe({"name": "k", "run_dir": str(tmp_path / "k"), "executor": {"kind": "local", "tasks": 1},
                        "input": {"paths": [str(src)], "format": "jsonl", "text_key": "page"},
                        "stages": [{"stage": "length", "min_chars": 1}], "output": {"format": "jsonl"}})
    from cuvee.pipeline.io import iter_documents

    docs = list(iter_documents(stats["output"]["files"]))
    assert sorted(d.text for d in docs) == sorted(UNRELATED) and {d.metadata["n"] for d in docs} == set(range(8))
    with pytest.raises(RecipeError, match="text_key and input.id_key apply to format: jsonl or parquet"):
        parse_recipe({"name": "w", "input": {"paths": ["x.warc.gz"], "format": "warc", "text_key": "t"},
                      "stages": [{"stage": "extract"}]}, "inline")


def test_the_shipped_cluster_recipe_and_search_run_on_a_cut_of_the_pages(tmp_path):
    """recipes/clusters.yaml as shipped on its first 300 pages (input.limit: the full run is in RESULTS), then the
    header's `cuvee mix search mixes/search_clusters.yaml --dry-run` on what it wrote, from a working copy."""
    import shutil
    import subprocess
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[1]
    for name in ("recipes", "mixes"):
        shutil.copytree(repo / name, tmp_path / name)
    (tmp_path / "data").symlink_to(repo / "data", target_is_directory=True)
    recipe = yaml.safe_load((tmp_path / "recipes" / "clusters.yaml").read_text())
    recipe["input"]["limit"] = 300
    (tmp_path / "recipes" / "clusters.yaml").write_text(yaml.safe_dump(recipe))

    def cuvee(*args):
        r = subprocess.run([sys.executable, "-m", "cuvee.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r.stdout

    cuvee("run", "recipes/clusters.yaml")
    stats = json.loads((tmp_path / "runs" / "clusters" / "stats.json").read_text())
    (rep,) = stats["clusters"]
    assert rep["clusters"] == 6 and rep["documents"] == stats["accounting"]["kept"] > 250
    assert all(r["terms"] for r in rep["by_cluster"])
    plan = json.loads(cuvee("mix", "search", "mixes/search_clusters.yaml", "--dry-run", "--no-estimate", "--json"))
    assert plan["sources"] == [f"c{i}" for i in range(6)] and all(t > 0 for t in plan["available_tokens"])
