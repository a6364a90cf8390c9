"""Packed loader: labels masked at document boundaries, positions restart, shuffle is a permutation,
ranks are disjoint, and a restored state yields the same batches."""

import numpy as np
import pytest

from cuvee.train.demo_data import write_shards
from cuvee.train.loader import IGNORE_INDEX, PackedLoader
from cuvee.train.permutation import FeistelPermutation
from cuvee.train.shards import open_shards

EOS = 256


def _docs(n, seed=0, lo=1, hi=40):
    rng = np.random.default_rng(seed)
    # token values encode (document, offset) so every property below can be checked from the batch alone
    return [(rng.integers(0, 200, size=int(rng.integers(lo, hi)))).astype(np.uint16) for _ in range(n)]


@pytest.fixture
def shards(tmp_path):
    docs = _docs(57)
    write_shards(tmp_path / "a", "a", docs[:30], docs_per_shard=7)
    write_shards(tmp_path / "b", "b", docs[30:], docs_per_shard=100)
    return open_shards([str(tmp_path / "a"), str(tmp_path / "b")]), docs


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_feistel_is_a_permutation(n):
    for seed in (0, 7):
        assert sorted(FeistelPermutation(n, seed)) == list(range(n))


def test_feistel_depends_on_seed_and_is_not_identity():
    a, b = list(FeistelPermutation(1000, 1)), list(FeistelPermutation(1000, 2))
    assert a != b and a != list(range(1000))


def _stream_pieces(loader, n_batches):
    """Reassemble documents from batches: (doc_index, tokens) per row segment, in reading order."""
    pieces = []
    for _ in range(n_batches):
        b = next(loader)
        for r in range(b["input_ids"].shape[0]):
            ids, dids, didx = b["input_ids"][r].numpy(), b["doc_ids"][r].numpy(), b["doc_index"][r].numpy()
            for seg in np.unique(dids):
                sel = dids == seg
                pieces.append((int(didx[sel][0]), ids[sel]))
    return pieces


def test_one_epoch_reads_every_document_exactly_once_shuffled(shards):
    ss, docs = shards
    loader = PackedLoader(ss, seq_len=16, batch_size=3, seed=5, epochs=1)
    seen = {}
    order = []
    for batch in loader:
        for r in range(batch["input_ids"].shape[0]):
            ids, dids, didx = batch["input_ids"][r].numpy(), batch["doc_ids"][r].numpy(), batch["doc_index"][r].numpy()
            for seg in np.unique(dids):
                sel = dids == seg
                d = int(didx[sel][0])
                if d < 0:
                    continue  # tail padding of the finite pass
                if not order or order[-1] != d:
                    order.append(d)
                seen.setdefault(d, []).extend(ids[sel].tolist())
    assert sorted(order) == list(range(len(docs)))  # a permutation: each document once
    assert order != sorted(order)  # and actually shuffled
    for d, toks in seen.items():  # every token of every document, EOS appended, in order
        assert toks == docs[d].tolist() + [EOS]


def test_labels_positions_and_boundary_masking(shards):
    ss, _ = shards
    loader = PackedLoader(ss, seq_len=32, batch_size=4, seed=1)
    for _ in range(5):
        b = next(loader)
        ids, labels, pos, dids = (b[k].numpy() for k in ("input_ids", "labels", "position_ids", "doc_ids"))
        for r in range(ids.shape[0]):
            for t in range(ids.shape[1] - 1):
                if dids[r, t + 1] != dids[r, t]:
                    assert labels[r, t] == IGNORE_INDEX  # next token starts another document
                    assert pos[r, t + 1] == 0  # positions restart
                else:
                    assert labels[r, t] == ids[r, t + 1]
                    assert pos[r, t + 1] == pos[r, t] + 1
            # the last label peeks at the next row's first token
        # EOS is always followed by a masked label (it ends its document)
        assert (labels[ids == EOS] == IGNORE_INDEX).all()
        # cu_seqlens cover the flattened batch at segment starts
        cu = b["cu_seqlens"].numpy()
        assert cu[0] == 0 and cu[-1] == ids.size and b["max_seqlen"] == np.diff(cu).max()


def test_last_label_continues_into_next_row(shards):
    """A row's final target is the next row's first token, unless the row ends on EOS (document end)."""
    ss, _ = shards
    loader = PackedLoader(ss, seq_len=8, batch_size=1, seed=3, shuffle=False)
    prev = next(loader)
    for _ in range(60):
        cur = next(loader)
        if prev["input_ids"][0, -1] == EOS:
            assert prev["labels"][0, -1] == IGNORE_INDEX and cur["position_ids"][0, 0] == 0
        else:
            assert prev["labels"][0, -1] == cur["input_ids"][0, 0]
            assert prev["doc_index"][0, -1] == cur["doc_index"][0, 0]
        prev = cur


def test_resume_yields_identical_batches(shards):
    ss, _ = shards
    a = PackedLoader(ss, seq_len=24, batch_size=2, seed=9)
    for _ in range(7):  # crosses an epoch boundary (57 docs, ~20 tokens each)
        next(a)
    state = a.state_dict()
    expected = [next(a) for _ in range(40)]
    b = PackedLoader(ss, seq_len=24, batch_size=2, seed=9)
    b.load_state_dict(state)
    for e in expected:
        got = next(b)
        for k in ("input_ids", "labels", "position_ids", "doc_ids", "doc_index"):
            assert (got[k] == e[k]).all()
    with pytest.raises(ValueError, match="seed"):
        PackedLoader(ss, seq_len=24, batch_size=2, seed=10).load_state_dict(state)


def test_ranks_read_disjoint_documents_covering_the_epoch(shards):
    ss, docs = shards
    seen = []
    for rank in range(3):
        loader = PackedLoader(ss, seq_len=16, batch_size=2, seed=4, rank=rank, world_size=3, epochs=1)
        seen.append({d for b in loader for d in b["doc_index"].flatten().tolist() if d >= 0})
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2]) and not (seen[0] & seen[2])
    assert set.union(*seen) == set(range(len(docs)))


def test_bad_inputs_fail_clearly(tmp_path, shards):
    ss, _ = shards
    with pytest.raises(FileNotFoundError, match="neither"):
        open_shards([str(tmp_path / "nope")])
    with pytest.raises(ValueError, match="rank"):
        PackedLoader(ss, 8, 1, rank=2, world_size=2)


def test_token_outside_vocab_is_reported(tmp_path):
    import json

    write_shards(tmp_path / "x", "x", [np.array([1, 2, 3], np.uint16), np.array([4, 300, 5], np.uint16)])
    manifest = json.loads((tmp_path / "x/manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 257
    loader = PackedLoader(open_shards(str(tmp_path / "x")), seq_len=4, batch_size=2, shuffle=False)
    with pytest.raises(ValueError, match=r"vocab_size 257 in document\(s\) \[1\]"):
        next(loader)
