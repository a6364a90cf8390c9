"""Rehydration: a source weights its documents by the size of the duplicate cluster each was kept for.

Deduplication keeps one document per cluster of copies; how many copies the web held is a signal of its own
(FineWeb's finding that deduplicating across dumps removed good, often-repeated pages). cuvee's dedup stages write
the size on every kept document (``<kind>_cluster_size``: ``minhash``, ``exact``, ``line``, ``url``;
cuvee/dedup/clusters.py), and a mix source can upsample by it::

    rehydrate: {key: minhash_cluster_size, rule: fineweb2}
    rehydrate: {key: exact_cluster_size, table: {1: 1, 2-9: 2, 10+: 3}}

``rule: fineweb2`` is FineWeb-2's published rule (github.com/huggingface/fineweb-2, README, "Deduplication";
Penedo et al. 2025, "FineWeb2: One Pipeline to Scale Them All"): a document kept for a cluster of N
``minhash_cluster_size`` appears 1 time for N = 1, N times for N = 2 or 3, 3 times for N = 4, 5 times for
5 <= N < 100, 8 times for 100 <= N < 1000 and 1 time for N >= 1000 ("very large clusters are lower quality");
their example block is ``{1: 1, 2: 2, 3: 3, 5: 5, 100: 8, 1000: 1}`` looked up by the largest key <= N. A
``table`` maps cluster-size ranges (``a``, ``a-b`` inclusive, ``a+`` open) covering every size from 1 to weights
>= 0 (0: the documents are tokenized and counted, never drawn; fractions are allowed).

Exactly how repeats are drawn: the source's documents are grouped by weight into classes, and the classes are
blended by the mixer's own greedy token-deficit rule (:func:`cuvee.mixer.blend.greedy_blend`) at shares
``weight x tokens of the class``; each class is read in a fresh seeded shuffle per pass (``epoch_stream``). So
a document of weight k is drawn once in each pass of its class, and its class makes k passes while a class of
weight 1 makes one: a document's repeats are its class's epochs (the index's ``epoch``), never two copies side by
side, and at every prefix of the source each class holds its share to within one document, as sources do in the
mix. One pass of the rehydrated source is ``sum(weight x tokens)``: what ``max_epochs`` and ``epochs`` count. A
source whose documents all have weight 1 is read exactly as without rehydration.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from cuvee.kernel.config import StrictModel
from cuvee.mixer.blend import greedy_blend
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.shuffle import epoch_stream

FINEWEB2 = {"1": 1.0, "2": 2.0, "3-4": 3.0, "5-99": 5.0, "100-999": 8.0, "1000+": 1.0}
RULES = {"fineweb2": FINEWEB2}
_RANGE = re.compile(r"^\s*(\d+)\s*(?:(-)\s*(\d+)|(\+))?\s*$")
SIZE_SUFFIX = ".cluster"  # per cached document: its cluster size, u8 (cache prefix + suffix)


def parse_ranges(table: dict[str, float]) -> list[tuple[int, float, float]]:
    """``[(low, high, weight)]`` sorted by ``low`` (``high`` inclusive, ``inf`` when open); ValueError in one line
    for a malformed key, a weight that is not a finite number >= 0, overlaps, gaps or sizes left uncovered."""
    ranges = []
    for key, w in table.items():
        m = _RANGE.match(str(key))
        if not m:
            raise ValueError(f"cluster-size range {key!r} is not 'N', 'N-M' or 'N+' (N, M whole numbers >= 1)")
        lo = int(m.group(1))
        hi = math.inf if m.group(4) else int(m.group(3)) if m.group(2) else lo
        if lo < 1 or hi < lo:
            raise ValueError(f"cluster-size range {key!r} is empty or starts below 1")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"cluster-size range {key!r}: weight {w!r} is not a finite number >= 0")
        ranges.append((lo, hi, float(w)))
    ranges.sort()
    if not ranges or ranges[0][0] != 1:
        raise ValueError("the table must cover cluster size 1 (every kept document without a copy)")
    for (_, hi1, _), (lo2, _, _) in zip(ranges, ranges[1:]):
        if lo2 <= hi1:
            raise ValueError(f"cluster-size ranges overlap at size {lo2}")
        if lo2 > hi1 + 1:
            raise ValueError(f"cluster sizes {label(int(hi1) + 1, lo2 - 1)} are in no range")
    if ranges[-1][1] != math.inf:
        raise ValueError(f"cluster sizes above {ranges[-1][1]} are in no range; end with an open range 'N+'")
    if not any(w > 0 for _, _, w in ranges):
        raise ValueError("every weight is 0: the source would be empty")
    return ranges


def label(lo: int, hi: float) -> str:
    return f"{lo}+" if hi == math.inf else str(lo) if hi == lo else f"{lo}-{int(hi)}"


class RehydrateConfig(StrictModel):
    """A source's rehydration: which metadata key holds the cluster size, and the rule or table of weights."""

    model_config = ConfigDict(frozen=True)

    key: str = Field("minhash_cluster_size", min_length=1,
                     description="metadata key with the size of the duplicate cluster each document was kept for")
    rule: Literal["fineweb2"] | None = Field(None, description="a published rule: fineweb2")
    table: dict[str, float] | None = Field(None, description="{cluster-size range: weight}, e.g. {1: 1, 2-9: 2, 10+: 3}")

    @field_validator("table", mode="before")
    @classmethod
    def _keys(cls, v):
        return {str(k): w for k, w in v.items()} if isinstance(v, dict) else v

    @field_validator("table")
    @classmethod
    def _table(cls, v):
        if v is not None:
            parse_ranges(v)
        return v

    @model_validator(mode="after")
    def _one(self):
        if (self.rule is None) == (self.table is None):
            raise ValueError("rehydrate: give either rule (fineweb2) or table, not both or neither")
        return self

    def ranges(self) -> list[tuple[int, float, float]]:
        return parse_ranges(self.table if self.table is not None else RULES[self.rule])

    def weigher(self) -> Weigher:
        return Weigher(self.ranges())


