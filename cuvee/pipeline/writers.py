"""Output and intermediate writers.

Final Parquet output uses one fixed schema (FineWeb-like top-level columns plus the full metadata as
JSON) because datatrove's ParquetWriter infers its schema from the first document and would reject
later documents whose metadata has other keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

TOP_LEVEL_COLUMNS = ("url", "date", "language", "language_score")


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, bytes):
        return None  # transient raw payloads never reach outputs
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def clean_metadata(meta: dict) -> dict:
    """Metadata safe to serialise: transient keys (leading underscore) and raw bytes removed."""
    return {k: _jsonable(v) for k, v in meta.items() if not k.startswith("_") and not isinstance(v, bytes)}


def _parquet_adapter(self, doc: Document) -> dict:
    meta = clean_metadata(doc.metadata)
    row = {"text": doc.text, "id": str(doc.id)}
    for col in TOP_LEVEL_COLUMNS:
        v = meta.get(col)
        row[col] = (float(v) if v is not None else None) if col == "language_score" else (str(v) if v is not None else None)
    row["metadata"] = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    return row


def _jsonl_adapter(self, doc: Document) -> dict:
    return {"text": doc.text, "id": str(doc.id), "metadata": clean_metadata(doc.metadata)}


def parquet_schema():
    import pyarrow as pa

    return pa.schema(
        [("text", pa.string()), ("id", pa.string()), ("url", pa.string()), ("date", pa.string()),
         ("language", pa.string()), ("language_score", pa.float64()), ("metadata", pa.string())]
    )


def output_writer(path: str, fmt: str, route_by: str | None = None):
    """The run's final writer; ``route_by`` puts each document under <path>/<metadata value>/."""
    prefix = f"${{{route_by}}}/" if route_by else ""
    if fmt == "parquet":
        return ParquetWriter(path, output_filename=prefix + "${rank}.parquet", adapter=_parquet_adapter,
                             schema=parquet_schema(), compression="zstd")
    return JsonlWriter(path, output_filename=prefix + "${rank}.jsonl.gz", adapter=_jsonl_adapter)


def exclusion_writer(path: str):
    """Writes dropped documents of one stage for inspection."""
    return JsonlWriter(path, output_filename="${rank}.jsonl.gz", adapter=_jsonl_adapter)


class IntermediateWriter(PipelineStep):
    """Between segments: ``<folder>/<rank>.jsonl``, one file per rank, so the next segment's rank r reads
    exactly what rank r wrote. Uncompressed orjson lines written per batch and renamed into place when
    complete: these files live for one run, and gzip plus per-document bookkeeping cost as much as a
    MinHash signature."""

    name = "💾 intermediate writer"
    type = "💽 - WRITER"

    def __init__(self, folder: Path, batch_size: int = 1024):
        super().__init__()
        self.folder = Path(folder)
        self.batch_size = batch_size

    def run(self, data, rank: int = 0, world_size: int = 1):
        import orjson
        from datatrove.utils.batching import batched

        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{rank:05d}.jsonl.tmp"
        with open(tmp, "wb") as f:
            for batch in batched(data or (), self.batch_size):
                with self.track_time():
                    f.write(b"".join(orjson.dumps({"text": d.text, "id": str(d.id), "metadata": clean_metadata(d.metadata)})
                                     + b"\n" for d in batch))
                self.stat_update("total", value=len(batch))
        tmp.replace(self.folder / f"{rank:05d}.jsonl")
        return
        yield


class RankFileReader(PipelineStep):
    """Reads back exactly ``<folder>/<rank>.jsonl`` (datatrove's readers shard by sorted file list, which
    shifts files between ranks when a rank wrote nothing, and skip empty texts)."""

    name = "🔁 intermediate reader"
    type = "📖 - READER"

    def __init__(self, folder: Path, batch_size: int = 1024):
        super().__init__()
        self.folder = Path(folder)
        self.batch_size = batch_size

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        import orjson
        from datatrove.utils.batching import batched

        if data:
            yield from data
        path = self.folder / f"{rank:05d}.jsonl"
        if not path.exists():
            return
        with open(path, "rb") as f:
            for lines in batched(f, self.batch_size):
                rows = [orjson.loads(line) for line in lines]
                self.stat_update("total", value=len(rows))
                self.stat_update("forwarded", value=len(rows))
                for r in rows:
                    yield Document(text=r["text"], id=r["id"], metadata=r.get("metadata") or {})


def intermediate_writer(folder: Path) -> IntermediateWriter:
    return IntermediateWriter(folder)


def intermediate_reader(folder: Path) -> RankFileReader:
    return RankFileReader(folder)
