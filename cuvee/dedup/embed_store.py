"""The one embedding store of a run: what the ``embed`` stage writes once and every consumer reads (semantic
dedup now; clusters and decontamination by meaning later), so a corpus is embedded once.

Layout, under ``<run>/work/embeddings/<store>/``, one set of files per task (rank) of the embed stage:

* ``NNNNN.f16``: the vectors, float16, row-major ``[documents, dim]``, read memory-mapped (never inside a record);
* ``NNNNN.id.txt`` / ``NNNNN.id.off.u64``: each row's document id (a :class:`~cuvee.dedup.clusters.StringTable`);
* ``NNNNN.idh.u64``: each row's :func:`id_hash`, for matching a consumer's documents to rows without strings;
* ``NNNNN.json``: the rank's description (model, dim, rule, rows, seconds), written last: a rank without it is
  unfinished.

Every file goes through the kernel's temporaries (:class:`~cuvee.dedup.files.AtomicWriter`,
:func:`cuvee.kernel.atomic.write_json`): a killed task leaves only temporaries, which the rerun's sweep removes,
and the rerun writes the rank again (a task is the unit of resume).

A consumer in the same run sees, in each rank, a subsequence of the documents the embed stage saw in that rank
(stages after it only drop documents; a segment re-reads its rank's file in order): :func:`match_rows` finds each
document's row by walking both id lists once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xxhash

from cuvee.dedup.clusters import StringTableWriter
from cuvee.dedup.files import AtomicWriter, load_array, rank_file
from cuvee.kernel import atomic
from cuvee.kernel.errors import UserError
from cuvee.pipeline.recipe import RecipeError

DTYPE = np.float16
FORMAT = 1


class StoreError(UserError, RuntimeError):
    """The store a consumer needs is missing, unfinished or does not hold its documents."""


def store_dir(work_dir: str | Path, store: str) -> Path:
    return Path(work_dir) / "embeddings" / store


def writer_of(ctx, store: str, what: str):
    """The parameters of the ``embed`` stage earlier in the recipe that writes ``store`` (the last one), for a
    consumer at build time (``ctx``: its BuildContext; ``what``: the consumer, as the message names it); a recipe
    without one is refused before any work."""
    found = [q for name, q in ctx.earlier if name == "embed" and getattr(q, "store", None) == store]
    if not found:
        raise RecipeError(f"stage {ctx.stage_name!r}: {what} reads the vectors of an embed stage (store {store!r}); "
                          "add '- stage: embed' before it" + (f" with store: {store}" if store != "default" else ""))
    return found[-1]


def id_hash(doc_id) -> int:
    """64-bit xxh3 of a document id's text: row matching, the k-means sample and tie-breaks use it, so they
    depend on the ids alone and not on how documents were split over tasks."""
    return xxhash.xxh3_64_intdigest(str(doc_id))


def id_hashes(docs: list) -> np.ndarray:
    return np.fromiter((id_hash(d.id) for d in docs), dtype=np.uint64, count=len(docs))


class StoreWriter:
    """One rank's rows, appended in document order; the rank appears complete only when :meth:`close` succeeds."""

    def __init__(self, folder: str | Path, rank: int, dim: int):
        self.folder, self.rank, self.dim = Path(folder), rank, dim
        self.vectors = AtomicWriter(rank_file(self.folder, rank, "f16"))
        self.hashes = AtomicWriter(rank_file(self.folder, rank, "idh.u64"))
        self.ids = StringTableWriter(rank_file(self.folder, rank, "id"))
        self.rows = 0

    def write(self, docs: list, vectors: np.ndarray) -> None:
        if vectors.shape != (len(docs), self.dim):
            raise ValueError(f"embed store: {vectors.shape} vectors for {len(docs)} documents of dim {self.dim}")
        self.vectors.write(vectors.astype(DTYPE))
        self.hashes.write(id_hashes(docs))
        self.ids.write([str(d.id) for d in docs])
        self.rows += len(docs)

    def close(self, ok: bool, description: dict | None = None) -> None:
        for w in (self.vectors, self.hashes):
            w.close() if ok else w.abort()
        self.ids.close(ok)
        if ok:
            atomic.write_json(rank_file(self.folder, self.rank, "json"),
                              {"format": FORMAT, "dtype": "float16", "dim": self.dim, "rows": self.rows,
                               **(description or {})})


class EmbedStore:
    """The finished ranks of a store, read memory-mapped."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def description(self, rank: int) -> dict:
        import json

        path = rank_file(self.folder, rank, "json")
        if not path.exists():
            raise StoreError(f"embeddings of task {rank} missing under {self.folder}: the embed stage did not finish "
                             "that task (or the recipe has no embed stage for this store)")
        return json.loads(path.read_text(encoding="utf-8"))

    def vectors(self, rank: int) -> np.ndarray:
        dim = int(self.description(rank)["dim"])
        return load_array(rank_file(self.folder, rank, "f16"), DTYPE, mmap=True).reshape(-1, dim)

    def hashes(self, rank: int) -> np.ndarray:
        return load_array(rank_file(self.folder, rank, "idh.u64"), np.uint64)


class RowWalker:
    """The store rows of a task's documents as they stream by, where they are the store's rows with some left out,
    in order: one walk over the store's id hashes, resumed at each call."""

    def __init__(self, store_hashes: np.ndarray, what: str):
        self.stored, self.what, self.at, self.seen = store_hashes, what, 0, 0

    def take(self, doc_hashes: np.ndarray) -> np.ndarray:
        n, at = len(doc_hashes), self.at
        if np.array_equal(self.stored[at:at + n], doc_hashes):  # nothing dropped in between: one comparison
            self.at, self.seen = at + n, self.seen + n
            return np.arange(at, at + n, dtype=np.int64)
        rows = np.empty(n, dtype=np.int64)
        stored = self.stored[at:].tolist()
        j = 0
        for i, h in enumerate(doc_hashes.tolist()):
            while j < len(stored) and stored[j] != h:
                j += 1
            if j == len(stored):
                raise StoreError(f"{self.what}: document #{self.seen + i} of this task has no embedding in the "
                                 "store's rows after the previous match (the embed stage saw other documents in this "
                                 "task: run both in one recipe with the same executor.tasks)")
            rows[i] = at + j
            j += 1
        self.at, self.seen = at + j, self.seen + n
        return rows


def match_rows(store_hashes: np.ndarray, doc_hashes: np.ndarray, what: str) -> np.ndarray:
    """The store row of each document of a task (all of them at once): :class:`RowWalker` in one call."""
    return RowWalker(store_hashes, what).take(doc_hashes)


def gather(vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of a memory-mapped store as float32, L2-normalised again (float16 storage rounds the norm)."""
    order = np.argsort(rows, kind="stable")  # read the mapping in increasing row order
    x = np.empty((len(rows), vectors.shape[1]), dtype=np.float32)
    x[order] = vectors[rows[order]]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)
