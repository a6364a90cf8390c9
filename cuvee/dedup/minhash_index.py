"""A MinHash dedup run's index: its band keys, for later runs to dedup against, and the duplicate cluster of every
document that holds them, so a later run's copy is counted into that cluster and names its keeper.

Layout of an index folder (format ``cuvee-minhash-index-v2``; v1 indexes held the band keys only)::

    index.json            the hash settings (a later run must use the same)
    bandNNN.u64           sorted distinct keys of band NNN over every document of the run, kept or dropped
    bandNNN.gid.u64       for each key, a document holding it (rank << 40 | position)
    ranks.u64             each rank's first document number (number = ranks[rank] + position)
    cluster.u64           per document number: the string number of its cluster's keeper
    size.u64              per string number: the size of that string's cluster (earlier indexes' members included)
    ids.txt, ids.off.u64  the strings: the run's document ids by number, then keepers from indexes it reused

Documents sharing a band key share a cluster (their keys matched), so a key names one cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cuvee.dedup.clusters import StringTable
from cuvee.dedup.files import load_array
from cuvee.dedup.minhash import MinHashConfig, MinHasher

FORMAT = "cuvee-minhash-index-v2"
POS_BITS = 40  # a run's document id: rank << 40 | position
POS_MASK = np.uint64(2**POS_BITS - 1)
EARLIER_REF = np.uint64(1 << 63)  # edge target: a cluster of reused index i, EARLIER_REF | i << 48 | string number
REF_BITS = 48
MEMBER_FILES = ("ranks.u64", "cluster.u64", "size.u64", "ids.txt", "ids.off.u64")


def index_description(cfg: MinHashConfig) -> dict:
    return {"format": FORMAT, "n_grams": cfg.n_grams, "num_bands": cfg.num_bands,
            "rows_per_band": cfg.rows_per_band, "seed": cfg.seed, "backend": cfg.backend,
            "fingerprint": MinHasher(cfg).fingerprint()}


def check_index(path: str | Path, cfg: MinHashConfig) -> Path:
    """An earlier index is usable only with the same hash functions and its cluster records; say what differs."""
    path = Path(path)
    desc_path = path / "index.json"
    if not desc_path.exists():
        raise ValueError(f"minhash_dedup.reuse_index: {path} is not a MinHash index (no index.json)")
    theirs = json.loads(desc_path.read_text())
    if theirs.get("format") != FORMAT:
        raise ValueError(f"minhash_dedup.reuse_index: {path} is a {theirs.get('format')} index, without the cluster "
                         f"records of {FORMAT}: rebuild it by rerunning its run with --fresh")
    ours = index_description(cfg)
    diff = {k: (theirs.get(k), v) for k, v in ours.items() if theirs.get(k) != v}
    if diff:
        raise ValueError(f"minhash_dedup.reuse_index: {path} was built with other settings "
                         f"(key: (index, this run)): {diff}")
    missing = [b for b in range(cfg.num_bands) if not (path / f"band{b:03d}.u64").exists()
               or not (path / f"band{b:03d}.gid.u64").exists()]
    if missing:
        raise ValueError(f"minhash_dedup.reuse_index: {path} lacks bands {missing} (index phase not finished?)")
    absent = [f for f in MEMBER_FILES if not (path / f).exists()]
    if absent:
        raise ValueError(f"minhash_dedup.reuse_index: {path} lacks {', '.join(absent)} (its clusters phase did not "
                         "finish)")
    return path


class EarlierIndex:
    """One reused index (number ``number`` in the run's ``reuse_index`` list), read lazily through memory maps."""

    def __init__(self, path: Path, number: int):
        self.path, self.number = Path(path), number
        self._ranks = self._cluster = self._size = self._strings = None

    def band(self, band: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted keys, a document holding each) of one band."""
        return (load_array(self.path / f"band{band:03d}.u64", np.uint64, mmap=True),
                load_array(self.path / f"band{band:03d}.gid.u64", np.uint64, mmap=True))

    def band_with_refs(self, band: int):
        """(sorted keys of one band, ``refs(positions)``: the edge target of the keys at those positions)."""
        keys, gids = self.band(band)
        return keys, lambda positions: self.refs(np.asarray(gids[positions]))

    def refs(self, gids: np.ndarray) -> np.ndarray:
        """Edge targets naming the cluster of each of this index's documents ``gids``."""
        if self._ranks is None:
            self._ranks = load_array(self.path / "ranks.u64", np.uint64)
            self._cluster = load_array(self.path / "cluster.u64", np.uint64, mmap=True)
        number = self._ranks[(gids >> np.uint64(POS_BITS)).astype(np.int64)] + (gids & POS_MASK)
        return EARLIER_REF | np.uint64(self.number << REF_BITS) | self._cluster[number.astype(np.int64)]

    def cluster(self, string: int) -> tuple[int, str]:
        """(size, keeper id) of the cluster kept by string number ``string``."""
        if self._strings is None:
            self._size = load_array(self.path / "size.u64", np.uint64, mmap=True)
            self._strings = StringTable(self.path / "ids")
        return int(self._size[string]), self._strings[string]


class EarlierClusters:
    """The clusters of reused indexes that this run's documents matched, one union-find node each: refs naming the
    same keeper (one cluster seen through two chained indexes) are one node, of the largest size recorded."""

    def __init__(self, refs: np.ndarray, indexes: list[Path]):
        self.refs = np.unique(refs)
        opened = [EarlierIndex(p, i) for i, p in enumerate(indexes)]
        found = [opened[int(r >> np.uint64(REF_BITS)) & 0x7FFF].cluster(int(r & np.uint64(2**REF_BITS - 1)))
                 for r in self.refs]
        self.keepers = sorted({k for _, k in found})
        number = {k: i for i, k in enumerate(self.keepers)}
        self.node_of_ref = np.array([number[k] for _, k in found], dtype=np.int64)
        self.sizes = np.zeros(len(self.keepers), dtype=np.uint64)
        for (size, _), node in zip(found, self.node_of_ref):
            self.sizes[node] = max(int(self.sizes[node]), size)

    def __len__(self) -> int:
        return len(self.keepers)

    def nodes(self, refs: np.ndarray) -> np.ndarray:
        return self.node_of_ref[np.searchsorted(self.refs, refs)]

    @classmethod
    def from_edge_files(cls, files: list[Path], indexes: list[Path]) -> EarlierClusters:
        refs = [np.unique(load_array(f, np.uint64).reshape(-1, 2)[:, 1]) for f in files if f.exists()]
        return cls(np.concatenate(refs) if refs else np.zeros(0, dtype=np.uint64), indexes)
