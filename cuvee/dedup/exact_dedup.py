"""Exact content dedup: one document per 128-bit hash of its normalised text (case and whitespace ignored).

Keep rule: the first copy in (rank, position) order, i.e. input order for a single task. Empty texts
are never deduplicated (counted as ``no_key``).

Two ways to apply it. By default a barrier: keys are recorded, a phase sorts them (spilling beyond the memory
budget) and a filter re-reads the input to drop the listed copies; any number of tasks. With ``one_pass: true``
and one task, the keep rule is decided as documents stream by (a copy is dropped when its key was already
seen), so the input is read once, as Dolma's Bloom-filter dedup does but without false positives; the keys
then live in memory, at most ``memory_budget_mb``, and the run stops with a message past that.

Provenance (:mod:`cuvee.dedup.clusters`): a cluster is the documents of one key. The barrier writes
``exact_cluster_size`` on every document it keeps and ``exact_duplicate_of`` (the kept copy's id) on each copy in
the exclusion records. ``one_pass`` decides before the later copies are read, so it cannot give a kept document
its cluster's size: it writes ``exact_duplicate_of`` only (exclusion records), holding each key's first id.
"""

from __future__ import annotations

import numpy as np
import xxhash
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field

from cuvee.dedup.keyed import FindKeyDuplicates, KeyRecorder
from cuvee.dedup.native_exact import normalized_batch
from cuvee.dedup.steps import DropListed, check_one_pass_recipe, check_one_pass_run, lean_filter_run
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

_MASK64 = (1 << 64) - 1


class ExactDedupParams(StageParams):
    memory_budget_mb: int = Field(1024, ge=1, description="per phase task; larger key sets spill to disk "
                                                         "(one_pass: the most its in-memory key set may take)")
    one_pass: bool = Field(False, description="executor.tasks 1 only: decide while reading (no second read of the "
                                              "input, no key files); keys held in memory, ~100 bytes each; kept "
                                              "documents get no exact_cluster_size (their later copies are unread)")

    def metadata_fields(self) -> dict[str, str]:
        return {} if self.one_pass else {"exact_cluster_size": "int64"}


def text_digests(texts: list[str]) -> list[int | None]:
    """128-bit xxh3 of each ``normalize_text(text)``'s UTF-8 bytes (lowered and folded by one compiled call per
    batch, :mod:`cuvee.dedup.native_exact`: the same key as hashing the normalised string); None for a text
    that normalises to nothing."""
    digest = xxhash.xxh3_128_intdigest
    return [digest(v) if len(v) else None for v in normalized_batch(texts)]


class TextKeyer:
    """Exact dedup's key: the text digest as (hi, lo), no priorities (the first copy wins)."""

    def __call__(self, batch: list) -> list:
        return [None if h is None else (h >> 64, h & _MASK64, 0, 0) for h in text_digests([d.text for d in batch])]

    def key_arrays(self, batch: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The same keys as arrays, for :class:`KeyRecorder`: (index in ``batch`` of each document with a key,
        key hi, key lo). The digest's canonical bytes are big-endian, so they split into the two halves of the
        int digest without a Python integer per document."""
        views = normalized_batch([d.text for d in batch])
        keyed = [i for i, v in enumerate(views) if len(v)]
        digest = xxhash.xxh3_128_digest
        halves = np.frombuffer(b"".join([digest(views[i]) for i in keyed]), dtype=">u8").reshape(-1, 2)
        return np.array(keyed, dtype=np.int64), halves[:, 0].astype(np.uint64), halves[:, 1].astype(np.uint64)


class OnePassExactDedup(BaseFilter):
    """One task: keeps a document unless its key was seen earlier in the stream, the barrier's keep rule for
    a single task (first copy in input order), decided without recording keys or re-reading the input.

    Deterministic for a given input stream, so the compiler may replay it after a later barrier instead of
    writing a corpus copy (its counters then go to the internal replay label, not twice to the stage)."""

    name = "🔑 exact dedup (one pass)"
    replays_exactly = True
    BYTES_PER_KEY = 100  # a 128-bit int in a set, measured with tracemalloc at the set's resize peak
    # with exclusion records each key also holds its first id: a dict of 47-character WARC ids took 96 bytes per
    # key more than the set (tracemalloc, 200k keys)
    BYTES_PER_NAMED_KEY = 200

    def __init__(self, memory_budget_mb: int, exclusion_writer=None):
        super().__init__(exclusion_writer=exclusion_writer)
        self.max_keys = memory_budget_mb * 2**20 // self.BYTES_PER_KEY
        self.budget_mb = memory_budget_mb
        self._seen: set[int] | dict[int, str] = set()

    def run(self, data, rank: int = 0, world_size: int = 1):
        check_one_pass_run("exact_dedup", world_size)
        self._seen = set()
        if self.exclusion_writer:  # each key's first id, for the exclusion records' exact_duplicate_of
            self._seen = {}
            self.max_keys = self.budget_mb * 2**20 // self.BYTES_PER_NAMED_KEY
            yield from super().run(data, rank, world_size)
        else:
            yield from lean_filter_run(
                self, data, lambda batch: [self._decide(h) for h in text_digests([d.text for d in batch])])
        self.stat_update("unique_keys", value=len(self._seen))
        self._seen = set()

    def filter(self, doc):
        key = text_digests([doc.text])[0]
        verdict = self._decide(key, str(doc.id))
        if verdict is not True:
            doc.metadata["exact_duplicate_of"] = self._seen[key]
        return verdict

    def _decide(self, key: int | None, doc_id: str | None = None):
        if key is None:
            self.stat_update("no_key")
            return True
        if key in self._seen:
            return False, "exact_duplicate"
        if len(self._seen) >= self.max_keys:
            raise RuntimeError(f"exact_dedup one_pass: more than {self.max_keys:,} distinct documents do not fit "
                               f"memory_budget_mb={self.budget_mb}; raise it, or drop one_pass (the default barrier "
                               "spills to disk and runs on any number of tasks)")
        if doc_id is None:
            self._seen.add(key)
        else:
            self._seen[key] = doc_id
        return True


@register_stage("exact_dedup", ExactDedupParams)
def build_exact_dedup(p: ExactDedupParams, ctx: BuildContext):
    """Exact dedup on a 128-bit hash of the normalised text; keeps the first copy."""
    from cuvee.dedup import native_exact
    from cuvee.pipeline.first_use import kernels_before_run

    kernels_before_run(ctx.stage_name, native_exact.KERNELS, native_exact.warm_up)
    if p.one_pass:
        check_one_pass_recipe(ctx)
        return [OnePassExactDedup(p.memory_budget_mb, exclusion_writer=ctx.exclusion_writer())]
    folder = ctx.stage_dir()
    return Barrier(
        before=[KeyRecorder(folder, ctx.tasks, TextKeyer())],
        phases=[Phase("exact_duplicates", [FindKeyDuplicates(folder, ctx.tasks, p.memory_budget_mb)], tasks=ctx.tasks)],
        after=[DropListed(folder, "drops/*/{rank}.u64", "exact_duplicate", ctx.exclusion_writer(),
                          clusters_glob="clusters/*/{rank}.bin", kind="exact")],
    )
