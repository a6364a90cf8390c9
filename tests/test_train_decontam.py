"""Eval decontamination: exact and near-duplicate overlap with training, and duplicates within the eval set,
are removed and counted; clean documents (even ones sharing a short phrase) and sub-threshold near-duplicates
are kept."""

import numpy as np
import pytest

from cuvee.train.decontam import _hasher, decontaminate, eval_subset, jaccard, lsh_bands, shingles, signatures
from cuvee.train.demo_data import BYTE_TOKENIZER, write_shards
from cuvee.train.loader import PackedLoader
from cuvee.train.shards import open_shards

EOS = 256
RNG = np.random.default_rng(1234)


def _doc(n):
    return RNG.integers(0, 256, size=n).astype(np.uint16)


def _edit(doc, k, seed=0):
    """k tokens changed, spread evenly over the document (each kills at most ngram shingles)."""
    out = doc.copy()
    for p in np.linspace(20, len(doc) - 20, k).astype(int):
        out[p] = (int(out[p]) + 1 + seed) % 256
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decontam")
    train_a = [_doc(int(RNG.integers(200, 600))) for _ in range(40)]
    train_a[7] = _doc(1000)
    train_a[11] = np.array([5, 6, 7, 8, 9], dtype=np.uint16)  # shorter than the 13-token shingle
    train_b = [_doc(int(RNG.integers(200, 600))) for _ in range(20)]
    train_b[3] = _doc(1000)
    clean0 = _doc(800)
    with_phrase = np.concatenate([_doc(300), train_a[2][:30], _doc(300)]).astype(np.uint16)
    evals = [
        clean0,                                        # 0 clean: kept
        train_a[5].copy(),                             # 1 exact copy of training A doc 5
        _edit(train_b[3], 3),                          # 2 near copy of training B doc 3 (Jaccard ~0.92)
        with_phrase,                                   # 3 shares one 30-token phrase with training: kept
        clean0.copy(),                                 # 4 exact duplicate of eval doc 0
        _edit(train_a[7], 12),                         # 5 near copy of A doc 7 below the threshold: kept
        _edit(clean0, 2, seed=3),                      # 6 near duplicate of eval doc 0
        train_a[11].copy(),                            # 7 short, exact copy of A doc 11
        np.array([9, 8, 7], dtype=np.uint16),          # 8 short, not in training: kept
        np.append(train_b[8], EOS).astype(np.uint16),  # 9 B doc 8 with a trailing EOS: exact
    ]
    write_shards(tmp / "a", "a", train_a, docs_per_shard=7)
    write_shards(tmp / "b", "b", train_b, docs_per_shard=6)
    write_shards(tmp / "ev", "ev", evals, docs_per_shard=4)
    return {"tmp": tmp, "train_a": train_a, "train_b": train_b, "evals": evals,
            "sources": [str(tmp / "a"), str(tmp / "b")], "eval": {"ev": str(tmp / "ev")}}


def test_planted_duplicates_are_removed_and_counted(planted):
    h = _hasher(13, 0.8, 128, 1)
    ev, ta, tb = planted["evals"], planted["train_a"], planted["train_b"]
    j_near = jaccard(shingles(ev[2], h), shingles(tb[3], h))
    j_below = jaccard(shingles(ev[5], h), shingles(ta[7], h))
    assert 0.85 < j_near < 0.97 and 0.5 < j_below < 0.8  # the planted similarities are what the test claims
    assert jaccard(shingles(ev[3], h), shingles(ta[2], h)) < 0.05

    keep, report = decontaminate(planted["eval"], planted["sources"])
    assert keep == {"ev": [0, 3, 5, 8]}
    r = report["eval_sets"]["ev"]
    assert {k: r[k] for k in ("documents", "duplicates_within_eval", "exact_within_eval", "near_within_eval",
                              "exact_overlap", "near_overlap", "kept", "short_documents")} == {
        "documents": 10, "duplicates_within_eval": 2, "exact_within_eval": 1, "near_within_eval": 1,
        "exact_overlap": 3, "near_overlap": 1, "kept": 4, "short_documents": 2}
    removed = {x["index"]: x for x in r["removed"]}
    assert sorted(removed) == [1, 2, 4, 6, 7, 9]
    assert (removed[1]["reason"], removed[1]["document"], removed[1]["source"][-1]) == ("exact_overlap", 5, "a")
    assert (removed[2]["reason"], removed[2]["document"], removed[2]["source"][-1]) == ("near_overlap", 3, "b")
    assert removed[2]["jaccard"] == pytest.approx(j_near, abs=1e-4)
    assert removed[4] == {"index": 4, "reason": "duplicate_within_eval", "kind": "exact", "of": 0}
    assert removed[6]["reason"] == "duplicate_within_eval" and removed[6]["kind"] == "near" and removed[6]["of"] == 0
    assert removed[7]["reason"] == "exact_overlap" and removed[7]["document"] == 11
    assert removed[9]["reason"] == "exact_overlap" and removed[9]["document"] == 8

    a, b = report["train_sources"]
    assert (a["documents"], a["exact_matches"], a["near_matches"], a["matches"]) == (40, 2, 0, 2)
    assert (b["documents"], b["exact_matches"], b["near_matches"], b["matches"]) == (20, 1, 1, 2)
    # the sub-threshold near copy became an LSH candidate and was rejected by the exact Jaccard
    assert a["verified_below_threshold"] >= 1
    p = report["parameters"]
    assert (p["ngram"], p["threshold"], p["bands"], p["rows_per_band"]) == (13, 0.8, 25, 5)
    assert p["recall_at_threshold"] > 0.999


