"""Output and intermediate writers.

Final Parquet output has one schema per run, decided before any document is written (datatrove's
ParquetWriter infers it from the first document and would reject later documents with other keys, and
``datasets`` refuses files of one dataset whose schemas differ): FineWeb-like top-level columns, plus
``metadata`` as a *typed struct* whose fields are the keys the reader and the recipe's stages declare
(``StageParams.metadata_fields``), so ``pyarrow`` / ``datasets`` users filter on
``metadata.language_score`` directly. A key no stage declared, or a value whose type does not fit its
field (never coerced), goes into the struct's ``other_json`` field as JSON; readers merge it back.
"""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import Document
from datatrove.io import OutputFileManager
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

from cuvee.kernel.atomic import replacing
from cuvee.pipeline.fastgzip import WRITE_LEVEL, GzipFile

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


# keys cuvee's readers and response check write on every document (stages declare their own)
READER_METADATA = {
    "url": "string", "date": "string", "warc_record_id": "string", "warc_type": "string", "payload_type": "string",
    "content_type": "string", "http_status": "int64", "cc_snapshot": "string", "cc_languages": "string", "cc_charset": "string",
    "charset": "string", "charset_source": "string",
    # identity at the source (readers/archives.py, readers/tables.py): one record re-read from its file alone
    "source_file": "string", "source_offset": "int64", "source_length": "int64", "source_skip": "int64",
    "payload_digest": "string", "input_file": "string", "input_row": "int64",
}
OTHER_FIELD = "other_json"  # struct field: JSON of keys without a declared field (or values that do not fit it)
_FITS = {
    "string": lambda v: isinstance(v, str),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int64": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
    "bool": lambda v: isinstance(v, bool),
}


def metadata_struct_fields(declared: dict[str, str] | None = None) -> dict[str, str]:
    """The run's metadata fields: the readers' keys, then the stages' declared keys, sorted for stability."""
    fields = dict(READER_METADATA)
    for k, t in (declared or {}).items():
        if t not in _FITS:
            raise ValueError(f"metadata field {k!r}: unknown type {t!r} (one of {', '.join(_FITS)})")
        fields[k] = t
    fields.pop(OTHER_FIELD, None)
    return dict(sorted(fields.items()))


def _split_metadata(meta: dict, fields: dict[str, str]) -> dict:
    """A struct row: declared keys whose values fit their type; everything else as JSON in ``other_json``."""
    row = dict.fromkeys(fields)
    other = {}
    for k, v in meta.items():
        t = fields.get(k)
        if t is not None and (v is None or _FITS[t](v)):
            row[k] = float(v) if t == "double" and v is not None else v
        elif v is not None:
            other[k] = v
    row[OTHER_FIELD] = json.dumps(other, ensure_ascii=False, sort_keys=True) if other else None
    return row


def _parquet_adapter(self, doc: Document) -> dict:
    meta = clean_metadata(doc.metadata)
    row = {"text": doc.text, "id": str(doc.id)}
    for col in TOP_LEVEL_COLUMNS:
        v = meta.get(col)
        row[col] = (float(v) if v is not None else None) if col == "language_score" else (str(v) if v is not None else None)
    row["metadata"] = _split_metadata(meta, self.metadata_fields)
    return row


def _jsonl_adapter(self, doc: Document) -> dict:
    return {"text": doc.text, "id": str(doc.id), "metadata": clean_metadata(doc.metadata)}


def parquet_schema(fields: dict[str, str] | None = None):
    """The output schema for the run's metadata struct ``fields`` (from :func:`metadata_struct_fields`)."""
    import pyarrow as pa

    fields = metadata_struct_fields() if fields is None else fields
    types = {"string": pa.string(), "double": pa.float64(), "int64": pa.int64(), "bool": pa.bool_()}
    struct = pa.struct([(k, types[t]) for k, t in fields.items()] + [(OTHER_FIELD, pa.string())])
    return pa.schema(
        [("text", pa.string()), ("id", pa.string()), ("url", pa.string()), ("date", pa.string()),
         ("language", pa.string()), ("language_score", pa.float64()), ("metadata", struct)]
    )


def metadata_from_row(meta) -> dict:
    """A stored ``metadata`` value back to the document's mapping: a typed struct (absent keys are null;
    ``other_json`` merged back), a JSON string (cuvee before typed metadata), or a mapping (JSONL)."""
    if meta is None:
        return {}
    if isinstance(meta, str):
        return json.loads(meta)
    out = {k: v for k, v in meta.items() if v is not None and k != OTHER_FIELD}
    other = meta.get(OTHER_FIELD)
    if isinstance(other, str) and other:
        out.update(json.loads(other))
    return out


ROUTE_MISSING = "_missing"  # output folder of documents lacking the ``route_by`` key (or with None / "")


def route_folder(metadata: dict, key: str) -> str:
    """The folder a document goes to under ``route_by: key``: its metadata value as a single path component
    (separators replaced by '_'), or ``ROUTE_MISSING`` when the key is absent, None or empty."""
    v = metadata.get(key)
    if v is None or v == "":
        return ROUTE_MISSING
    name = str(v).replace("/", "_").replace("\\", "_")
    return "_" + name if name in (".", "..") else name


class _DeterministicGzip(GzipFile):
    """A gzip stream with a fixed header (mtime 0, no file name) that closes its underlying file too; written
    through ISA-L at level 3 (:mod:`cuvee.pipeline.fastgzip`: about 9x faster than zlib's level 9)."""

    def __init__(self, raw):
        super().__init__(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=WRITE_LEVEL)
        self._raw = raw

    def close(self):
        try:
            super().close()
        finally:
            raw, self._raw = self._raw, None
            if raw is not None:
                raw.close()


