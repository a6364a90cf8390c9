"""Each document's source read from a mix's per-document index equals what the old replay recovered, on the mixes
of the existing tests, and so do the per-arm source shares an anneal measures (issue #34).

Until issue #34, ``cuvee/train/shards.py`` re-derived every document's source by re-running the mixer's greedy
token-deficit rule over the shards' document lengths (``_replay_sources``). That code is gone from cuvee; it is
kept below, as it was, as the second implementation: the index (written by the mixer as it blends) and the replay
(computed from the lengths afterwards) must agree on every document of the mixes that ``test_anneal_pieces``,
``test_train_loader_mix_order``, ``test_mixer_shards`` and ``test_mixer_where`` (selections) build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvee.mixer import run_mix
from cuvee.mixer.docindex import MixIndex
from cuvee.mixer.indexed import IndexedDataset
from cuvee.train.arm_shares import measured_shares
from cuvee.train.config import TrainConfig
from cuvee.train.loader import PackedLoader, realised_shares
from cuvee.train.piece_blend import ArmSources, arm_sources
from cuvee.train.shards import _folder_manifest, open_shards
from tests import test_anneal_pieces, test_mixer_shards, test_mixer_where, test_train_loader_mix_order

SEQ = test_anneal_pieces.SEQ
# the existing tests' fixtures, under names of their own here
pieces_data, order_mix = test_anneal_pieces.data, test_train_loader_mix_order.mix
shards_corpus, shards_config = test_mixer_shards.corpus, test_mixer_shards._config
where_corpus, where_config = test_mixer_where.corpus, test_mixer_where._config


def replay_sources(directory: Path, manifest: dict) -> dict[str, np.ndarray] | None:
    """Per-document source ids of a sidecar-less mix, by replaying the greedy blend over document lengths."""
    shards, sources = manifest.get("shards") or [], manifest.get("sources") or []
    if not str(manifest.get("blend", "")).startswith("greedy token deficit"):
        return None
    weights = [s.get("weight") for s in sources]
    if not shards or not weights or any(not isinstance(w, (int, float)) or w < 0 for w in weights) or not sum(weights):
        return None
    total = sum(weights)
    w = [x / total for x in weights]  # the same arithmetic as cuvee.mixer.blend.greedy_blend
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))
    counts, emitted, result = [0] * len(w), 0, {}
    try:
        for entry in shards:
            lengths = IndexedDataset(directory / entry["prefix"]).sequence_lengths
            ids = np.empty(len(lengths), dtype=np.uint16)
            shard_tokens = [0] * len(w)
            for k, n in enumerate(lengths.tolist()):
                best, best_deficit = -1, None
                for i in order:
                    d = w[i] * emitted - counts[i]
                    if best_deficit is None or d > best_deficit:
                        best, best_deficit = i, d
                ids[k] = best
                counts[best] += n
                shard_tokens[best] += n
                emitted += n
            if list(entry.get("source_tokens") or []) != shard_tokens:  # unverifiable or not this rule
                return None
            result[entry["prefix"]] = ids
    except (OSError, ValueError, KeyError):
        return None
    return result


def replayed_ids(shards) -> tuple[list[str], np.ndarray]:
    """(names, source of every global document) of one mix folder's shards, by the replay."""
    folder = Path(shards.datasets[0].prefix).parent.resolve()
    manifest = _folder_manifest(folder)
    replayed = replay_sources(folder, manifest)
    assert replayed is not None, "the replay recovers every document of these mixes"
    names = [s["name"] for s in manifest["sources"]]
    return names, np.concatenate([replayed[Path(ds.prefix).name] for ds in shards.datasets]).astype(np.int64)


def _same_sources(folder) -> None:
    shards = open_shards(str(folder))
    names, replay = replayed_ids(shards)
    index = MixIndex(folder, _folder_manifest(Path(folder)))  # the index as written, read directly
    written = np.concatenate([index.records(Path(ds.prefix).name)["source"] for ds in shards.datasets])
    assert np.array_equal(written, replay)
    assert shards.source_names == names  # and as the trainer reads it
    read = shards.source_ids()
    assert len(read) == shards.num_documents and np.array_equal(read, replay)


def test_index_equals_replay_on_the_anneal_arms(pieces_data):
    _, arms = pieces_data
    for arm in arms.values():
        _same_sources(arm)


def test_index_equals_replay_on_the_loader_order_mix(order_mix):
    shards, manifest = order_mix
    _same_sources(Path(shards.datasets[0].prefix).parent)
    names, replay = replayed_ids(shards)
    for order in ("global", "mix", "window"):  # the loader's realised shares: from the index vs from the replay
        rows = realised_shares(shards, 12, seq_len=64, batch_size=2, order=order, seed=3, window=16)
        loader = PackedLoader(shards, 64, 2, seed=3, order=order, window=16)
        counts = np.zeros(len(names), dtype=np.int64)
        for _ in range(12):
            idx = next(loader)["doc_index"].numpy().reshape(-1)
            counts += np.bincount(replay[idx[idx >= 0]], minlength=len(names))
        assert rows[-1]["source_tokens"] == {n: int(c) for n, c in zip(names, counts)}


def test_index_equals_replay_on_the_mixer_and_selection_mixes(shards_corpus, where_corpus, tmp_path):
    run_mix(shards_config(shards_corpus), out_dir=tmp_path / "shards")
    _same_sources(tmp_path / "shards")
    run_mix(where_config(where_corpus), out_dir=tmp_path / "where")
    _same_sources(tmp_path / "where")


@pytest.mark.parametrize("arm_name", ["cand", "ctrl"])
def test_anneal_arm_shares_from_the_index_equal_those_from_the_replay(pieces_data, arm_name):
    """What the anneal report gives per arm and seed (``measured_shares``: the trained steps read by the loader in
    ``order: pieces``) equals the shares of the same loader blending by the replay's sources."""
    tmp, arms = pieces_data
    shards = open_shards(arms[arm_name])
    names, replay = replayed_ids(shards)
    index_arm = arm_sources(shards)
    for seed in (0, 1):
        cfg = TrainConfig(name="arm", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2,
                                             "max_seq_len": SEQ},
                          data={"paths": [arms[arm_name]], "seq_len": SEQ, "seed": seed, "order": "pieces"},
                          steps=6, micro_batch=2, out_dir=str(tmp / "unused"), threads=1)
        shares = measured_shares(cfg)
        loader = PackedLoader(shards, SEQ, 2, seed=seed, order="pieces")
        loader._arm = ArmSources(names, index_arm.weights, replay.astype(np.int16), "the replay")  # second way
        loader._view_cache = None
        counts = np.zeros(len(names), dtype=np.int64)
        for _ in range(6):
            idx = next(loader)["doc_index"].numpy().reshape(-1)
            counts += np.bincount(replay[idx[idx >= 0]], minlength=len(names))
        assert shares["method"].startswith("loader: realised over the 6 steps")
        assert shares["shares"] == {n: float(c) / counts.sum() for n, c in zip(names, counts)}
        assert shares["tokens"] == counts.sum() == 6 * 2 * SEQ
