"""Decisions and duplicate clusters as provenance, through real recipe runs: planted clusters of known sizes give
the recorded ``<kind>_cluster_size`` on kept documents and ``<kind>_duplicate_of`` (the keeper's id) in the
exclusion records, for exact, line and MinHash dedup (MinHash also across reused, chained indexes); a dropped
document's exclusion record names the stage, the reason and the score the stage decided on.

Expectations come from how the corpus is built (which texts are copies of which), not from the code's output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe
from tests._dedup_helpers import quiet, real_texts

quiet()


def near_dup(text: str, at: float) -> str:
    """``text`` without 2 % of its words, cut at ``at`` of the way in: Jaccard ~0.95, always one MinHash cluster."""
    w = text.split()
    k, i = max(1, len(w) // 50), int(len(w) * at)
    return " ".join(w[:i] + w[i + k:])


def run(tmp_path: Path, name: str, files: dict[str, list[dict]], stages: list[dict], fmt: str = "jsonl") -> tuple:
    """Runs ``stages`` on JSONL ``files`` (one per task, in name order) with exclusions; returns (kept documents by
    id, exclusion records by id, stats)."""
    src = tmp_path / f"{name}_in"
    src.mkdir()
    for fname, rows in files.items():
        (src / fname).write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = run_recipe({"name": name, "run_dir": str(tmp_path / name),
                        "input": {"paths": [str(src)], "format": "jsonl"}, "stages": stages,
                        "executor": {"kind": "local", "tasks": len(files), "workers": 1},
                        "output": {"format": fmt, "exclusions": True}})
    assert stats["accounting"]["balanced"]
    kept = {d.id: d for d in iter_documents(stats["output"]["files"])}
    excluded = {}
    for p in sorted((tmp_path / name / "excluded").rglob("*.jsonl.gz")):
        for line in gzip.open(p, "rt"):
            rec = json.loads(line)
            excluded[rec["id"]] = rec["metadata"] | {"_folder": p.parent.name}
    return kept, excluded, stats


def test_exact_clusters_name_their_keeper_and_size(tmp_path):
    t = real_texts()
    # clusters: t0 x3 (first copy in rank 0), t1 x2 (both in rank 1), t2 x4 (spread), t3..t5 alone
    a = [{"id": "a0", "text": t[0]}, {"id": "a1", "text": t[2]}, {"id": "a2", "text": t[3]},
         {"id": "a3", "text": "  " + t[0].upper()}, {"id": "a4", "text": t[2]}]
    b = [{"id": "b0", "text": t[1]}, {"id": "b1", "text": t[0]}, {"id": "b2", "text": t[2].replace(" ", "  ")},
         {"id": "b3", "text": t[1]}, {"id": "b4", "text": t[4]}, {"id": "b5", "text": t[2]}, {"id": "b6", "text": t[5]}]
    kept, excluded, _ = run(tmp_path, "exact", {"a.jsonl": a, "b.jsonl": b}, [{"stage": "exact_dedup"}], "parquet")
    want_kept = {"a0": 3, "a1": 4, "a2": 1, "b0": 2, "b4": 1, "b6": 1}
    assert {i: d.metadata["exact_cluster_size"] for i, d in kept.items()} == want_kept
    want_dropped = {"a3": ("a0", 3), "b1": ("a0", 3), "a4": ("a1", 4), "b2": ("a1", 4), "b5": ("a1", 4),
                    "b3": ("b0", 2)}
    assert {i: (m["exact_duplicate_of"], m["exact_cluster_size"]) for i, m in excluded.items()} == want_dropped
    for m in excluded.values():
        assert (m["filter_stage"], m["filter_reason"], m["_folder"]) == ("00.exact_dedup", "exact_duplicate",
                                                                           "00.exact_dedup")


def test_exact_one_pass_names_the_keeper_of_each_dropped_copy(tmp_path):
    t = real_texts()
    rows = [{"id": f"d{i}", "text": t[i % 3]} for i in range(7)]  # d0 keeps d3 d6, d1 keeps d4, d2 keeps d5
    kept, excluded, _ = run(tmp_path, "one", {"a.jsonl": rows}, [{"stage": "exact_dedup", "one_pass": True}])
    assert sorted(kept) == ["d0", "d1", "d2"]
    assert {i: m["exact_duplicate_of"] for i, m in excluded.items()} == {"d3": "d0", "d6": "d0", "d4": "d1",
                                                                         "d5": "d2"}


def test_line_clusters_count_the_documents_sharing_a_removed_line(tmp_path):
    t = real_texts()
    cookie, footer, rare = "Accept all cookies on this site", "Share this page with your friends", "A rare line"
    rows = []
    for i in range(12):
        lines = t[i].split("\n")
        if i < 7:
            lines = [cookie] + lines  # 7 documents: removed (k = 6)
        if i < 9 and i % 2 == 0 or i in (1, 3, 9, 10):
            lines = lines + [footer]  # documents 0 2 4 6 8 1 3 9 10: 9 documents
        if i < 3:
            lines = lines + [rare]  # 3 documents: below k, kept
        rows.append({"id": f"d{i}", "text": "\n".join(lines)})
    rows.append({"id": "only", "text": f"{cookie}\n{footer}"})  # nothing left: dropped
    kept, excluded, _ = run(tmp_path, "line", {"a.jsonl": rows[:6], "b.jsonl": rows[6:]},
                            [{"stage": "line_dedup", "min_occurrences": 6, "min_words": 0}])
    for i in range(12):
        m = kept[f"d{i}"].metadata
        removed = (i < 7) + (i in (0, 2, 4, 6, 8, 1, 3, 9, 10))
        assert m["line_lines_removed"] == removed
        assert m["line_cluster_size"] == (1 if not removed else 10 if i in (0, 2, 4, 6, 8, 1, 3, 9, 10) else 8)
        assert kept[f"d{i}"].text.endswith(rare) == (i < 3)
    assert excluded["only"]["line_lines_removed"] == 2 and excluded["only"]["line_cluster_size"] == 10
    assert excluded["only"]["filter_reason"] == "empty_after_line_dedup"


@pytest.fixture(scope="module")
def minhash_runs(tmp_path_factory):
    """Three runs: the second reuses the first's index, the third both (the second's holds the first's keepers)."""
    tmp = tmp_path_factory.mktemp("mh")
    t = real_texts()
    o = [{"id": f"O{i}", "text": t[i]} for i in range(6)]
    run1 = {"a.jsonl": o[:3] + [{"id": "d0a", "text": near_dup(t[0], 0.3)}],
            "b.jsonl": o[3:] + [{"id": "d0b", "text": near_dup(t[0], 0.6)}, {"id": "d1", "text": near_dup(t[1], 0.5)}]}
    n = [{"id": f"N{i}", "text": t[20 + i]} for i in range(3)]
    run2 = {"a.jsonl": [{"id": "e0", "text": near_dup(t[0], 0.45)}, {"id": "e3", "text": near_dup(t[3], 0.5)}, n[0]],
            "b.jsonl": n[1:] + [{"id": "N0dup", "text": near_dup(t[20], 0.5)}]}
    run3 = {"a.jsonl": [{"id": "f0", "text": near_dup(t[0], 0.7)}, {"id": "fN0", "text": near_dup(t[20], 0.2)},
                        {"id": "M0", "text": t[40]}]}
    index = [str(tmp / r / "work" / "00_minhash_dedup" / "index") for r in ("run1", "run2")]
    out = {"run1": run(tmp, "run1", run1, [{"stage": "minhash_dedup"}]),
           "run2": run(tmp, "run2", run2, [{"stage": "minhash_dedup", "reuse_index": index[:1]}])}
    out["run3"] = run(tmp, "run3", run3, [{"stage": "minhash_dedup", "reuse_index": index}])
    return out


