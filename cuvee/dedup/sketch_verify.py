"""Second-stage check of MinHash LSH candidates: Jaccard and containment from bottom-k shingle sketches.

Why: whole-page LSH at FineWeb's 14x8 only finds pairs above Jaccard ~0.75, so a page that holds another page
(a quote, a copied section) or a lightly edited copy under other text is missed. Lowering the LSH threshold
(more bands, fewer rows) finds those, and also pages that merely share a template: this check keeps an edge
only when the pair's own shingles say so. Each document keeps the ``k`` smallest distinct 32-bit values of its
shingle hashes and its distinct-shingle count (4k + 4 bytes). For a pair, below t = the smaller of the two
sketches' largest values (a sketch of a set with at most ``k`` shingles is the whole set: no cut), both sketches
are uniform samples of the same hash range, so with a, b the counts below t and c the common ones:

    Jaccard ~ c / (a + b - c)          containment of the smaller page in the larger ~ c / a_smaller

(exact when both pages have at most ``k`` shingles). An edge passes when either estimate reaches its threshold.
"""

from __future__ import annotations

from pathlib import Path

import numba as nb
import numpy as np
from pydantic import Field, model_validator

from cuvee.dedup.files import AtomicWriter, load_array, rank_file
from cuvee.kernel.config import StrictModel

PAD = np.uint32(0xFFFFFFFF)  # fills the sketch of a page with fewer than k shingles


class VerifyParams(StrictModel):
    sketch_size: int = Field(256, ge=8, le=4096, description="k: shingle values kept per document (4k bytes)")
    jaccard: float | None = Field(None, gt=0, le=1, description="keep an LSH edge when estimated Jaccard >= this")
    containment: float | None = Field(
        None, gt=0, le=1, description="... or when this share of the smaller page's shingles is in the larger")

    @model_validator(mode="after")
    def _one_rule(self):
        if self.jaccard is None and self.containment is None:
            raise ValueError("verify needs jaccard and/or containment (the thresholds an LSH edge must reach)")
        return self


def bottom_k(shingles: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """(the k smallest distinct top-32-bit values of 64-bit shingle hashes, PAD-filled; distinct count)."""
    values = np.unique((np.asarray(shingles, dtype=np.uint64) >> np.uint64(32)).astype(np.uint32))
    out = np.full(k, PAD, dtype=np.uint32)
    out[:min(k, len(values))] = values[:k]
    return out, len(values)


@nb.njit(cache=True, nogil=True)
def _estimate(sa, na, sb, nb_, jac, con):
    k = sa.shape[1]
    for p in range(sa.shape[0]):
        ka, kb = min(k, na[p]), min(k, nb_[p])
        cut = np.uint64(1) << np.uint64(32)  # above every value: a complete sketch is not cut
        if na[p] > k:
            cut = min(cut, np.uint64(sa[p, k - 1]))
        if nb_[p] > k:
            cut = min(cut, np.uint64(sb[p, k - 1]))
        i = j = a = b = c = 0
        while i < ka or j < kb:
            x = np.uint64(sa[p, i]) if i < ka else cut + np.uint64(1)
            y = np.uint64(sb[p, j]) if j < kb else cut + np.uint64(1)
            if x > cut and y > cut:
                break
            if x == y:
                a += 1
                b += 1
                c += 1
                i += 1
                j += 1
            elif x < y:
                a += 1
                i += 1
            else:
                b += 1
                j += 1
        union = a + b - c
        jac[p] = c / union if union else 0.0
        small = a if na[p] <= nb_[p] else b
        con[p] = c / small if small else 0.0


def estimate(sa: np.ndarray, na: np.ndarray, sb: np.ndarray, nb_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Jaccard, containment of the smaller in the larger) estimates for row-aligned sketch pairs."""
    m = len(sa)
    jac, con = np.zeros(m), np.zeros(m)
    if m:
        _estimate(np.ascontiguousarray(sa), np.asarray(na, np.int64), np.ascontiguousarray(sb),
                  np.asarray(nb_, np.int64), jac, con)
    return jac, con


def passes(params: VerifyParams, jac: np.ndarray, con: np.ndarray) -> np.ndarray:
    ok = np.zeros(len(jac), dtype=bool)
    if params.jaccard is not None:
        ok |= jac >= params.jaccard
    if params.containment is not None:
        ok |= con >= params.containment
    return ok


def sketch_files(folder: Path, rank: int) -> tuple[Path, Path]:
    return rank_file(Path(folder) / "sketch", rank, "u32"), rank_file(Path(folder) / "sketch", rank, "n.u32")


class SketchWriter:
    """One rank's sketches, written beside the band keys (renamed into place when the rank completes)."""

    def __init__(self, folder: Path, rank: int, k: int):
        self.k = k
        self.writers = [AtomicWriter(f) for f in sketch_files(folder, rank)]

    def write(self, shingle_lists: list[np.ndarray]) -> None:
        rows = [bottom_k(s, self.k) for s in shingle_lists]
        self.writers[0].write(np.stack([r[0] for r in rows]) if rows else np.zeros((0, self.k), np.uint32))
        self.writers[1].write(np.minimum([r[1] for r in rows], 2**32 - 1).astype(np.uint32))

    def close(self, ok: bool) -> None:
        for w in self.writers:
            w.close() if ok else w.abort()


class SketchStore:
    """Every rank's sketches, memory-mapped; rows fetched by (rank, position)."""

    def __init__(self, folder: Path, ranks: int, k: int):
        self.k = k
        self.sk, self.n = [], []
        for r in range(ranks):
            s, n = sketch_files(folder, r)
            if not s.exists() or not n.exists():
                raise FileNotFoundError(f"minhash verify: sketches of rank {r} missing under {folder} (signature "
                                        "task not finished, or a work folder from before verify: rerun with --fresh)")
            self.sk.append(load_array(s, np.uint32, mmap=True).reshape(-1, k))
            self.n.append(load_array(n, np.uint32, mmap=True))

    def rows(self, rank: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sk = np.empty((len(pos), self.k), dtype=np.uint32)
        n = np.empty(len(pos), dtype=np.int64)
        for r in np.unique(rank):
            sel = rank == r
            sk[sel] = self.sk[int(r)][pos[sel]]
            n[sel] = self.n[int(r)][pos[sel]]
        return sk, n
