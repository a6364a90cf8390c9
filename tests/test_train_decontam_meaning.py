"""The anneal's eval hygiene by meaning (issue #35): an eval document paraphrased in an arm's training data is left
out, with its evidence, where the token n-gram checks see nothing. Real shards, the shipped MiniLM; the paraphrase
groups are test_semantic_dedup's (cosine 0.87-0.96 inside a group, at most 0.34 across, measured with this
encoder)."""

from __future__ import annotations

import pytest

from cuvee.train.anneal import AnnealConfig, _clean_eval_sets
from cuvee.train.demo_data import encode_bytes, write_shards
from cuvee.train.shards import open_shards
from tests.test_semantic_dedup import GROUPS, UNRELATED

EVAL = [g[0] for g in GROUPS] + UNRELATED[:2]  # eval documents 0-3: the first sentence of each group


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("meaning")
    candidate = [GROUPS[0][1], GROUPS[2][1]] + UNRELATED[2:5]  # paraphrases of eval documents 0 and 2
    control = [GROUPS[3][1]] + UNRELATED[5:]  # a paraphrase of eval document 3
    for name, texts in (("candidate", candidate), ("control", control), ("ev", EVAL)):
        write_shards(d / name, name, [encode_bytes(t) for t in texts])
    return d


def test_paraphrased_eval_documents_are_removed_with_their_evidence(shards, capsys):
    ac = AnnealConfig(checkpoint="unused.pt", candidate=[str(shards / "candidate")], control=[str(shards / "control")],
                      tokens=1, eval={"ev": str(shards / "ev")}, eval_docs=len(EVAL), decontam_meaning=0.8,
                      max_eval_loss_share=1.0)
    keep, info = _clean_eval_sets(ac, {"ev": open_shards(str(shards / "ev"))}, say=print)
    d = info["ev"]
    assert d["overlap"] == 0  # the 13-gram and Jaccard checks see none of the paraphrases
    assert keep["ev"].tolist() == [1, 4, 5] and d["overlap_by_meaning"] == 3 and d["scored"] == 3
    evidence = {r["document"]: (r["source"], r["train_document"]) for r in d["by_meaning"]["removed"]}
    assert evidence == {0: (0, 0), 2: (0, 1), 3: (1, 0)}  # source 0: candidate, 1: control
    assert all(0.8 <= r["cosine"] <= 1 for r in d["by_meaning"]["removed"])
    assert "3 by meaning" in capsys.readouterr().out


def test_without_the_option_nothing_is_embedded(shards):
    ac = AnnealConfig(checkpoint="unused.pt", candidate=[str(shards / "candidate")], control=[str(shards / "control")],
                      tokens=1, eval={"ev": str(shards / "ev")}, eval_docs=len(EVAL))
    keep, info = _clean_eval_sets(ac, {"ev": open_shards(str(shards / "ev"))}, say=lambda m: None)
    assert keep["ev"].tolist() == list(range(len(EVAL))) and "overlap_by_meaning" not in info["ev"]
