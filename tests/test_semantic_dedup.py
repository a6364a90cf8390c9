"""The embed stage and SemDeDup semantic dedup (issue #35), through real recipe runs with the shipped MiniLM.

Expectations come from how the corpus is built (planted paraphrase groups, measured with the same encoder: cosine
0.87-0.96 inside a group, at most 0.34 across) and from a second implementation (SemDeDup's rule as a plain double
loop; the keeper as the member farthest from the normalised mean, which is what one spherical centroid is)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cuvee.dedup import kmeans, semdedup
from cuvee.dedup.embed_store import EmbedStore, StoreError, match_rows
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.recipe import RecipeError
from cuvee.pipeline.runner import run_recipe
from tests._dedup_helpers import quiet, real_texts

quiet()

GROUPS = [
    ["The city council approved a new budget on Tuesday that raises spending on public schools by ten percent.",
     "On Tuesday the city council passed a new budget increasing public school spending by 10 percent.",
     "A new budget raising spending on the city's public schools by ten percent was approved by the council on "
     "Tuesday."],
    ["Heavy rain caused flooding across the northern part of the country, forcing thousands of people to leave their "
     "homes.",
     "Thousands of people were forced from their homes as heavy rain flooded the north of the country."],
    ["To bake the bread, mix the flour, water, yeast and salt, then let the dough rise for two hours before baking.",
     "Combine flour, water, salt and yeast, leave the dough to rise for two hours, and then bake the bread."],
    ["The company reported that its quarterly profit fell sharply because of weaker demand for its smartphones.",
     "Weaker demand for its smartphones made the company's quarterly profit fall sharply, it reported."],
]
UNRELATED = [
    "The red panda spends most of its life in trees and feeds mainly on bamboo leaves.",
    "Python lists can hold items of different types and grow as new items are appended.",
    "The violinist performed three sonatas by Brahms at the festival's closing concert.",
    "Regular stretching before running can reduce the risk of muscle injuries.",
    "The museum's new wing displays ancient pottery found along the Nile.",
    "Interest rates on savings accounts have risen slowly over the past year.",
    "The hiking trail climbs steeply through pine forest to a lake below the summit.",
    "Volunteers planted two hundred trees along the river to prevent erosion.",
]
ROWS = ([{"id": f"g{i}_{j}", "text": t} for i, g in enumerate(GROUPS) for j, t in enumerate(g)]
        + [{"id": f"u{i}", "text": t} for i, t in enumerate(UNRELATED)])


def run(tmp_path: Path, name: str, rows: list[dict], tasks: int, stages: list[dict]) -> tuple[dict, dict, dict]:
    """``rows`` dealt over ``tasks`` JSONL files; returns (kept metadata by id, exclusion records by id, stats)."""
    src = tmp_path / f"{name}_in"
    src.mkdir()
    for r in range(tasks):
        (src / f"{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows[r::tasks]))
    stats = run_recipe({"name": name, "run_dir": str(tmp_path / name), "input": {"paths": [str(src)], "format": "jsonl"},
                        "stages": stages, "executor": {"kind": "local", "tasks": tasks, "workers": 1},
                        "output": {"format": "jsonl", "exclusions": True}})
    assert stats["accounting"]["balanced"]
    kept = {d.id: d.metadata for d in iter_documents(stats["output"]["files"])}
    excluded = {}
    for p in sorted((tmp_path / name / "excluded").rglob("*.jsonl.gz")):
        for line in gzip.open(p, "rt"):
            rec = json.loads(line)
            excluded[rec["id"]] = rec["metadata"]
    return kept, excluded, stats


def encode(texts: list[str], max_tokens: int = 256) -> np.ndarray:
    from cuvee.classifiers.embedder import Encoder

    return Encoder(max_length=max_tokens, batch_size=1).embed(texts)


@pytest.fixture(scope="module")
def one_task(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("semantic")
    return run(tmp, "one", ROWS, 1, [{"stage": "embed"}, {"stage": "semantic_dedup", "threshold": 0.8}])


def test_planted_paraphrase_groups_collapse_to_one_each_and_unrelated_documents_stay(one_task):
    kept, excluded, stats = one_task
    # one centroid (17 documents): it is the normalised mean of all vectors; each group keeps its member farthest
    # from it (SemDeDup's rule), every other member names that keeper
    x = encode([r["text"] for r in ROWS]).astype(np.float16).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    centre = x.mean(0) / np.linalg.norm(x.mean(0))
    ids = [r["id"] for r in ROWS]
    want_kept, want_dropped = {f"u{i}": 1 for i in range(len(UNRELATED))}, {}
    for g, members in enumerate(GROUPS):
        gids = [f"g{g}_{j}" for j in range(len(members))]
        keeper = min(gids, key=lambda i: float(x[ids.index(i)] @ centre))
        want_kept[keeper] = len(members)
        want_dropped |= {i: (keeper, len(members)) for i in gids if i != keeper}
    assert {i: m["semantic_cluster_size"] for i, m in kept.items()} == want_kept
    assert {i: (m["semantic_duplicate_of"], m["semantic_cluster_size"]) for i, m in excluded.items()} == want_dropped
    assert {(m["filter_stage"], m["filter_reason"]) for m in excluded.values()} == {("01.semantic_dedup",
                                                                                     "semantic_duplicate")}
    emb = stats["embeddings"][0]
    assert (emb["model"], emb["dim"], emb["documents"], emb["devices"]) == ("all-MiniLM-L6-v2", 384, len(ROWS), ["cpu"])
    assert emb["cpu_s"] > 0 and emb["cpu_ms_per_doc"] > 0


def test_the_same_documents_are_kept_with_one_or_three_tasks(tmp_path, one_task):
    stages = [{"stage": "embed"}, {"stage": "semantic_dedup", "threshold": 0.8, "clusters": 3}]
    runs = [run(tmp_path, f"t{n}", ROWS, n, stages) for n in (1, 3)]
    (kept1, ex1, _), (kept3, ex3, _) = runs
    assert {i: m["semantic_cluster_size"] for i, m in kept1.items()} == \
        {i: m["semantic_cluster_size"] for i, m in kept3.items()}
    assert {i: m["semantic_duplicate_of"] for i, m in ex1.items()} == \
        {i: m["semantic_duplicate_of"] for i, m in ex3.items()}
    assert len(kept1) + len(ex1) == len(ROWS) and ex1  # three clusters, and some paraphrases still met


def brute_force(x: np.ndarray, threshold: float) -> tuple[list[int], list[int]]:
    """SemDeDup's rule written plainly: j is removed when any i < j is above the threshold; keepers by pointers."""
    m = len(x)
    keeper = list(range(m))
    for j in range(1, m):
        sims = [float(x[i] @ x[j]) for i in range(j)]
        i = int(np.argmax(sims))
        if sims[i] > threshold:
            keeper[j] = keeper[i]
    return keeper, [keeper.count(k) for k in keeper]