def test_threshold_decides_the_sub_threshold_near_copy(planted):
    keep, report = decontaminate(planted["eval"], planted["sources"], threshold=0.5)
    assert keep == {"ev": [0, 3, 8]}
    assert report["eval_sets"]["ev"]["near_overlap"] == 2


def test_same_result_chunked_numpy_and_opened_shards(planted):
    base = decontaminate(planted["eval"], planted["sources"])[0]
    opened = {"ev": open_shards(planted["eval"]["ev"])}
    assert decontaminate(opened, [open_shards(s) for s in planted["sources"]], chunk_tokens=700)[0] == base
    assert decontaminate(planted["eval"], planted["sources"], use_numba=False)[0] == base


def test_max_docs_is_the_pool_and_clean_training_keeps_everything(planted):
    keep, report = decontaminate(planted["eval"], planted["sources"], max_docs=4)
    assert keep == {"ev": [0, 3]} and report["eval_sets"]["ev"]["documents"] == 4
    keep, report = decontaminate({"ev": planted["eval"]["ev"], "again": planted["eval"]["ev"]}, [])
    assert keep["ev"] == keep["again"] == [0, 1, 2, 3, 5, 7, 8, 9]  # only the within-set duplicates go


def test_numba_and_numpy_signatures_agree():
    h = _hasher(13, 0.8, 128, 1)
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50_000, size=int(n)).astype(np.int32) for n in rng.integers(1, 300, size=50)]
    s1, has1 = signatures(docs, h, use_numba=True)
    s2, has2 = signatures(docs, h, use_numba=False)
    assert (has1 == has2).all() and (s1 == s2).all() and (~has1).sum() > 0


def test_lsh_bands_recall():
    assert lsh_bands(128, 0.8) == (25, 5)
    bands, rows = lsh_bands(64, 0.9)
    assert 1 - (1 - 0.9 ** rows) ** bands >= 0.999


def test_tokenizer_mismatch_is_refused(planted, tmp_path):
    write_shards(tmp_path / "other", "other", [_doc(50)], tokenizer={**BYTE_TOKENIZER, "name": "latin1"})
    with pytest.raises(ValueError, match="tokenizer"):
        decontaminate(planted["eval"], [str(tmp_path / "other")])


def test_eval_subset_reads_only_the_kept_documents(planted):
    shards = open_shards(planted["eval"]["ev"])
    sub = eval_subset(shards, [0, 3, 5, 8])
    assert sub.num_documents == 4 and sub.eos_id == EOS
    assert np.array_equal(sub.document(2), planted["evals"][5]) and sub.document_length(3) == 3
    loader = PackedLoader(sub, seq_len=4096, batch_size=1, shuffle=False, epochs=1, add_eos=False)
    batch = next(iter(loader))
    ids, didx = batch["input_ids"][0].numpy(), batch["doc_index"][0].numpy()
    for k, i in enumerate([0, 3, 5, 8]):
        got = ids[didx == k]
        want = planted["evals"][i]
        assert np.array_equal(got[:len(want)], want)
    with pytest.raises(IndexError):
        eval_subset(shards, [10])
