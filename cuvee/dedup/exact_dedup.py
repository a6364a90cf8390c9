"""Exact content dedup: one document per 128-bit hash of its normalised text (case and whitespace ignored).

Keep rule: the first copy in (rank, position) order, i.e. input order for a single task. Empty texts
are never deduplicated (counted as ``no_key``).
"""

from __future__ import annotations

import xxhash
from pydantic import Field

from cuvee.dedup.keyed import FindKeyDuplicates, KeyRecorder
from cuvee.dedup.steps import DropListed
from cuvee.dedup.native_exact import normalized_utf8
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

_MASK64 = (1 << 64) - 1


class ExactDedupParams(StageParams):
    memory_budget_mb: int = Field(1024, ge=1, description="per phase task; larger key sets spill to disk")


class TextKeyer:
    """128-bit xxh3 of ``normalize_text(doc.text)``'s UTF-8 bytes, folded by a compiled loop
    (:mod:`cuvee.dedup.native_exact`; the same key as hashing the normalised string)."""

    def __call__(self, doc):
        norm = normalized_utf8(doc.text)
        if not norm:
            return None
        h = xxhash.xxh3_128_intdigest(norm)
        return h >> 64, h & _MASK64, 0, 0


@register_stage("exact_dedup", ExactDedupParams)
def build_exact_dedup(p: ExactDedupParams, ctx: BuildContext):
    """Exact dedup on a 128-bit hash of the normalised text; keeps the first copy."""
    folder = ctx.stage_dir()
    return Barrier(
        before=[KeyRecorder(folder, ctx.tasks, TextKeyer())],
        phases=[Phase("exact_duplicates", [FindKeyDuplicates(folder, ctx.tasks, p.memory_budget_mb)], tasks=ctx.tasks)],
        after=[DropListed(folder, "drops/*/{rank}.u64", "exact_duplicate")],
    )