class Weigher:
    """Cluster size -> (range index, weight), by the largest range start <= size."""

    def __init__(self, ranges: list[tuple[int, float, float]]):
        self.ranges = ranges
        self._starts = [lo for lo, _, _ in ranges]

    def index(self, size: int) -> int:
        return bisect.bisect_right(self._starts, size) - 1

    def weight(self, size: int) -> float:
        return self.ranges[self.index(size)][2]

    @property
    def largest(self) -> float:
        return max(w for _, _, w in self.ranges)


def doc_weights(weigher: Weigher, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(range index, weight) of every document of cluster ``sizes``."""
    idx = np.searchsorted(np.array([lo for lo, _, _ in weigher.ranges]), np.asarray(sizes), side="right") - 1
    return idx, np.array([w for _, _, w in weigher.ranges])[idx]


def cluster_size(meta: dict, key: str) -> int | str:
    """The document's cluster size, or the drop reason when it has none usable."""
    v = meta.get(key)
    if v is None:
        return f"no_{key}"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
        return f"bad_{key}"
    return int(v)


class RehydratedStream:
    """``(epoch, document)`` forever over a cache whose documents have ``weights``: classes of equal weight blended
    by token deficit, each class shuffled per pass (module docstring); ``drawn``/``drawn_tokens`` per class."""

    def __init__(self, weights: np.ndarray, lengths: np.ndarray, seed: int, name: str):
        self.classes = sorted({float(w) for w in weights.tolist() if w > 0})
        self.members = [np.flatnonzero(weights == w) for w in self.classes]
        self.lengths = np.asarray(lengths, dtype=np.int64)
        streams = [epoch_stream(len(m), seed, name if w == 1.0 else f"{name}#rehydrate={w!r}")
                   for m, w in zip(self.members, self.classes)]
        shares = [w * int(self.lengths[m].sum()) for w, m in zip(self.classes, self.members)]
        self.drawn = dict.fromkeys(self.classes, 0)
        self.drawn_tokens = dict.fromkeys(self.classes, 0)
        self._next: tuple[int, int] | None = None

        def pick(c: int) -> int:
            epoch, j = next(streams[c])
            doc = int(self.members[c][j])
            self._next = (epoch, doc)
            n = int(self.lengths[doc])
            self.drawn[self.classes[c]] += 1
            self.drawn_tokens[self.classes[c]] += n
            return n

        self._blend = greedy_blend(shares, math.inf, pick)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self

    def __next__(self) -> tuple[int, int]:
        next(self._blend)
        return self._next


def summary(cfg: RehydrateConfig, sizes: np.ndarray, lengths: np.ndarray, stream: RehydratedStream | None) -> dict:
    """The manifest's record of what rehydration did: per cluster-size range its documents, tokens before and
    after weighting; per weight the documents and what the blend drew; totals before and after."""
    w = cfg.weigher()
    idx, weights = doc_weights(w, sizes)
    lengths = np.asarray(lengths, dtype=np.int64)
    per_range = {}
    for k, (lo, hi, weight) in enumerate(w.ranges):
        sel = idx == k
        tok = int(lengths[sel].sum())
        per_range[label(lo, hi)] = {"weight": weight, "documents": int(sel.sum()), "tokens": tok,
                                    "weighted_tokens": round(weight * tok)}
    per_weight = {}
    for weight in sorted({float(x) for x in weights.tolist()}):
        sel = weights == weight
        per_weight[f"{weight:g}"] = {"documents": int(sel.sum()), "tokens": int(lengths[sel].sum()),
                                     "drawn": stream.drawn.get(weight, 0) if stream else None,
                                     "drawn_tokens": stream.drawn_tokens.get(weight, 0) if stream else None}
    return {"key": cfg.key, "rule": cfg.rule or "table", "table": {label(lo, hi): x for lo, hi, x in w.ranges},
            "tokens_before": int(lengths.sum()), "tokens_after": round(float((weights * lengths).sum())),
            "per_range": per_range, "per_weight": per_weight,
            "draws": "each weight class blended by token deficit at weight x tokens, shuffled per pass; a document "
                     "of weight k is drawn once per pass of its class (index epoch), k class passes per source pass"}


def source_stream(cache: IndexedDataset, prefix: Path, src, seed: int):
    """A source's ``(epoch, document)`` draws: one seeded shuffle per pass, or by weight class when it rehydrates."""
    if src.rehydrate is None:
        return epoch_stream(len(cache), seed, src.name)
    sizes = np.fromfile(f"{prefix}{SIZE_SUFFIX}", dtype="<u8")
    return RehydratedStream(doc_weights(src.rehydrate.weigher(), sizes)[1], cache.sequence_lengths, seed, src.name)


def source_summary(src, prefix: Path, cache: IndexedDataset, stream) -> dict | None:
    """The manifest's ``rehydration`` record of a built source (None when it does not rehydrate)."""
    if src.rehydrate is None:
        return None
    return summary(src.rehydrate, np.fromfile(f"{prefix}{SIZE_SUFFIX}", dtype="<u8"), cache.sequence_lengths, stream)