def test_minhash_clusters_keep_the_longest_and_count_every_member(minhash_runs):
    kept, excluded, _ = minhash_runs["run1"]
    assert {i: d.metadata["minhash_cluster_size"] for i, d in kept.items()} == {"O0": 3, "O1": 2, "O2": 1, "O3": 1,
                                                                                  "O4": 1, "O5": 1}
    assert {i: (m["minhash_duplicate_of"], m["minhash_cluster_size"], m["filter_reason"], m["filter_stage"])
            for i, m in excluded.items()} == {"d0a": ("O0", 3, "minhash_duplicate", "00.minhash_dedup"),
                                              "d0b": ("O0", 3, "minhash_duplicate", "00.minhash_dedup"),
                                              "d1": ("O1", 2, "minhash_duplicate", "00.minhash_dedup")}


def test_minhash_copies_of_an_earlier_run_join_its_cluster(minhash_runs):
    """e0 joins O0's cluster of 3 (size 4, kept by O0); e3 is the only copy of O3, alone in its earlier cluster
    (it was kept before: a lone document matching an earlier index is dropped too)."""
    kept, excluded, _ = minhash_runs["run2"]
    assert {i: d.metadata["minhash_cluster_size"] for i, d in kept.items()} == {"N0": 2, "N1": 1, "N2": 1}
    assert {i: (m["minhash_duplicate_of"], m["minhash_cluster_size"]) for i, m in excluded.items()} == {
        "e0": ("O0", 4), "e3": ("O3", 2), "N0dup": ("N0", 2)}


