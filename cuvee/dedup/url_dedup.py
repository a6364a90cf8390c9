"""URL dedup: one document per normalised URL (the same page crawled twice, or under tracking variants).

Keep rule: the latest crawl (metadata ``date``, ISO-8601, else the ``cc_snapshot`` year-week), then the
longest text, then the first in (rank, position) order. Documents without a URL are kept and counted
as ``no_key``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import xxhash
from pydantic import Field

from cuvee.dedup.keyed import FindKeyDuplicates, KeyRecorder
from cuvee.dedup.steps import DropListed
from cuvee.dedup.text import normalize_url
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

_MASK64 = (1 << 64) - 1


class UrlDedupParams(StageParams):
    url_key: str = Field("url", description="metadata key holding the URL")
    memory_budget_mb: int = Field(1024, ge=1, description="per phase task; larger key sets spill to disk")

    def metadata_fields(self) -> dict[str, str]:
        return {"url_cluster_size": "int64"}  # and url_duplicate_of in exclusion records (cuvee.dedup.clusters)


def crawl_time(meta: dict) -> int:
    """Seconds since the epoch of the crawl, 0 when unknown (so any dated copy wins)."""
    d = meta.get("date")
    if d:
        try:
            dt = datetime.fromisoformat(str(d).replace("Z", "+00:00"))
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            return int(dt.timestamp())
        except ValueError:
            pass
    snap = str(meta.get("cc_snapshot") or "")  # CC-MAIN-2024-22
    parts = snap.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return int(datetime(int(parts[1]), 1, 1, tzinfo=UTC).timestamp()) + int(parts[2]) * 7 * 86400
    return 0


class UrlKeyer:
    def __init__(self, url_key: str):
        self.url_key = url_key

    def __call__(self, batch: list) -> list:
        return [self._key(doc) for doc in batch]

    def _key(self, doc):
        url = doc.metadata.get(self.url_key)
        if not url:
            return None
        h = xxhash.xxh3_128_intdigest(normalize_url(str(url)))
        return h >> 64, h & _MASK64, crawl_time(doc.metadata), len(doc.text)


@register_stage("url_dedup", UrlDedupParams)
def build_url_dedup(p: UrlDedupParams, ctx: BuildContext):
    """URL dedup on normalised URLs; keeps the latest crawl, then the longest text."""
    folder = ctx.stage_dir()
    return Barrier(
        before=[KeyRecorder(folder, ctx.tasks, UrlKeyer(p.url_key))],
        phases=[Phase("url_duplicates", [FindKeyDuplicates(folder, ctx.tasks, p.memory_budget_mb)], tasks=ctx.tasks)],
        after=[DropListed(folder, "drops/*/{rank}.u64", "url_duplicate", ctx.exclusion_writer(),
                          clusters_glob="clusters/*/{rank}.bin", kind="url")],
    )
