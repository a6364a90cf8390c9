"""Shared machinery for every scoring stage: score -> metadata, then keep by threshold or corpus top-p %.

A *scorer* is a small picklable object with ``score_batch(texts) -> np.ndarray`` that loads its model
lazily (on the worker, not when the recipe is validated). Every quality stage (fastText, transformer)
is the same three steps around a scorer:

* ``ScoreAnnotator`` writes ``metadata[<name>_score]`` and yields every document;
* ``ScoreThresholdFilter`` keeps documents whose score is >= a cutoff;
* for ``top_percent`` the cutoff must come from the *whole corpus*, not one shard, so the stage is a
  :class:`~cuvee.pipeline.registry.Barrier`: the annotator also saves each rank's scores, a phase
  (``PercentileCutoff``) merges them and writes the cutoff, and the filter after the barrier reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter

from cuvee.kernel.atomic import replacing, write_json
from cuvee.pipeline.registry import Barrier, BuildContext, Phase


class Scorer(Protocol):
    def score_batch(self, texts: list[str]) -> np.ndarray: ...


def score_key(name: str) -> str:
    """Metadata key for a classifier's score: ``<name>_score`` (ARCHITECTURE.md)."""
    return name if name.endswith("_score") else f"{name}_score"


def scored_in_batches(step: PipelineStep, data: DocumentsPipeline, batch_size: int,
                      flush: Callable[[list[Document]], None]) -> DocumentsPipeline:
    """Every document of ``data``, each batch of ``batch_size`` passed to ``flush`` (which scores it) before its
    documents go on; counts ``total`` and ``forwarded`` on ``step``."""
    batch: list[Document] = []
    for doc in data or []:
        step.stat_update("total")
        batch.append(doc)
        if len(batch) >= batch_size:
            flush(batch)
            yield from _forwarded(step, batch)
            batch = []
    if batch:
        flush(batch)
        yield from _forwarded(step, batch)


def _forwarded(step: PipelineStep, batch: list[Document]) -> DocumentsPipeline:
    for doc in batch:
        step.stat_update("forwarded")
        yield doc


def save_rank_file(scores_dir: str, name: str, write: Callable[[BinaryIO], None]) -> None:
    """``scores_dir/name`` written by ``write`` through the kernel's atomic write (a phase reads only whole files)."""
    out = Path(scores_dir)
    out.mkdir(parents=True, exist_ok=True)
    with replacing(out / name) as tmp, open(tmp, "wb") as f:
        write(f)


class ScoreAnnotator(PipelineStep):
    """Scores documents in batches and writes the score into metadata; never drops anything.

    With ``scores_dir`` set, the scores seen by this rank are saved to ``scores_dir/<rank>.npy`` when the
    input ends, for a corpus-wide percentile.
    """

    name = "🎯 score"
    type = "🤖 - CLASSIFIER"

    def __init__(self, scorer: Scorer, key: str, batch_size: int = 256, scores_dir: str | None = None):
        super().__init__()
        self.scorer = scorer
        self.key = key
        self.batch_size = batch_size
        self.scores_dir = scores_dir

    def score(self, texts: list[str]) -> tuple[np.ndarray, list[dict] | None]:
        """Scores of ``texts`` and, for scorers that have them, extra metadata per text (None here)."""
        return self.scorer.score_batch(texts), None

    def _flush(self, batch: list[Document], seen: list[np.ndarray]):
        with self.track_time("batch"):
            scores, extras = self.score([d.text for d in batch])
            scores = np.asarray(scores, dtype=np.float64)
        if len(scores) != len(batch):
            raise RuntimeError(f"{type(self.scorer).__name__} returned {len(scores)} scores for {len(batch)} documents")
        for doc, s in zip(batch, scores):
            doc.metadata[self.key] = float(s)
        for doc, extra in zip(batch, extras or []):
            doc.metadata.update(extra)
            for v in extra.values():
                if isinstance(v, str):
                    self.stat_update(f"label_{v}")
        seen.append(scores.astype(np.float32))
        self.stat_update("batches")

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        seen: list[np.ndarray] = []
        yield from scored_in_batches(self, data, self.batch_size, lambda batch: self._flush(batch, seen))
        if self.scores_dir is not None:
            arr = np.concatenate(seen) if seen else np.zeros(0, dtype=np.float32)
            save_rank_file(self.scores_dir, f"{rank:05d}.npy", lambda f: np.save(f, arr))


