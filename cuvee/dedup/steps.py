"""Pipeline steps shared by the dedup stages: the recording pass-through base, the drop filter, and the
checks that a ``one_pass`` stage (its table lives in one process) runs as one task."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.utils.batching import batched

from cuvee.dedup.clusters import ClusterLookup, IdTextWriter
from cuvee.dedup.files import AtomicWriter, PositionTracker, id_check, load_array, rank_file
from cuvee.pipeline.doc_stats import add_length_stats
from cuvee.pipeline.recipe import RecipeError


def check_one_pass_recipe(ctx) -> None:
    """At build: a ``one_pass`` stage refuses a recipe with more than one task (``ctx``: its BuildContext)."""
    if ctx.tasks != 1:
        raise RecipeError(f"stage {ctx.stage_name!r}: one_pass needs executor.tasks: 1 (this recipe has "
                          f"{ctx.tasks}); leave one_pass out to deduplicate across tasks")


def check_one_pass_run(stage: str, world_size: int) -> None:
    """At run: the same refusal for a step started in more than one task by something other than a recipe."""
    if world_size != 1:
        raise RuntimeError(f"{stage} one_pass needs one task, this run has {world_size}: set one_pass: false "
                           "(the default) to deduplicate across tasks")


class RecordingStep(PipelineStep):
    """Pass-through step before a dedup barrier: yields every document unchanged, in order, and records
    what the phases need into per-rank files under ``folder`` (renamed into place only when the rank
    completes, so a killed task leaves nothing half-written). Subclasses implement ``record(batch)``; those whose
    phases name the document kept for a cluster set ``records_id_text`` (the ids as text, :mod:`cuvee.dedup.clusters`)."""

    type = "🫂 - DEDUP"
    passes_through = True  # the compiler may skip the corpus copy at this barrier (see registry.Barrier)
    batch_size = 256  # documents per record() call: per-batch numpy and file calls amortised, little held
    records_id_text = False

    def __init__(self, folder: str | Path):
        super().__init__()
        self.folder = Path(folder)

    def open(self, rank: int) -> None:  # subclasses open their writers
        pass

    def record(self, batch: list) -> None:
        raise NotImplementedError

    def close(self, ok: bool) -> None:
        pass

    def run(self, data, rank: int = 0, world_size: int = 1):
        self.open(rank)
        ids = AtomicWriter(rank_file(self.folder / "ids", rank, "ids.u32"))
        self._id_text = IdTextWriter(self.folder, rank) if self.records_id_text else None
        ok = False
        try:
            batch: list = []
            for doc in data or ():
                batch.append(doc)
                if len(batch) >= self.batch_size:
                    yield from self._flush(batch, ids)
                    batch = []
            if batch:
                yield from self._flush(batch, ids)
            ok = True
        finally:
            ids.close() if ok else ids.abort()
            if self._id_text is not None:
                self._id_text.close(ok)
            self.close(ok)

    def _flush(self, batch, ids: AtomicWriter):
        # counters per batch, not per document: datatrove's stat_update costs as much as a MinHash signature
        self.stat_update("total", value=len(batch))
        with self.track_time():
            self.record(batch)
            ids.write(np.fromiter((id_check(d.id) for d in batch), dtype=np.uint32, count=len(batch)))
            if self._id_text is not None:
                self._id_text.write_docs(batch)
        self.stat_update("forwarded", value=len(batch))
        yield from batch


def add_doc_stats(step: PipelineStep, docs: list) -> None:
    """``step.update_doc_stats`` for a batch in one merge (:func:`cuvee.pipeline.doc_stats.add_length_stats`)."""
    if any(d.metadata.get("token_count") for d in docs):
        for d in docs:
            step.update_doc_stats(d)
        return
    add_length_stats(step, [len(d.text) for d in docs])


def lean_filter_run(step: BaseFilter, data, decide_batch, batch_size: int = 1024):
    """A dedup filter without an exclusion writer (the common case): BaseFilter's counters, updated once per
    batch (1,024 documents by default) instead of once per document. ``decide_batch(batch)`` gives one verdict per document, as
    ``BaseFilter.filter`` does: True, or (False, reason)."""
    for batch in batched(data, batch_size):
        with step.track_time():
            verdicts = decide_batch(batch)
        kept = [doc for doc, v in zip(batch, verdicts) if v is True]
        step.stat_update("total", value=len(batch))
        if kept:
            step.stat_update("forwarded", value=len(kept))
        if len(kept) < len(batch):
            step.stat_update("dropped", value=len(batch) - len(kept))
            for reason, n in Counter(v[1] for v in verdicts if v is not True).items():
                step.stat_update(f"dropped_{reason}", value=n)
        add_doc_stats(step, kept)
        yield from kept


class DropListed(BaseFilter):
    """After the barrier: drops the documents whose (rank, position) the phases listed, under ``reason``; with
    ``clusters_glob`` and ``kind``, writes each document's duplicate cluster (:class:`~cuvee.dedup.clusters.ClusterLookup`)."""

    name = "🫂 dedup filter"
    replays_exactly = True  # decisions come from the phases' files and the positions: the same on every read

    def __init__(self, folder: str | Path, drops_glob: str, reason: str, exclusion_writer=None,
                 clusters_glob: str | None = None, kind: str | None = None):
        super().__init__(exclusion_writer=exclusion_writer)
        self.folder = Path(folder)
        self.drops_glob = drops_glob  # relative to folder, with {rank} placeholder
        self.reason = reason
        self.clusters_glob, self.kind = clusters_glob, kind
        self._tracker: PositionTracker | None = None
        self._drops = np.zeros(0, dtype=np.uint64)
        self._clusters: ClusterLookup | None = None

    def run(self, data, rank: int = 0, world_size: int = 1):
        self._tracker = PositionTracker(self.folder / "ids", rank, self.name)
        files = sorted(self.folder.glob(self.drops_glob.format(rank=f"{rank:05d}")))
        # sorted positions, bisected per batch
        self._drops = np.unique(np.concatenate([load_array(f, np.uint64) for f in files])) if files else self._drops
        if self.clusters_glob:  # one cluster file beside each drop list (a work folder from before them: none)
            found = sorted(self.folder.glob(self.clusters_glob.format(rank=f"{rank:05d}")))
            if len(found) != len(files):
                raise FileNotFoundError(f"{self.name}: {len(found)} cluster record files for {len(files)} drop lists "
                                        f"under {self.folder} (phase not finished, or a work folder written before "
                                        "cluster records: rerun with --fresh)")
            self._clusters = ClusterLookup(self.folder, found, self.kind)
        if self.exclusion_writer:
            yield from super().run(data, rank, world_size)
            return
        yield from lean_filter_run(self, data, self._decide_batch)

    def _decide_batch(self, batch: list) -> list:
        """The batch's verdicts: its positions checked in one comparison, its listed drops found by bisection."""
        start = self._tracker.take(batch)
        lo, hi = np.searchsorted(self._drops, np.array([start, start + len(batch)], dtype=np.uint64)).tolist()
        verdicts: list = [True] * len(batch)
        for p in self._drops[lo:hi].tolist():
            verdicts[p - start] = (False, self.reason)
        if self._clusters is not None:
            self._clusters.annotate(batch, start, verdicts, name_keepers=self.exclusion_writer is not None)
        return verdicts

    def filter(self, doc):  # the exclusion-writer path: one document at a time, the same decision
        return self._decide_batch([doc])[0]
