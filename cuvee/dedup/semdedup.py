"""SemDeDup's decision inside one k-means cluster (Abbas et al. 2023, "SemDeDup: Data-efficient learning at
web-scale through semantic deduplication", Algorithm 1; NeMo Curator's ``semantic_dedup``).

The cluster's members are put in the keep rule's order (SemDeDup's default, Curator's ``which_to_keep: hard``:
farthest from the centroid first). A member is removed when its cosine similarity to any member *earlier* in
that order exceeds the threshold (SemDeDup's ``1 - eps``), whether or not that earlier member is itself
removed; the first member is always kept. Each removed member points at its most similar earlier member; the
chain of pointers ends at a kept member, its keeper, which names the group in provenance.

Memory: the similarities are computed in row blocks of at most ``budget`` bytes, never the whole m x m matrix.
"""

from __future__ import annotations

import numpy as np

KEEP_RULES = ("farthest", "nearest", "longest")


def keep_order(rule: str, centroid_sim: np.ndarray, length: np.ndarray, tiebreak: list[np.ndarray]) -> np.ndarray:
    """The members' order under ``rule`` (its first is kept), ties broken by ``tiebreak`` (most significant first)."""
    if rule == "farthest":  # lowest cosine to the centroid first
        primary = centroid_sim.astype(np.float64)
    elif rule == "nearest":
        primary = -centroid_sim.astype(np.float64)
    elif rule == "longest":
        primary = -length.astype(np.float64)
    else:
        raise ValueError(f"keep rule {rule!r}: one of {', '.join(KEEP_RULES)}")
    return np.lexsort((*reversed(tiebreak), primary))


def nearest_earlier(x: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row j of ``x`` (unit rows, in keep order): the highest cosine to a row i < j, and that i
    (-inf and -1 for row 0)."""
    m = len(x)
    best = np.full(m, -np.inf, dtype=np.float32)
    parent = np.full(m, -1, dtype=np.int64)
    a = 1
    while a < m:
        rows = max(1, budget // (5 * 4 * max(a, 1)))  # the block, its mask and temporaries
        b = min(m, a + rows)
        s = x[a:b] @ x[:b].T
        s[np.arange(b)[None, :] >= np.arange(a, b)[:, None]] = -np.inf  # only earlier members
        arg = s.argmax(axis=1)
        best[a:b] = s[np.arange(b - a), arg]
        parent[a:b] = arg
        a = b
    return best, parent


def keepers(best: np.ndarray, parent: np.ndarray, threshold: float) -> np.ndarray:
    """Each member's keeper (its own index when kept): removed members follow their pointers to a kept one."""
    removed = best > threshold
    root = np.where(removed, parent, np.arange(len(best)))
    while True:  # pointer jumping: every pointer goes to an earlier member, so this ends in log2(m) rounds
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


def decide(x: np.ndarray, threshold: float, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(keeper index, group size) of every member of one cluster, ``x`` in keep order."""
    best, parent = nearest_earlier(x, budget)
    root = keepers(best, parent, threshold)
    return root, np.bincount(root, minlength=len(root))[root]