@pytest.mark.parametrize("budget", [64, 1 << 20])  # 64 bytes: one row per block
def test_the_cluster_decision_matches_a_plain_double_loop(budget):
    rng = np.random.default_rng(3)
    base = rng.normal(size=(12, 16))
    x = np.concatenate([base, base[[0, 0, 3, 5, 5, 5]] + 0.05 * rng.normal(size=(6, 16)),
                        base[[3]] + 0.4 * rng.normal(size=(1, 16))])  # near copies, and one far enough to split
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)[rng.permutation(19)]
    for threshold in (0.5, 0.9, 0.99):
        keeper, size = semdedup.decide(x, threshold, budget)
        want_keeper, want_size = brute_force(x, threshold)
        assert keeper.tolist() == want_keeper and size.tolist() == want_size


def test_the_kmeans_plan_bounds_the_fit_sample():
    assert kmeans.plan(17, 3, 2000, 0.1, 100_000) == (3, 17)  # asked for: kept (at most one per document)
    assert kmeans.plan(17, None, 2000, 0.1, 100_000) == (1, 17)
    assert kmeans.plan(1_000_000, None, 2000, 0.1, 100_000) == (500, 100_000)  # a tenth, under the cap
    assert kmeans.plan(1_000_000, None, 100, 0.1, 100_000) == (2564, 100_000)  # cap: 39 documents a centroid
    assert kmeans.plan(0, None, 2000, 0.1, 100_000) == (0, 0)


