"""Recipe stage ``quality_ensemble``: several scorers' outputs -> corpus-wide percentiles -> one integer bucket.

The members are metadata keys written by earlier scorer stages (``fasttext_quality_score``,
``transformer_quality_score``, ``perplexity_score``, ``language_score``...): the ensemble runs no model, so any
scorer, present or future, can take part, and a member is scored once even if two ensembles use it.

Percentiles are over the *whole corpus* (every task), like ``top_percent`` in ``scoring.py``, so the stage is a
:class:`~cuvee.pipeline.registry.Barrier`: each rank records its members' scores (the documents pass through
unchanged), one phase merges and sorts them, and a step after the barrier assigns. Rules (ours, stated exactly):

* a member's percentile of score ``s`` is the textbook *percentile rank* over the N finite scores of that member
  in the corpus: ``(#{x < s} + #{x <= s}) / 2N``, in (0, 1). Ties get one value (the middle of their block),
  whatever the order of documents or tasks; ``higher_is_better: false`` (e.g. perplexity) ranks ``-s``;
* a score that is missing, not a number or not finite is not in the distribution: that document gets no
  percentile for that member (counted as ``missing_<key>``) and is combined over the members it has; with none,
  it gets no bucket (counted as ``no_score``; a mix ``where:`` on the bucket then never selects it);
* ``combine: max`` (default) takes the largest member percentile, ``mean`` their mean, ``weighted`` the mean
  weighted by each member's ``weight`` (only their ratios count, in exact rationals, so no sum overflows, equal
  weights are exactly ``mean`` and a combined score on a bucket boundary lands in that bucket); ``<name>_bucket = min(buckets-1, floor(buckets * combined))``, an
  integer in [0, buckets-1] (higher = better). For ``max`` it is computed in integers, so no rounding can move
  a document across a bucket edge.

Nemotron-CC (Su et al. 2024, "Nemotron-CC: Transforming Common Crawl into a Refined Long-Horizon Pretraining
Dataset", section 2), as we read it: each of three quality classifiers' scores is turned into an integer
score 0-19 by the percentile of the score over the corpus (20 buckets of ~5 %), and a document's quality score
is the *maximum* of its three integer scores; those 20 scores are then grouped into five quality levels for the
mix. Because ``floor`` is monotone, ``max_i floor(20 p_i) == floor(20 max_i p_i)``: ``combine: max`` with
``buckets: 20`` is that rule. Ours: the tie rule above, the missing-score rule, ``mean`` / ``weighted``, and
any other number of buckets (the paper does not say how it breaks ties). With ``max`` the buckets are not equal
sized: the top ones hold more than 1/buckets of the corpus (a document needs only one member to rank it high).
Measured on public human labels (benchmarks/bench_quality_labels.py): for the same reason ``max`` ranks worse
than its best member when the members differ in strength (HPLT web labels: 0.78 against 0.90 ROC-AUC), while
``mean`` ranked at least as well there (0.915); ``max`` stays the default as the paper's rule.

Written: ``<name>_bucket`` (int64) and, per member, ``<member>_percentile`` (double), where ``<member>`` is the
key without its ``_score`` suffix (``fasttext_quality_score`` -> ``fasttext_quality_percentile``). Memory: the
phase holds one member's sorted scores at a time (8 bytes per document); the assigning step memory-maps them.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from pydantic import ConfigDict, Field, field_validator, model_validator

from cuvee.classifiers.scoring import CorpusPhaseStep, save_rank_file
from cuvee.kernel.atomic import write_json
from cuvee.kernel.config import StrictModel, did_you_mean
from cuvee.pipeline.recipe import RecipeError
from cuvee.pipeline.registry import (
    Barrier,
    BuildContext,
    Phase,
    StageParams,
    register_stage,
)

KEY_PATTERN = r"^[A-Za-z0-9_.-]+$"


class EnsembleMember(StrictModel):
    """One scorer of the ensemble: the metadata key an earlier stage wrote, its direction and weight."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(..., pattern=KEY_PATTERN, description="metadata key holding the score, e.g. fasttext_quality_score")
    higher_is_better: bool = Field(True, description="false for scores where lower is better (perplexity bits per byte)")
    weight: float = Field(1.0, gt=0, description="weight of this member's percentile (combine: weighted)")

    @field_validator("weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"weight must be finite, got {v}")
        return v

    @property
    def percentile_key(self) -> str:
        return f"{self.key.removesuffix('_score')}_percentile"


class QualityEnsembleParams(StageParams):
    members: list[EnsembleMember] = Field(..., min_length=1, description="scores to combine: metadata keys, or "
                                          "{key, higher_is_better, weight} mappings")
    buckets: int = Field(20, ge=2, le=10_000, description="integer buckets 0..buckets-1 (Nemotron-CC: 20)")
    combine: Literal["max", "mean", "weighted"] = Field("max", description="max (Nemotron-CC), mean, or weighted mean of "
                                                                           "the member percentiles")
    name: str = Field("quality", pattern=KEY_PATTERN, description="metadata key prefix: <name>_bucket")

    @field_validator("members", mode="before")
    @classmethod
    def _short_form(cls, v):
        if isinstance(v, list):
            return [{"key": m} if isinstance(m, str) else m for m in v]
        return v

    @model_validator(mode="after")
    def _consistent(self):
        keys = [m.key for m in self.members]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"members: {dupes} listed twice")
        if self.combine != "weighted" and any(m.weight != 1.0 for m in self.members):
            raise ValueError(f"member weights need combine: weighted (combine is {self.combine})")
        written = {self.bucket_key, *(m.percentile_key for m in self.members)}
        clash = sorted(written & set(keys))
        if clash:
            raise ValueError(f"members {clash} are keys this stage writes; rename the stage (name) or the member")
        return self

    @property
    def bucket_key(self) -> str:
        return f"{self.name}_bucket"

    def metadata_fields(self) -> dict[str, str]:
        return {self.bucket_key: "int64", **{m.percentile_key: "double" for m in self.members}}

    def required_metadata(self) -> dict[str, tuple[str, ...]]:
        return {m.key: ("double", "int64") for m in self.members}


