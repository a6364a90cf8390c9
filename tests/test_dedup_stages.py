"""Each dedup stage on small corpora with known duplicates, run as its real sharded datatrove jobs."""

import pytest

from cuvee.dedup.local_run import run_stage
from tests._dedup_helpers import counters, doc, kept_ids, quiet, real_texts

quiet()


def test_url_dedup_keeps_latest_then_longest(tmp_path):
    t = real_texts()
    ranks = [
        [doc(t[0], "a0", url="http://www.site.com/page?utm_source=feed", date="2021-03-01T00:00:00Z"),
         doc(t[1], "a1", url="https://other.org/x"),
         doc(t[2] + " more", "a2", url="https://site.com/page", date="2024-05-01T00:00:00Z"),
         doc("no url here", "a3")],
        [doc(t[2], "b0", url="https://site.com/page/", date="2024-05-01T00:00:00Z"),  # same date, shorter
         doc(t[3], "b1", url="https://other.org/x#frag", date="2020-01-01")],
    ]
    out, c = run_stage("url_dedup", {}, ranks, tmp_path)
    assert kept_ids(out) == [["a2", "a3"], ["b1"]]
    f = counters(c, "seg01", "dedup filter")
    assert f["dropped_url_duplicate"] == 3 and f["total"] == 6
    assert counters(c, "seg00", "dedup keys")["no_key"] == 1


def test_exact_dedup_normalised_text_first_copy_kept(tmp_path):
    t = real_texts()
    ranks = [[doc(t[0], "a0"), doc(t[1], "a1"), doc("  " + t[0].upper() + "\n", "a2")],
             [doc(t[1].replace(" ", "  "), "b0"), doc(t[2], "b1"), doc(t[2][:-1], "b2")]]
    out, c = run_stage("exact_dedup", {}, ranks, tmp_path)
    assert kept_ids(out) == [["a0", "a1"], ["b1", "b2"]]
    assert counters(c, "seg01", "dedup filter")["dropped_exact_duplicate"] == 2


def test_line_dedup_removes_lines_seen_in_k_documents(tmp_path):
    t = real_texts()
    boiler = ["Accept all cookies", "Subscribe to our newsletter!", "Copyright 2024 Example Media"]
    docs = []
    for i in range(12):
        lines = t[i].split("\n")
        if i < 7:  # 7 documents carry the boilerplate (k = 6); the copyright year varies: digits are normalised
            lines = [boiler[0]] + lines + [boiler[1], boiler[2].replace("2024", str(2010 + i))]
        docs.append(doc("\n".join(lines), f"d{i}"))
    docs.append(doc("\n".join(boiler), "only_boiler"))
    docs.append(doc("Accept all cookies\nshort tail", "short"))
    ranks = [docs[:7], docs[7:]]
    out, c = run_stage("line_dedup", {"min_occurrences": 6, "min_words": 3}, ranks, tmp_path)
    kept = {d.id: d.text for r in out for d in r}
    assert "only_boiler" not in kept and "short" not in kept
    for i in range(12):
        assert kept[f"d{i}"] == t[i].strip()  # boilerplate gone, the page's own lines intact
    f = counters(c, "seg01", "line dedup")
    assert f["dropped_empty_after_line_dedup"] == 1 and f["dropped_too_short_after_line_dedup"] == 1
    removed = [ln for d in docs[:7] for ln in d.text.split("\n")[:1] + d.text.split("\n")[-2:]] + boiler + ["Accept all cookies"]
    assert f["lines_removed"] == len(removed)
    assert f["chars_removed"] == sum(len(x) + 1 for x in removed)


def test_line_dedup_buckets_are_independent(tmp_path):
    t = real_texts()
    docs = [doc(t[i] + "\nShared footer line", f"d{i}") for i in range(8)]
    # buckets of 4 documents: the footer occurs 4 times per bucket, below k = 5 -> kept everywhere
    out, _ = run_stage("line_dedup", {"bucket_size": 4, "min_occurrences": 5}, [docs[:5], docs[5:]], tmp_path / "a")
    assert all(d.text.endswith("Shared footer line") for r in out for d in r)
    out, _ = run_stage("line_dedup", {"bucket_size": 8, "min_occurrences": 5}, [docs[:5], docs[5:]], tmp_path / "b")
    assert not any(d.text.endswith("Shared footer line") for r in out for d in r)