def test_rows_are_matched_to_a_subsequence_and_other_documents_refused():
    stored = np.array([5, 9, 2, 7, 7, 4], dtype=np.uint64)
    assert match_rows(stored, stored, "t").tolist() == list(range(6))
    assert match_rows(stored, np.array([9, 7, 4], dtype=np.uint64), "t").tolist() == [1, 3, 5]
    assert match_rows(stored, np.array([7, 7], dtype=np.uint64), "t").tolist() == [3, 4]
    with pytest.raises(StoreError, match="no embedding"):
        match_rows(stored, np.array([2, 5], dtype=np.uint64), "t")  # out of order


def test_semantic_dedup_without_an_embed_stage_is_refused_before_any_work(tmp_path):
    with pytest.raises(RecipeError, match="add '- stage: embed' before it"):
        run(tmp_path, "alone", ROWS[:3], 1, [{"stage": "semantic_dedup"}])
    with pytest.raises(RecipeError, match="store: other"):
        run(tmp_path, "other", ROWS[:3], 1, [{"stage": "embed"}, {"stage": "semantic_dedup", "store": "other"}])
    assert not (tmp_path / "other" / "work" / "embeddings").exists()


def test_an_embed_model_folder_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecipeError, match="not a local model folder"):
        run(tmp_path, "bad", ROWS[:3], 1, [{"stage": "embed", "model": str(tmp_path / "empty")}])


def test_a_killed_embed_task_resumes_from_its_task(tmp_path):
    """Two tasks, run one after the other in one process, killed (SIGKILL) while the second embeds: the rerun keeps
    the first task's rows as they were, sweeps the second's temporaries and writes its rows whole."""
    texts = list(real_texts()[:60])
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    src = tmp_path / "in"
    src.mkdir()
    for r in range(2):
        (src / f"{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows[r::2]))
    recipe = {"name": "kill", "run_dir": str(tmp_path / "run"), "input": {"paths": [str(src)], "format": "jsonl"},
              "stages": [{"stage": "embed", "max_tokens": 64}, {"stage": "semantic_dedup", "threshold": 0.97}],
              "executor": {"kind": "local", "tasks": 2, "workers": 1}, "output": {"format": "jsonl"}}
    child = textwrap.dedent(f"""
        import os, signal
        from cuvee.classifiers import embedder
        from cuvee.pipeline.runner import run_recipe
        real, seen = embedder.Encoder.embed, []
        def embed(self, texts):
            seen.append(len(texts))
            if sum(seen) > 30:  # the second task (30 documents each) starts embedding: kill the run's processes
                os.killpg(os.getpgid(0), signal.SIGKILL)
            return real(self, texts)
        embedder.Encoder.embed = embed
        run_recipe({recipe!r})
    """)
    store = tmp_path / "run" / "work" / "embeddings" / "default"
    res = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=600, check=False,
                         start_new_session=True)  # its own process group: datatrove's manager process dies with it
    assert res.returncode == -9, res.stderr[-2000:]
    temps = sorted(p.name for p in store.iterdir() if p.name.endswith(".cuvee-tmp"))
    assert temps and all(".00001." in t for t in temps), temps
    assert (store / "00000.json").exists() and not (store / "00001.json").exists()
    first = {p.name: p.stat().st_mtime_ns for p in store.glob("00000.*")}
    stats = run_recipe(recipe)
    assert stats["complete"] and stats["accounting"]["balanced"]
    assert not [p for p in (tmp_path / "run").rglob("*") if p.name.endswith(".cuvee-tmp")]
    assert {p.name: p.stat().st_mtime_ns for p in store.glob("00000.*")} == first  # task 0 was not embedded again
    es = EmbedStore(store)
    assert [es.description(r)["rows"] for r in range(2)] == [30, 30]
    mine = texts[1::2]  # the resumed task's vectors are the encoder's, bitwise (float16)
    got = np.asarray(es.vectors(1)[[0, 29]])
    assert np.array_equal(got, encode([mine[0], mine[29]], 64).astype(np.float16))
