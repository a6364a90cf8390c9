"""Per-rank files that survive a killed and rerun task: written to the kernel's temporary name (which the stale-file
sweep of the rerun removes), renamed when complete."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xxhash

from cuvee.kernel.atomic import rename_into_place, temp_path


class AtomicWriter:
    """A binary file that appears under its final name only when closed without error.

    A rerun of a killed task simply writes the same content again: no partial file is ever read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_path(self.path)
        self._f = open(self.tmp, "wb")
        self.bytes = 0

    def write(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        self._f.write(arr.tobytes())
        self.bytes += arr.nbytes

    def close(self) -> None:
        self._f.close()
        rename_into_place(self.tmp, self.path)

    def abort(self) -> None:
        self._f.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.abort() if exc_type else self.close()


def save_array(path: str | Path, arr: np.ndarray) -> None:
    with AtomicWriter(path) as w:
        w.write(arr)


def load_array(path: str | Path, dtype, mmap: bool = False) -> np.ndarray:
    path = Path(path)
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    if mmap:  # a plain ndarray over the mapping: slicing a np.memmap costs ~10x more per call
        return np.memmap(path, dtype=dtype, mode="r").view(np.ndarray)
    return np.fromfile(path, dtype=dtype)


def rank_file(folder: Path, rank: int, suffix: str) -> Path:
    return Path(folder) / f"{rank:05d}.{suffix}"


def id_check(doc_id) -> int:
    """32-bit fingerprint of a document id, stored per position to catch a re-read in another order."""
    return xxhash.xxh32_intdigest(str(doc_id))


class OrderError(RuntimeError):
    pass


class PositionTracker:
    """Checks, in the step after a barrier, that rank r re-reads exactly the documents it recorded, in order.

    Dedup decisions are stored as (rank, position); a reader that skipped or reordered documents would
    silently drop the wrong ones, so a mismatch stops the task with a clear message instead."""

    def __init__(self, folder: Path, rank: int, what: str):
        path = rank_file(folder, rank, "ids.u32")
        if not path.exists():
            raise FileNotFoundError(f"{what}: {path} is missing: the recording step did not finish for rank {rank}")
        self.ids = load_array(path, np.uint32)
        self.pos = 0
        self.what = what
        self.rank = rank

    def next(self, doc) -> int:
        pos = self.pos
        if pos >= len(self.ids) or int(self.ids[pos]) != id_check(doc.id):
            raise OrderError(
                f"{self.what}: rank {self.rank} document #{pos} (id {doc.id!r}) is not the document recorded at that "
                f"position ({len(self.ids)} recorded). The segment after a dedup barrier must re-read the "
                "intermediate file of the same rank, in order, without skipping documents."
            )
        self.pos += 1
        return pos

    def take(self, docs: list) -> int:
        """:meth:`next` for a batch, checked in one comparison; returns the first document's position. A
        mismatch raises :meth:`next`'s error, at the first document that does not match."""
        pos, n = self.pos, len(docs)
        got = np.fromiter((id_check(d.id) for d in docs), dtype=np.uint32, count=n)
        if pos + n > len(self.ids) or not np.array_equal(self.ids[pos:pos + n], got):
            for d in docs:
                self.next(d)
        self.pos = pos + n
        return pos
