"""Spherical k-means on normalised embeddings with faiss, fitted on a sample (NeMo Curator's
``kmeans_fit_data_fraction``), so the fit's memory is bounded by the sample and not by the corpus.

The sample is the documents with the smallest :func:`~cuvee.dedup.embed_store.id_hash`, fed to faiss in that
order: the same documents, in the same order, whatever the task count, so the centroids are too (faiss's
k-means is deterministic for a given input, seed and build). Shared by semantic dedup and, later, the cluster
stage.
"""

from __future__ import annotations

import math

import numpy as np

MIN_POINTS_PER_CENTROID = 39  # faiss's own floor for a well-fitted centroid


def plan(n: int, clusters: int | None, docs_per_cluster: int, fraction: float, max_fit: int) -> tuple[int, int]:
    """(k, sample size) for ``n`` documents. The sample is ``fraction`` of the corpus, at least 39 documents per
    centroid, at most ``max_fit``. k is ``clusters`` (at most one per sampled document), or one centroid per
    ``docs_per_cluster`` documents, fewer where the sample holds under 39 per centroid."""
    if n == 0:
        return 0, 0
    k = clusters or math.ceil(n / docs_per_cluster)
    m = min(n, max_fit, max(math.ceil(fraction * n), MIN_POINTS_PER_CENTROID * k))
    if clusters:
        return min(k, m), m
    return max(1, min(k, m // MIN_POINTS_PER_CENTROID)), m


def sample_cut(hashes: np.ndarray, m: int) -> np.uint64:
    """The largest hash of the sample: the ``m`` smallest of ``hashes`` (ties at the cut all join)."""
    return np.partition(hashes, m - 1)[m - 1] if m else np.uint64(0)


def fit(x: np.ndarray, k: int, seed: int, iterations: int) -> np.ndarray:
    """``k`` unit-norm centroids of the rows of ``x`` (float32, normalised), cosine k-means."""
    import faiss

    km = faiss.Kmeans(x.shape[1], k, niter=iterations, seed=seed, spherical=True, verbose=False,
                      max_points_per_centroid=max(1, len(x)), min_points_per_centroid=1)
    km.train(np.ascontiguousarray(x, dtype=np.float32))
    return np.asarray(km.centroids, dtype=np.float32)


def assign(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest centroid by cosine (exact search) and that cosine."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    sims, labels = index.search(np.ascontiguousarray(x, dtype=np.float32), 1)
    return labels[:, 0].astype(np.int64), sims[:, 0]
