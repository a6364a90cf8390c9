"""MinHash signatures and LSH band keys, vectorised over a batch of documents.

Shingles are word n-grams (lower-cased ``\\w+`` words, a regex instead of spaCy). Each word is hashed
once with xxh3; an n-gram's hash is a random linear combination of its word hashes followed by a
64-bit finaliser, all in numpy. The k hash functions are multiply-add permutations of those 64-bit
values, h_i(x) = a_i x + b_i mod 2^64 with odd a_i (a bijection), and the signature keeps the top 32
bits of each minimum. Minimums over a whole batch are one ``np.minimum.reduceat``: no per-document loop
in the arithmetic. The ``rensa`` backend (Rust) computes the minimums from the same shingle hashes.
The default ``numba`` backend (``cuvee.dedup.native``) does the whole chain -- words, word hashes
(FNV-1a instead of xxh3: signatures differ from the other backends, so indexes record the backend),
shingles and the same a_i x + b_i minimums -- in one compiled loop (~9x faster than the numpy path on
long pages, and no Python object per word).

Band keys combine the r values of a band into one 64-bit key; two documents are LSH candidates when
any band key is equal, which happens with probability 1-(1-s^r)^b for Jaccard similarity s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import xxhash

from cuvee.dedup.splitmix import mix64
from cuvee.dedup.text import words


def word_hashes(text: str) -> np.ndarray:
    ws = words(text)
    h = xxhash.xxh3_64_intdigest
    return np.fromiter((h(w) for w in ws), dtype=np.uint64, count=len(ws))


def ngram_hashes(items: np.ndarray, gram_mult: np.ndarray) -> np.ndarray:
    """64-bit hashes of every window of ``len(gram_mult)`` consecutive uint64 items (word hashes, token ids):
    mix(sum_j items[i+j] * gram_mult[j] + n); empty when there are fewer items than that."""
    n = len(gram_mult)
    k = len(items) - n + 1
    if k <= 0:
        return np.empty(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        acc = items[:k] * gram_mult[0]
        for j in range(1, n):
            acc = acc + items[j:j + k] * gram_mult[j]
    return mix64(acc + np.uint64(n))


@dataclass(frozen=True)
class MinHashConfig:
    n_grams: int = 5
    num_bands: int = 14
    rows_per_band: int = 8
    seed: int = 1
    backend: str = "numba"  # or "numpy" / "rensa" (Python word split + xxh3, then numpy / Rust minimums)

    @property
    def num_perm(self) -> int:
        return self.num_bands * self.rows_per_band

    def threshold(self) -> float:
        """Similarity where the detection S-curve is steepest, ~(1/b)^(1/r)."""
        return (1.0 / self.num_bands) ** (1.0 / self.rows_per_band)

    def detection_probability(self, s: float | np.ndarray):
        return 1.0 - (1.0 - np.asarray(s, dtype=float) ** self.rows_per_band) ** self.num_bands


BACKENDS = ("numba", "numpy", "rensa")


def _native():
    """The compiled kernels, imported on first use (numba is a heavy import)."""
    try:
        from cuvee.dedup import native
    except ImportError as e:
        raise ImportError(f"MinHash backend 'numba' needs numba (pip install 'numba>=0.60'), or set "
                          f"backend: rensa / numpy in the stage parameters ({e})") from e
    return native


class MinHasher:
    """Signatures (uint32, one row of ``num_perm`` values per document) for batches of texts."""

    def __init__(self, config: MinHashConfig):
        self.config = config
        rng = np.random.Generator(np.random.PCG64(config.seed))
        self.gram_mult = rng.integers(1, 2**63, size=config.n_grams, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.a = rng.integers(0, 2**63, size=config.num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.b = rng.integers(0, 2**63, size=config.num_perm, dtype=np.uint64)
        self.band_mult = rng.integers(0, 2**63, size=config.rows_per_band, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        if config.backend not in BACKENDS:
            raise ValueError(f"unknown MinHash backend {config.backend!r} ({', '.join(BACKENDS)})")

    def shingles(self, text: str) -> np.ndarray:
        """64-bit hashes of the word n-grams; a text shorter than n words is one shingle; empty -> none."""
        if self.config.backend == "numba":
            return _native().shingle_hashes(text, self.gram_mult)
        w = word_hashes(text)
        n = self.config.n_grams
        if len(w) == 0:
            return w
        return ngram_hashes(w, self.gram_mult[:min(n, len(w))])

    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures [n, num_perm] uint32, has_shingles [n] bool); rows without shingles are all 0xFFFFFFFF."""
        if self.config.backend == "numba":
            return _native().minhash_signatures(texts, self.gram_mult, self.a, self.b)
        sh = [self.shingles(t) for t in texts]
        return self.signatures_from_shingles(sh)

    def signatures_from_shingles(self, sh: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        n, k = len(sh), self.config.num_perm
        sizes = np.fromiter((len(s) for s in sh), dtype=np.int64, count=n)
        has = sizes > 0
        out = np.full((n, k), 0xFFFFFFFF, dtype=np.uint32)
        if not has.any():
            return out, has
        flat = np.concatenate([s for s in sh if len(s)])
        offsets = np.concatenate([[0], np.cumsum(sizes[has])])
        if self.config.backend == "rensa":
            import rensa

            m = rensa.RMinHash.digest_matrix_from_flat_token_hashes(flat, offsets.astype(np.uint64), k, self.config.seed)
            out[has] = np.asarray(m.to_rows(), dtype=np.uint32)
            return out, has
        mins = np.empty((int(has.sum()), k), dtype=np.uint64)
        # bound the (shingles x permutations) temporary to ~8 MB by processing documents in groups
        step = max(1, 1_000_000 // k)
        rows = np.flatnonzero(has)
        start_doc = 0
        while start_doc < len(rows):
            end_doc = int(np.searchsorted(offsets, offsets[start_doc] + step, side="right")) - 1
            end_doc = min(max(end_doc, start_doc + 1), len(rows))
            lo, hi = offsets[start_doc], offsets[end_doc]
            with np.errstate(over="ignore"):
                perm = flat[lo:hi, None] * self.a[None, :] + self.b[None, :]
            mins[start_doc:end_doc] = np.minimum.reduceat(perm, offsets[start_doc:end_doc] - lo, axis=0)
            start_doc = end_doc
        out[has] = (mins >> np.uint64(32)).astype(np.uint32)
        return out, has

    def band_keys(self, sigs: np.ndarray, band: int) -> np.ndarray:
        """64-bit key of one band for every row of ``sigs``."""
        r = self.config.rows_per_band
        block = sigs[:, band * r:(band + 1) * r].astype(np.uint64)
        with np.errstate(over="ignore"):
            acc = (block * self.band_mult[None, :]).sum(axis=1, dtype=np.uint64)
        return mix64(acc + np.uint64(band))

    def fingerprint(self) -> str:
        """Identifies the hash functions: signatures of two runs are comparable only if this matches."""
        probe = "the quick brown fox jumps over the lazy dog " * 3 + "0123456789 déjà vu"
        sig, _ = self.signatures([probe])
        return hashlib.sha256(sig.tobytes() + repr(self.config).encode()).hexdigest()[:16]


# ---- token ids: the same hash family over integer sequences (used by training-set decontamination) --------
def token_shingles(tokens: np.ndarray, hasher: MinHasher) -> np.ndarray:
    """Sorted unique shingle hashes of the ``n_grams``-token windows of ``tokens``; empty if it is shorter."""
    t = np.asarray(tokens).astype(np.uint64)
    return np.unique(ngram_hashes(t, hasher.gram_mult))


def token_signatures(docs: list[np.ndarray], hasher: MinHasher, use_numba: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 signatures [n, num_perm], has_shingles [n]) of token-id documents, from ``token_shingles``.

    ``use_numba`` runs the compiled kernel (``cuvee.dedup.native.token_minhash``); the numpy path gives the
    same values (min of top 32 bits == top 32 bits of min) and is used when numba is missing."""
    if hasher.config.backend == "rensa":
        raise ValueError("token signatures use the a_i x + b_i hash family: build the hasher with backend "
                         "'numpy' or 'numba', not 'rensa'")
    native = None
    if use_numba:
        try:
            native = _native()
        except ImportError:
            native = None
    if native is None:
        return hasher.signatures_from_shingles([token_shingles(d, hasher) for d in docs])
    sizes = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate([np.asarray(d) for d in docs]).astype(np.uint64) if len(docs) else np.empty(0, np.uint64)
    sigs = np.full((len(docs), hasher.config.num_perm), 0xFFFFFFFF, dtype=np.uint32)
    has = np.zeros(len(docs), dtype=np.bool_)
    native.token_minhash(flat, offsets, hasher.gram_mult, hasher.a, hasher.b, sigs, has)
    return sigs, has
