"""Connected components of a duplicate graph: union-find, vectorised.

Each round hooks the larger root of every edge under the smaller one (union by smallest id), then
compresses every path fully (pointer jumping). It terminates when every edge joins one root; each
component ends up labelled by its smallest node. Rounds are whole-array numpy operations, so millions
of edges cluster in seconds instead of a Python loop per edge.
"""

from __future__ import annotations

import numpy as np


def components(n_nodes: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Component label (smallest member) of each node 0..n_nodes-1, for undirected edges u[i]-v[i]."""
    parent = np.arange(n_nodes, dtype=np.int64)
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    while True:
        pu, pv = parent[u], parent[v]
        differ = pu != pv
        if not differ.any():
            return parent
        lo = np.minimum(pu[differ], pv[differ])
        hi = np.maximum(pu[differ], pv[differ])
        np.minimum.at(parent, hi, lo)  # union: the larger root points to the smaller
        while True:  # find, with full path compression
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
        u, v = u[differ], v[differ]


class DenseUnionFind:
    """Union-find over nodes 0..n-1 held in one dense array (4 bytes per node below 2^32 nodes), fed
    edges chunk by chunk, so the edges themselves never need to be in memory at once.

    ``union`` hooks the larger root under the smaller (each component keeps its smallest node as
    root) and compresses the paths of the endpoints it touched; ``compress`` then points every node
    straight at its root, working through the array ``chunk`` nodes at a time."""

    def __init__(self, n: int):
        self.parent = np.arange(n, dtype=np.uint32 if n < 2**32 else np.uint64)

    def find(self, x: np.ndarray) -> np.ndarray:
        p = self.parent
        r = p[x]
        while True:
            g = p[r]
            if np.array_equal(g, r):
                return r
            r = g

    def union(self, u: np.ndarray, v: np.ndarray) -> None:
        p = self.parent
        u = np.asarray(u, dtype=p.dtype)
        v = np.asarray(v, dtype=p.dtype)
        while len(u):
            ru, rv = self.find(u), self.find(v)
            p[u] = ru  # path compression for the endpoints (ru is an ancestor of u)
            p[v] = rv
            differ = ru != rv
            if not differ.any():
                return
            ru, rv = ru[differ], rv[differ]
            np.minimum.at(p, np.maximum(ru, rv), np.minimum(ru, rv))
            u, v = u[differ], v[differ]

    def compress(self, chunk: int = 1 << 20) -> np.ndarray:
        """Every node's root (= smallest node of its component), in place; returns the array."""
        p = self.parent
        for lo in range(0, len(p), chunk):
            r = p[lo:lo + chunk].copy()
            while True:
                g = p[r]
                if np.array_equal(g, r):
                    break
                r = g
            p[lo:lo + chunk] = r
        return p