def corpus_cutoff(scores: np.ndarray, top_percent: float) -> float:
    """Score a document needs to be in the top ``top_percent`` % of ``scores`` (ties at the cutoff are kept)."""
    if len(scores) == 0:
        return float("inf")
    return float(np.quantile(scores.astype(np.float64), 1.0 - top_percent / 100.0, method="higher"))


class CorpusPhaseStep(PipelineStep):
    """A whole-corpus phase: rank 0 runs ``compute()`` over every rank's saved scores once, and counts them."""

    def compute(self) -> dict:
        raise NotImplementedError

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        if rank == 0:
            info = self.compute()
            self.stat_update("documents", value=info["documents"])


class PercentileCutoff(CorpusPhaseStep):
    """Phase step: merge every rank's scores and write ``{"cutoff": ...}`` for the filter after the barrier.

    Scores are kept exactly (4 bytes per document), so the cutoff is the true corpus quantile.
    """

    name = "📊 percentile cutoff"
    type = "🤖 - CLASSIFIER"

    def __init__(self, scores_dir: str, cutoff_path: str, top_percent: float, expected_ranks: int | None = None):
        super().__init__()
        self.scores_dir = scores_dir
        self.cutoff_path = cutoff_path
        self.top_percent = top_percent
        self.expected_ranks = expected_ranks

    def compute(self) -> dict:
        files = sorted(Path(self.scores_dir).glob("*.npy"))
        if self.expected_ranks is not None and len(files) != self.expected_ranks:
            raise RuntimeError(
                f"percentile cutoff: expected scores from {self.expected_ranks} ranks in {self.scores_dir}, found {len(files)}"
            )
        scores = np.concatenate([np.load(f) for f in files]) if files else np.zeros(0, dtype=np.float32)
        info = {
            "cutoff": corpus_cutoff(scores, self.top_percent),
            "top_percent": self.top_percent,
            "documents": len(scores),
            "ranks": len(files),
        }
        Path(self.cutoff_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(self.cutoff_path, info, indent=None)
        return info


class ScoreThresholdFilter(BaseFilter):
    """Keeps documents whose ``metadata[key] >= threshold``; the threshold may come from a cutoff file."""

    name = "🎯 score threshold"

    def __init__(self, key: str, threshold: float | None = None, cutoff_path: str | None = None, reason: str = "low_score",
                 exclusion_writer=None):
        super().__init__(exclusion_writer)
        if (threshold is None) == (cutoff_path is None):
            raise ValueError("give exactly one of threshold or cutoff_path")
        self.key = key
        self.threshold = threshold
        self.cutoff_path = cutoff_path
        self.reason = reason

    def _cutoff(self) -> float:
        if self.threshold is None:
            p = Path(self.cutoff_path)
            if not p.exists():
                raise FileNotFoundError(f"{p}: corpus cutoff missing; the percentile phase must run before this filter")
            self.threshold = float(json.loads(p.read_text())["cutoff"])
        return self.threshold

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if self.key not in doc.metadata:
            return False, f"missing_{self.key}"
        return (True, None) if doc.metadata[self.key] >= self._cutoff() else (False, self.reason)


def build_score_stage(
    scorer: Scorer,
    name: str,
    ctx: BuildContext,
    threshold: float | None,
    top_percent: float | None,
    batch_size: int,
    annotator: type[ScoreAnnotator] = ScoreAnnotator,
) -> list | Barrier:
    """The annotate / threshold / corpus top-p % wiring shared by every quality scorer stage; ``annotator`` is
    the ScoreAnnotator class to build (a subclass for scorers with extra metadata)."""
    key = score_key(name)
    if threshold is not None and top_percent is not None:
        raise ValueError("give threshold or top_percent, not both")
    if top_percent is None:
        steps: list = [annotator(scorer, key, batch_size)]
        if threshold is not None:
            steps.append(ScoreThresholdFilter(key, threshold=threshold, reason=f"{name}_below_threshold",
                                              exclusion_writer=ctx.exclusion_writer()))
        return steps
    scores_dir = str(ctx.stage_dir("scores"))
    cutoff_path = str(ctx.stage_dir("cutoff.json"))
    return Barrier(
        before=[annotator(scorer, key, batch_size, scores_dir=scores_dir)],
        phases=[Phase(f"{name}_percentile", [PercentileCutoff(scores_dir, cutoff_path, top_percent, ctx.tasks)], tasks=1)],
        after=[ScoreThresholdFilter(key, cutoff_path=cutoff_path, reason=f"{name}_below_top_percent",
                                    exclusion_writer=ctx.exclusion_writer())],
    )