def test_minhash_chained_indexes_count_one_cluster_once(minhash_runs):
    """run3 reuses run1 (O0's cluster: 3) and run2, whose index carries the same cluster, kept by O0, at 4: one
    cluster, of its largest recorded size, plus f0."""
    kept, excluded, _ = minhash_runs["run3"]
    assert {i: d.metadata["minhash_cluster_size"] for i, d in kept.items()} == {"M0": 1}
    assert {i: (m["minhash_duplicate_of"], m["minhash_cluster_size"]) for i, m in excluded.items()} == {
        "f0": ("O0", 5), "fN0": ("N0", 3)}


def test_a_filters_exclusion_record_names_stage_reason_and_score(tmp_path):
    """Language ID and a quality threshold: each dropped document's record holds the stage, the counted reason
    and the score it was dropped on, and the scores fall on the right side of the recipe's thresholds."""
    t = real_texts()
    french = ["Le chat dort sur le canapé pendant que la pluie tombe doucement sur les toits de la ville. "
              "Nous avons mangé du pain frais et du fromage avant de partir au marché du dimanche matin."] * 2
    rows = [{"id": f"en{i}", "text": t[i]} for i in range(30)] + [{"id": f"fr{i}", "text": f + f" {i}"}
                                                                 for i, f in enumerate(french)]
    stages = [{"stage": "language", "languages": {"en": 0.65}},
              {"stage": "fasttext_quality", "threshold": 0.98}]
    kept, excluded, stats = run(tmp_path, "filters", {"a.jsonl": rows}, stages)
    by_stage = {s["name"]: s for s in stats["stages"]}
    assert sum(m["filter_stage"] == "00.language" for m in excluded.values()) == sum(
        by_stage["language"]["dropped"].values()) >= 2
    for m in excluded.values():
        assert m["filter_stage"] == m["_folder"]
        if m["filter_stage"] == "00.language":
            assert m["language"] != "en" or m["language_score"] < 0.65
            assert m["filter_reason"] in ("language_other", "language_en_below_threshold")
        else:
            assert m["filter_stage"] == "01.fasttext_quality"
            assert m["fasttext_quality_score"] < 0.98 and m["filter_reason"] == "fasttext_quality_below_threshold"
    assert {"fr0", "fr1"} <= set(excluded) and any(m["filter_stage"] == "01.fasttext_quality" for m in excluded.values())
    for d in kept.values():
        assert d.metadata["language"] == "en" and d.metadata["language_score"] >= 0.65
        assert d.metadata["fasttext_quality_score"] >= 0.98


def test_a_lone_copy_of_an_earlier_runs_document_is_dropped(tmp_path):
    """The only document of a run matching a reused index was kept: the earlier run's node had no other member
    in this run, so its component was not taken for a cluster."""
    from cuvee.dedup.local_run import run_stage
    from tests._dedup_helpers import doc, kept_ids

    t = real_texts()
    run_stage("minhash_dedup", {}, [[doc(t[0], "old0"), doc(t[1], "old1")]], tmp_path / "run1")
    index = tmp_path / "run1" / "work" / "00_minhash_dedup" / "index"
    out, _ = run_stage("minhash_dedup", {"reuse_index": [str(index)]},
                       [[doc(near_dup(t[0], 0.5), "copy"), doc(t[2], "new")]], tmp_path / "run2")
    assert kept_ids(out) == [["new"]]