def _finite_score(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class EnsembleScoreRecorder(PipelineStep):
    """Before the barrier: saves this rank's finite scores of every member (``<dir>/<member>/<rank>.npy``,
    float64, so ties survive exactly) and the metadata keys it saw; yields every document unchanged."""

    name = "🧮 ensemble scores"
    type = "🤖 - CLASSIFIER"
    passes_through = True

    def __init__(self, keys: list[str], scores_dir: str):
        super().__init__()
        self.keys = keys
        self.scores_dir = scores_dir

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        seen: list[list[float]] = [[] for _ in self.keys]
        meta_keys: set[str] = set()
        for doc in data or []:
            self.stat_update("total")
            meta_keys.update(doc.metadata)
            for values, key in zip(seen, self.keys):
                s = _finite_score(doc.metadata.get(key))
                if s is not None:
                    values.append(s)
            self.stat_update("forwarded")
            yield doc
        root = Path(self.scores_dir)
        for i, values in enumerate(seen):
            arr = np.asarray(values, dtype=np.float64)
            save_rank_file(str(root / str(i)), f"{rank:05d}.npy", lambda f, a=arr: np.save(f, a))
        (root / "keys").mkdir(parents=True, exist_ok=True)
        write_json(root / "keys" / f"{rank:05d}.json", sorted(meta_keys), indent=None)


class EnsembleDistribution(CorpusPhaseStep):
    """Phase step: every rank's scores of each member, merged and sorted (``<out>/<member>.npy``), plus
    ``info.json`` with the counts. A member no document has is an error naming the keys that do exist."""

    name = "📊 ensemble percentiles"
    type = "🤖 - CLASSIFIER"

    def __init__(self, keys: list[str], scores_dir: str, out_dir: str, expected_ranks: int, stage: str):
        super().__init__()
        self.keys = keys
        self.scores_dir = scores_dir
        self.out_dir = out_dir
        self.expected_ranks = expected_ranks
        self.stage = stage

    def compute(self) -> dict:
        root, out = Path(self.scores_dir), Path(self.out_dir)
        counts = {}
        for i, key in enumerate(self.keys):
            files = sorted((root / str(i)).glob("*.npy"))
            if len(files) != self.expected_ranks:
                raise RuntimeError(f"{self.stage}: expected scores from {self.expected_ranks} ranks in {root / str(i)}, "
                                   f"found {len(files)}")
            merged = np.sort(np.concatenate([np.load(f) for f in files]), kind="stable")
            counts[key] = int(merged.size)
            if merged.size == 0:  # the recipe names a key the documents lack: the user's to fix, in one line
                raise RecipeError(f"{self.stage}: no document has a numeric {key!r}{_did_you_mean(key, root / 'keys')}")
            save_rank_file(str(out), f"{i}.npy", lambda f, a=merged: np.save(f, a))
        info = {"members": counts, "documents": max(counts.values())}
        write_json(out / "info.json", info, indent=None)
        return info


def _did_you_mean(key: str, keys_dir: Path) -> str:
    seen: set[str] = set()
    for f in sorted(keys_dir.glob("*.json")):
        seen.update(json.loads(f.read_text()))
    return did_you_mean(key, sorted(seen)) or f" (metadata keys seen: {', '.join(sorted(seen)) or 'none'})"


def percentile_numerators(sorted_scores: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``#{x < v} + #{x <= v}`` for each value: twice N times its percentile rank, an exact integer."""
    left = np.searchsorted(sorted_scores, values, side="left")
    right = np.searchsorted(sorted_scores, values, side="right")
    return (left + right).astype(np.int64)


class EnsembleBucketer(PipelineStep):
    """After the barrier: writes each member's percentile and the combined bucket into metadata."""

    name = "🧮 quality bucket"
    type = "🤖 - CLASSIFIER"

    def __init__(self, members: list[EnsembleMember], dist_dir: str, buckets: int, combine: str, bucket_key: str,
                 batch_size: int = 1024):
        super().__init__()
        self.members = members
        self.dist_dir = dist_dir
        self.buckets = buckets
        self.combine = combine
        self.bucket_key = bucket_key
        self.batch_size = batch_size

    def _assign(self, batch: list, dists: list[np.ndarray]) -> None:
        b = self.buckets
        ranks = []  # per member: (numerator, denominator) of each document's percentile, numerator -1 when missing
        for m, dist in zip(self.members, dists):
            raw = [_finite_score(d.metadata.get(m.key)) for d in batch]
            have = np.array([s is not None for s in raw], dtype=bool)
            vals = np.array([0.0 if s is None else s for s in raw], dtype=np.float64)
            den = 2 * int(dist.size)
            num = percentile_numerators(dist, vals)
            num = np.where(have, num if m.higher_is_better else den - num, -1)
            ranks.append((num, den))
            for d, n in zip(batch, num):
                if n >= 0:
                    d.metadata[m.percentile_key] = int(n) / den
                else:
                    d.metadata.pop(m.percentile_key, None)  # never a stale value from an earlier run
                    self.stat_update(f"missing_{m.key}")
        for j, d in enumerate(batch):
            have = [(int(num[j]), den, m.weight) for m, (num, den) in zip(self.members, ranks) if num[j] >= 0]
            if not have:
                d.metadata.pop(self.bucket_key, None)
                self.stat_update("no_score")
                continue
            if self.combine == "max":  # floor(b * max_i n_i / den_i), in integers
                bucket = max(min(b - 1, (b * n) // den) for n, den, _ in have)
            elif self.combine == "mean":  # floor(b * sum_i n_i / den_i / k), in integers over a common denominator:
                # a mean on a bucket boundary (11/20) lands in that bucket, not below it by a float's rounding
                common = math.lcm(*(den for _, den, _ in have))
                total = sum(n * (common // den) for n, den, _ in have)
                bucket = min(b - 1, (b * total) // (len(have) * common))
            else:  # exact rationals (the user's float weights, exactly): only their ratios count, none overflows
                w = [Fraction(wt) for _, _, wt in have]
                combined = sum(Fraction(n, den) * wt for (n, den, _), wt in zip(have, w)) / sum(w)
                bucket = min(b - 1, math.floor(b * combined))
            d.metadata[self.bucket_key] = int(bucket)
            self.stat_update(f"bucket_{bucket}")

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        root = Path(self.dist_dir)
        dists = []
        for i, m in enumerate(self.members):
            path = root / f"{i}.npy"
            if not path.exists():
                raise FileNotFoundError(f"{path}: ensemble distribution of {m.key!r} missing; the percentile phase must "
                                        f"run before this step")
            dists.append(np.load(path, mmap_mode="r"))
        batch: list = []
        for doc in data or []:
            self.stat_update("total")
            batch.append(doc)
            if len(batch) >= self.batch_size:
                yield from self._emit(batch, dists)
                batch = []
        if batch:
            yield from self._emit(batch, dists)

    def _emit(self, batch: list, dists: list[np.ndarray]):
        with self.track_time("batch"):
            self._assign(batch, dists)
        for d in batch:
            self.stat_update("forwarded")
            yield d


@register_stage("quality_ensemble", QualityEnsembleParams)
def build_quality_ensemble(p: QualityEnsembleParams, ctx: BuildContext):
    """Scorer ensemble (Nemotron-CC): corpus-wide percentile of each member score, combined into <name>_bucket."""
    keys = [m.key for m in p.members]
    scores_dir = str(ctx.stage_dir("scores"))
    dist_dir = str(ctx.stage_dir("distribution"))
    return Barrier(
        before=[EnsembleScoreRecorder(keys, scores_dir)],
        phases=[Phase(f"{p.name}_ensemble_percentiles",
                      [EnsembleDistribution(keys, scores_dir, dist_dir, ctx.tasks, ctx.stage_name)], tasks=1)],
        after=[EnsembleBucketer(list(p.members), dist_dir, p.buckets, p.combine, p.bucket_key)],
    )
