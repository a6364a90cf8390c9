"""Duplicate clusters as provenance: for every document a dedup stage sees, its cluster's size and the document
kept for it, so a mix can weight by cluster size (FineWeb-2's "rehydration") and a trace can name the keeper.

A cluster is identified by its keeper's document id. The phases write, per origin rank, one
:data:`CLUSTER_RECORD` for each document of a cluster with more than one member (its position, the cluster's
size, the keeper's rank and position); the filter after the barrier (:class:`ClusterLookup`) writes
``<kind>_cluster_size`` on every document it keeps (1: no duplicate) and, on each copy it drops,
``<kind>_cluster_size`` and ``<kind>_duplicate_of`` (the keeper's id) into the exclusion record. Keeper ids are
read from the recording pass's id table (:class:`IdTextWriter`), a keeper found in an earlier run's MinHash
index from ``clusters/earlier`` (rank :data:`EARLIER`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cuvee.dedup.files import AtomicWriter, load_array, rank_file

# pos: the document's position in its rank; size: members of its cluster; (krank, kpos): its keeper
CLUSTER_RECORD = np.dtype([("pos", "<u8"), ("size", "<u8"), ("krank", "<u4"), ("kpos", "<u8")])
EARLIER = 2**32 - 1  # krank of a keeper from an earlier run's index: kpos indexes the clusters/earlier strings


def cluster_keys(kind: str) -> tuple[str, str]:
    """The metadata keys of one dedup stage: (``<kind>_cluster_size``, ``<kind>_duplicate_of``)."""
    return f"{kind}_cluster_size", f"{kind}_duplicate_of"


class StringTable:
    """Strings by index, on disk: ``<prefix>.txt`` (UTF-8, concatenated) and ``<prefix>.off.u64`` (end of each)."""

    def __init__(self, prefix: Path):
        self.ends = load_array(f"{prefix}.off.u64", np.uint64, mmap=True)
        self.blob = load_array(f"{prefix}.txt", np.uint8, mmap=True)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> str:
        a = int(self.ends[i - 1]) if i else 0
        return bytes(self.blob[a:int(self.ends[i])]).decode("utf-8", "surrogatepass")

    @staticmethod
    def exists(prefix: Path) -> bool:
        return Path(f"{prefix}.off.u64").exists() and Path(f"{prefix}.txt").exists()


class StringTableWriter:
    """Appends strings to a :class:`StringTable`; it appears under its names only when closed without error."""

    def __init__(self, prefix: Path):
        self.off = AtomicWriter(f"{prefix}.off.u64")
        self.txt = AtomicWriter(f"{prefix}.txt")
        self.end = 0

    def write(self, strings: list[str]) -> None:
        if not strings:
            return
        enc = [s.encode("utf-8", "surrogatepass") for s in strings]
        ends = self.end + np.cumsum(np.fromiter(map(len, enc), dtype=np.uint64, count=len(enc)), dtype=np.uint64)
        self.off.write(ends)
        self.txt.write(np.frombuffer(b"".join(enc), dtype=np.uint8))
        self.end = int(ends[-1])

    def copy_from(self, prefix: Path) -> None:
        """Appends every string of the table at ``prefix`` (its bytes, not decoded)."""
        if not StringTable.exists(prefix):
            return
        ends = load_array(f"{prefix}.off.u64", np.uint64)
        if len(ends):
            self.off.write(ends + np.uint64(self.end))
            self.txt.write(load_array(f"{prefix}.txt", np.uint8))
            self.end += int(ends[-1])

    def close(self, ok: bool = True) -> None:
        for w in (self.off, self.txt):
            w.close() if ok else w.abort()


def id_table_prefix(folder: Path, rank: int) -> Path:
    """One rank's document ids as text, in position order (written by the recording pass)."""
    return rank_file(Path(folder) / "ids", rank, "id")


class IdTextWriter(StringTableWriter):
    """The recording pass's document ids as text, so a phase can name a keeper in any rank."""

    def __init__(self, folder: Path, rank: int):
        super().__init__(id_table_prefix(folder, rank))

    def write_docs(self, docs: list) -> None:
        self.write([str(d.id) for d in docs])


def save_cluster_records(path: Path, parts: list[np.ndarray]) -> None:
    """One rank's cluster records, sorted by position."""
    arr = np.concatenate(parts) if parts else np.zeros(0, dtype=CLUSTER_RECORD)
    with AtomicWriter(path) as w:
        w.write(arr[np.argsort(arr["pos"], kind="stable")])


class ClusterLookup:
    """The cluster records of one rank (``files``), looked up by position in the filter after the barrier."""

    def __init__(self, folder: Path, files: list[Path], kind: str):
        recs = [load_array(f, CLUSTER_RECORD) for f in files]
        self.recs = np.concatenate(recs) if recs else np.zeros(0, dtype=CLUSTER_RECORD)
        self.recs = self.recs[np.argsort(self.recs["pos"], kind="stable")]
        self.folder = Path(folder)
        self.size_key, self.of_key = cluster_keys(kind)
        self._tables: dict[int, StringTable] = {}

    def annotate(self, batch: list, start: int, verdicts: list, name_keepers: bool) -> None:
        """Writes the cluster size on each document of ``batch`` (positions ``start``..), and on the dropped ones
        (verdict not True) the keeper's id when ``name_keepers`` (an exclusion record will hold them)."""
        key = self.size_key
        for d in batch:
            d.metadata[key] = 1
        lo, hi = np.searchsorted(self.recs["pos"], np.array([start, start + len(batch)], dtype=np.uint64)).tolist()
        for r in self.recs[lo:hi]:
            i = int(r["pos"]) - start
            batch[i].metadata[key] = int(r["size"])
            if name_keepers and verdicts[i] is not True:
                batch[i].metadata[self.of_key] = self.keeper(int(r["krank"]), int(r["kpos"]))

    def keeper(self, krank: int, kpos: int) -> str:
        table = self._tables.get(krank)
        if table is None:
            prefix = self.folder / "clusters" / "earlier" if krank == EARLIER else id_table_prefix(self.folder, krank)
            table = self._tables[krank] = StringTable(prefix)
        return table[kpos]