def test_line_dedup_lookup_chunks_do_not_change_decisions(tmp_path, monkeypatch):
    """The filter looks lines up CHUNK_DOCS documents at a time; chunks of 2, crossing bucket ends, give the same
    texts and counters as one chunk per bucket."""
    from cuvee.dedup.line_dedup import LineDedupFilter

    t = real_texts()
    docs = [doc(t[i] + ("\nShared footer line\nAccept all cookies" if i % 3 else ""), f"d{i}") for i in range(23)]
    ranks = [docs[:9], docs[9:17], docs[17:]]
    params = {"bucket_size": 7, "min_occurrences": 3, "min_words": 0}
    runs = []
    for chunk in (4096, 2):
        monkeypatch.setattr(LineDedupFilter, "CHUNK_DOCS", chunk)
        out, c = run_stage("line_dedup", params, ranks, tmp_path / str(chunk))
        runs.append(([[(d.id, d.text) for d in r] for r in out], counters(c, "seg01", "line dedup")))
    assert runs[0] == runs[1]
    assert 0 < runs[0][1]["lines_removed"] < 2 * len(docs)


def _near_dup(text: str, frac: float) -> str:
    w = text.split()
    k = max(1, int(len(w) * frac))
    return " ".join(w[:len(w) // 3] + w[len(w) // 3 + k:])


def test_minhash_removes_near_duplicates_keeps_longest(tmp_path):
    t = real_texts()
    originals = [t[i] for i in range(20)]
    docs = [doc(x, f"o{i}") for i, x in enumerate(originals)]
    docs += [doc(_near_dup(originals[i], 0.02), f"n{i}") for i in range(5)]  # J ~ 0.95: always caught
    docs += [doc(" ".join(originals[i].split()[: len(originals[i].split()) // 4]), f"q{i}") for i in range(5, 8)]  # J ~ 0.25
    ranks = [docs[:14], docs[14:]]
    out, c = run_stage("minhash_dedup", {}, ranks, tmp_path)
    kept = {d.id for r in out for d in r}
    assert {f"o{i}" for i in range(20)} <= kept  # the longer original wins each cluster
    assert not kept & {f"n{i}" for i in range(5)}
    assert {"q5", "q6", "q7"} <= kept
    cl = counters(c, "minhash_clusters", "clusters")
    assert cl["clusters"] == 5 and cl["duplicates"] == 5
    assert counters(c, "seg01", "dedup filter")["dropped_minhash_duplicate"] == 5


def test_minhash_backends_agree_on_clear_cases(tmp_path):
    t = real_texts()
    docs = [doc(t[i], f"o{i}") for i in range(10)] + [doc(_near_dup(t[i], 0.01), f"n{i}") for i in range(4)]
    res = {}
    for be in ("numba", "numpy", "rensa"):
        out, _ = run_stage("minhash_dedup", {"backend": be}, [docs], tmp_path / be)
        res[be] = kept_ids(out)
    assert res["numba"] == res["numpy"] == res["rensa"] == [[f"o{i}" for i in range(10)]]


def test_minhash_index_reuse_across_runs(tmp_path):
    t = real_texts()
    first = [doc(t[i], f"old{i}") for i in range(10)]
    run_stage("minhash_dedup", {}, [first], tmp_path / "run1")
    index = tmp_path / "run1" / "work" / "00_minhash_dedup" / "index"
    assert (index / "index.json").exists()
    second = [doc(_near_dup(t[i], 0.02), f"copy{i}") for i in range(4)] + [doc(t[i], f"new{i}") for i in range(10, 16)]
    second += [doc(_near_dup(t[12], 0.01), "newdup")]
    out, c = run_stage("minhash_dedup", {"reuse_index": [str(index)]}, [second[:6], second[6:]], tmp_path / "run2")
    kept = {d.id for r in out for d in r}
    assert kept == {f"new{i}" for i in range(10, 16)}
    cl = counters(c, "minhash_clusters", "clusters")
    assert cl["matched_earlier_index"] == 4 and cl["duplicates"] == 5


def test_minhash_index_with_other_settings_is_refused(tmp_path):
    t = real_texts()
    run_stage("minhash_dedup", {}, [[doc(t[0], "x")]], tmp_path / "run1")
    index = tmp_path / "run1" / "work" / "00_minhash_dedup" / "index"
    with pytest.raises(ValueError, match="other settings"):
        run_stage("minhash_dedup", {"reuse_index": [str(index)], "num_bands": 20}, [[doc(t[1], "y")]], tmp_path / "r2")
    with pytest.raises(ValueError, match="not a MinHash index"):
        run_stage("minhash_dedup", {"reuse_index": [str(tmp_path)]}, [[doc(t[1], "y")]], tmp_path / "r3")