class _GzipFileManager(OutputFileManager):
    """datatrove's output file manager, but gzip is written with a fixed header: identical runs write
    byte-identical ``.gz`` files (fsspec's gzip stamps the current time into every header)."""

    def get_file(self, filename):
        if filename not in self._output_files:
            self._output_files[filename] = _DeterministicGzip(self.fs.open(filename, mode="wb", compression=None))
        return self._output_files[filename]


class CuveeJsonlWriter(JsonlWriter):
    """JSONL writer: deterministic gzip output and ``route_by`` that never fails on a missing key.

    With ``route_key`` the filename template holds ``${<route_key>}``; documents lacking the key go under
    ``ROUTE_MISSING`` and are counted as ``route_missing`` on this step.
    """

    def __init__(self, output_folder, output_filename: str, route_key: str | None = None, **kwargs):
        super().__init__(output_folder, output_filename=output_filename, compression="gzip", **kwargs)
        self.output_mg = _GzipFileManager(self.output_folder, mode="wb", compression=None)
        self.route_key = route_key

    def write(self, document: Document, rank: int = 0, **kwargs):
        if self.route_key:
            kwargs[self.route_key] = _route(self, document)
        super().write(document, rank, **kwargs)


class CuveeParquetWriter(ParquetWriter):
    """Parquet writer whose ``route_by`` never fails on a missing key (see ``CuveeJsonlWriter``) and whose schema
    is the run's: ``metadata_fields`` are the keys the recipe's stages declare."""

    def __init__(self, output_folder, output_filename: str, route_key: str | None = None,
                 metadata_fields: dict[str, str] | None = None, **kwargs):
        fields = metadata_struct_fields(metadata_fields)
        super().__init__(output_folder, output_filename=output_filename, schema=parquet_schema(fields), **kwargs)
        self.route_key = route_key
        self.metadata_fields = fields

    def write(self, document: Document, rank: int = 0, **kwargs):
        if self.route_key:
            kwargs[self.route_key] = _route(self, document)
        super().write(document, rank, **kwargs)


def _route(step: PipelineStep, document: Document) -> str:
    folder = route_folder(document.metadata, step.route_key)
    if folder == ROUTE_MISSING:
        step.stat_update("route_missing")
    return folder


def output_writer(path: str, fmt: str, route_by: str | None = None, metadata_fields: dict[str, str] | None = None):
    """The run's final writer; ``route_by`` puts each document under <path>/<metadata value>/ (documents
    without that metadata under <path>/_missing/, counted as the writer's ``route_missing``).
    ``metadata_fields``: the keys the recipe's stages declare (typed Parquet struct fields)."""
    prefix = f"${{{route_by}}}/" if route_by else ""
    if fmt == "parquet":
        return CuveeParquetWriter(path, output_filename=prefix + "${rank}.parquet", route_key=route_by,
                                  metadata_fields=metadata_fields, adapter=_parquet_adapter, compression="zstd")
    return CuveeJsonlWriter(path, output_filename=prefix + "${rank}.jsonl.gz", route_key=route_by,
                            adapter=_jsonl_adapter)


def _exclusion_adapter(self, doc: Document) -> dict:
    row = _jsonl_adapter(self, doc)
    row["metadata"]["filter_stage"] = self.stage
    return row


def exclusion_writer(path: str):
    """Writes dropped documents of one stage for inspection (deterministic gzip). A record is the document as the
    stage dropped it: the scores it wrote, ``filter_reason`` (datatrove's key, the reason counted as
    ``dropped_<reason>``) and ``filter_stage``, the stage that dropped it as the folder names it (``NN.<stage>``)."""
    writer = CuveeJsonlWriter(path, output_filename="${rank}.jsonl.gz", adapter=_exclusion_adapter)
    writer.stage = Path(path).name
    return writer


class _RankFiles(PipelineStep):
    """The one file per rank between segments, ``<folder>/<rank>.jsonl``, read and written in batches."""

    def __init__(self, folder: Path, batch_size: int = 1024):
        super().__init__()
        self.folder = Path(folder)
        self.batch_size = batch_size

    def rank_file(self, rank: int) -> Path:
        return self.folder / f"{rank:05d}.jsonl"


class IntermediateWriter(_RankFiles):
    """Between segments: ``<folder>/<rank>.jsonl``, one file per rank, so the next segment's rank r reads
    exactly what rank r wrote. Uncompressed orjson lines written per batch and renamed into place when
    complete: these files live for one run, and gzip plus per-document bookkeeping cost as much as a
    MinHash signature."""

    name = "💾 intermediate writer"
    type = "💽 - WRITER"

    def run(self, data, rank: int = 0, world_size: int = 1):
        import orjson
        from datatrove.utils.batching import batched

        self.folder.mkdir(parents=True, exist_ok=True)
        with replacing(self.rank_file(rank)) as tmp, open(tmp, "wb") as f:
            for batch in batched(data or (), self.batch_size):
                with self.track_time():
                    f.write(b"".join(orjson.dumps({"text": d.text, "id": str(d.id), "metadata": clean_metadata(d.metadata)})
                                     + b"\n" for d in batch))
                self.stat_update("total", value=len(batch))
        return
        yield


class RankFileReader(_RankFiles):
    """Reads back exactly ``<folder>/<rank>.jsonl`` (datatrove's readers shard by sorted file list, which
    shifts files between ranks when a rank wrote nothing, and skip empty texts)."""

    name = "🔁 intermediate reader"
    type = "📖 - READER"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        import orjson
        from datatrove.utils.batching import batched

        if data:
            yield from data
        path = self.rank_file(rank)
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
