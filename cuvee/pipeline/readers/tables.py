"""Table readers: JSONL and Parquet files of documents, every line or row kept as a document or counted."""

from __future__ import annotations

import base64
import dataclasses

from datatrove.data import Document, DocumentsPipeline, Media
from datatrove.pipeline.readers import JsonlReader, ParquetReader
from datatrove.pipeline.readers.base import BaseReader
from datatrove.utils.logging import logger

from cuvee.pipeline.doc_stats import add_length_stats
from cuvee.pipeline.fastgzip import open_decompressed
from cuvee.pipeline.readers.shard import ShardLoop


class _PlannedReaderMixin(ShardLoop):
    """datatrove's JSONL/Parquet readers with the per-file counters of :class:`~cuvee.pipeline.readers.shard.ShardLoop`.

    Also stops *before* pulling a document past ``limit`` (datatrove's pulls one more), and counts a file that
    cannot be opened or read as ``files_failed`` (logged) instead of ending the task. A record that is read
    but gives no document is counted as read and dropped: a JSONL line that is not JSON (``dropped_invalid_json``),
    a record without text (``dropped_no_text``), one whose text is not a string (``dropped_text_not_string``: a
    list, mapping, number or bytes would reach the writers as non-string text) or whose ``media`` is not a list
    of datatrove media entries (``dropped_malformed_media``), or whose id is neither a string nor an integer
    (``dropped_malformed_id``: the writers would print a list as its Python repr); the rest of the file is read.
    datatrove skips the first two with a log line only and fails the whole file on the others.
    """

    media_bytes_base64 = False  # JSONL carries media bytes as base64 text, Parquet as bytes

    def _drop(self, reason: str) -> None:  # as CommonCrawlReader._drop: a record read, and why it is not a document
        self.stat_update("total", "dropped", f"dropped_{reason}")

    def update_doc_stats(self, document: Document) -> None:
        """datatrove's per-document ``doc_len``, merged once per 1,024 documents (:mod:`cuvee.pipeline.doc_stats`);
        the rest is merged when the shard ends or its reading is stopped."""
        if document.metadata.get("token_count"):
            return super().update_doc_stats(document)
        buf = self.__dict__.setdefault("_doc_lengths", [])
        buf.append(len(document.text))
        if len(buf) >= 1024:
            self._flush_doc_stats()

    def _flush_doc_stats(self) -> None:
        buf = self.__dict__.get("_doc_lengths")
        if buf:
            add_length_stats(self, buf)
            self._doc_lengths = []

    def read_files_shard(self, shard: list[str]) -> DocumentsPipeline:
        try:
            yield from super().read_files_shard(shard)
        finally:  # datatrove's run updates a document's stats before yielding it: all are buffered by now
            self._flush_doc_stats()

    def _count_file_documents(self, ndocs: int) -> None:
        self.stat_update("documents", value=ndocs, unit="input_file")  # datatrove's record counter
        self.stat_update("total", value=ndocs)  # dropped records were counted in total as they were read

    def _row(self, id_in_file: int | str) -> int:
        """The record's row in its file (JSONL: its line, blank lines counted, from 0)."""
        return id_in_file

    def get_document_from_dict(self, data: dict, source_file: str, id_in_file: int | str):
        """datatrove's document with ``input_file`` and ``input_row`` (and, asked for, ``file_path``) in its metadata,
        the path resolved once per file instead of once per document (resolving cost ~12 us a document, a third of
        reading a JSONL line). ``input_*`` say where this run read the document; ``source_*`` keys an earlier run
        wrote (the archive record a page came from) are the record's own and pass through unchanged."""
        text = data.get(self.text_key)
        if text is not None and not isinstance(text, str):
            return self._reject("text_not_string", source_file, id_in_file,
                                f"its {self.text_key!r} is a {type(text).__name__}, not a string")
        doc_id = data.get(self.id_key)
        if doc_id is not None and not (isinstance(doc_id, str) or _is_int(doc_id)):  # null: datatrove's null id
            return self._reject("malformed_id", source_file, id_in_file,
                                f"its {self.id_key!r} is a {type(doc_id).__name__}, not a string or an integer")
        if "media" in data:
            media = media_entries(data["media"], self.media_bytes_base64)
            if media is None:
                return self._reject("malformed_media", source_file, id_in_file,
                                    "its 'media' is not a list of {id, type, url, ...} entries")
            data["media"] = media
        document = self._plain_document(data, source_file, id_in_file)
        if document is None:
            document = BaseReader.get_document_from_dict(self, data, source_file, id_in_file)
        if not document:
            self._drop("no_text")
            return document
        if not isinstance(document.text, str):  # a custom adapter's text
            return self._reject("text_not_string", source_file, id_in_file,
                                f"its text is a {type(document.text).__name__}, not a string")
        cached = getattr(self, "_resolved_file", None)
        if cached is None or cached[0] != source_file:
            cached = self._resolved_file = (source_file, self.data_folder.resolve_paths(source_file))
        meta = document.metadata
        meta["input_file"], meta["input_row"] = cached[1], self._row(id_in_file)
        if self.add_file_path:
            meta.setdefault("file_path", cached[1])
        return document

    def _reject(self, reason: str, source_file: str, id_in_file: int | str, why: str) -> None:
        """Count a record read that cannot be a document; the first few of each reason are logged."""
        self._drop(reason)
        if self.stats.stats[f"dropped_{reason}"].total <= 5:
            logger.warning(f"{source_file}: record {id_in_file} dropped as {reason}: {why}")

    def _plain_document(self, data: dict, source_file: str, id_in_file: int | str) -> Document | None:
        """The common record (datatrove's default adapter, text present, ``metadata`` absent or a mapping, no
        media) made into the Document datatrove's ``get_document_from_dict`` makes, without its adapter dict and
        keyword call (about 3 us a document). None, with ``data`` untouched, for every other record."""
        if self.adapter.__func__ is not BaseReader._default_adapter:
            return None
        meta = data.get("metadata", _NO_METADATA)
        if not data.get(self.text_key) or data.get("media") or not (meta is _NO_METADATA or type(meta) is dict):
            return None
        text = data.pop(self.text_key)
        doc_id = data.pop(self.id_key) if self.id_key in data else f"{source_file}/{id_in_file}"
        media = data.pop("media", None) or []  # null media: [] (datatrove's JSONL reader fails on it)
        metadata = data.pop("metadata", None) or {}
        metadata = metadata | data
        if self.default_metadata:
            metadata = self.default_metadata | metadata
        return Document(text=text, id=doc_id, media=media, metadata=metadata)


_NO_METADATA = object()
_MEDIA_FIELDS = frozenset(f.name for f in dataclasses.fields(Media))
_MEDIA_REQUIRED = frozenset(("id", "type", "url"))


def media_entries(value, bytes_as_base64: bool) -> list[dict] | None:
    """A record's ``media`` as keyword dicts for datatrove's ``Media`` (bytes decoded), or None when it is not that
    shape: a list of mappings with ``id``, ``type`` (int) and ``url``, only Media's fields, each of its type.
    An empty or null ``media`` is no media."""
    if not value:
        return []
    if not isinstance(value, list):
        return None
    out = []
    for m in value:
        if not isinstance(m, dict) or not _MEDIA_REQUIRED <= m.keys() <= _MEDIA_FIELDS:
            return None
        if not (isinstance(m["id"], str) and _is_int(m["type"]) and isinstance(m["url"], str)):
            return None
        if any(m.get(k) is not None and not isinstance(m[k], str) for k in ("alt", "path")):
            return None
        if any(m.get(k) is not None and not _is_int(m[k]) for k in ("offset", "length")):
            return None
        if m.get("metadata") is not None and not isinstance(m["metadata"], dict):
            return None
        raw = m.get("media_bytes")
        if raw is None or isinstance(raw, bytes):  # bytes: Parquet's, or already decoded by datatrove's JSONL reader
            pass
        elif bytes_as_base64 and isinstance(raw, str):
            try:
                m = m | {"media_bytes": base64.decodebytes(raw.encode("ascii"))}
            except ValueError:  # not ASCII, or not base64
                return None
        else:
            return None
        out.append(m)
    return out


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class PlannedJsonlReader(_PlannedReaderMixin, JsonlReader):
    """``JsonlReader`` counting ``files_read`` / ``files_failed`` / ``files_limited``; lists like :func:`~cuvee.pipeline.readers.listing.plan_input_files`.

    Reads bytes, splits lines itself and hands each line to ``orjson`` as bytes, so that every line is a record
    that is either a document or counted: a line that is not a JSON object, or not UTF-8, is counted as
    ``dropped_invalid_json`` (the first few logged) and reading goes on. datatrove's reader skips such lines
    with a log line only, and stops reading a file at its first byte that is not UTF-8, so the records after it
    were lost uncounted. Lines split on ``\\n`` only (JSON forbids a raw ``\\r`` inside a string, so a bare
    ``\\r`` separates nothing); whitespace-only lines are not records. gzip is decoded by ISA-L
    (:mod:`cuvee.pipeline.fastgzip`, about 3x zlib's speed). Documents, ids included, are
    datatrove's own (tested on real files). Not slower: a whole read -> write run cost 78.2 against 79.1 us a
    document with datatrove's line reading swapped in (1.01x, ranges overlap), and 123.0 us with datatrove's own
    ``JsonlReader -> JsonlWriter`` (``benchmarks/bench_jsonl_reader.py``, 2026-11-26).
    """

    block_bytes = 1 << 20
    media_bytes_base64 = True

    def read_file(self, filepath: str):
        import orjson

        li = 0
        parts: list[bytes] = []
        with open_decompressed(self.data_folder, filepath, self.compression) as f:
            while True:
                chunk = f.read(self.block_bytes)
                if not chunk:
                    break
                end = chunk.rfind(b"\n")
                if end < 0:  # a line longer than a block: keep collecting
                    parts.append(chunk)
                    continue
                parts.append(chunk[:end])
                lines = b"".join(parts).split(b"\n")
                parts = [chunk[end + 1 :]]
                docs, li = self._parse_lines(lines, filepath, li, orjson)
                yield from docs
        tail = b"".join(parts)
        if tail.strip():
            docs, li = self._parse_lines([tail], filepath, li, orjson)
            yield from docs

    def _parse_lines(self, lines: list[bytes], filepath: str, first: int, orjson) -> tuple[list, int]:
        """Documents of ``lines``, the first being line ``first`` of the file; returns them and the next line number.
        Blank lines are not records but still lines, so default ids stay datatrove's ``path/line``."""
        docs = []
        with self.track_time():
            for li, line in enumerate(lines, start=first):
                if not line.strip():
                    continue
                try:
                    data = orjson.loads(line)
                    if not isinstance(data, dict):
                        raise orjson.JSONDecodeError("a JSONL record must be an object", "", 0)
                except orjson.JSONDecodeError as e:
                    self._drop("invalid_json")
                    if self.stats.stats["dropped_invalid_json"].total <= 5:
                        logger.warning(f"{filepath}: line {li + 1} is not a JSON object ({e}); counted as invalid_json")
                    continue
                document = self.get_document_from_dict(data, filepath, li)
                if document:
                    docs.append(document)
        return docs, first + len(lines)


class PlannedParquetReader(_PlannedReaderMixin, ParquetReader):
    """``ParquetReader`` counting ``files_read`` / ``files_failed`` / ``files_limited``; lists like :func:`~cuvee.pipeline.readers.listing.plan_input_files`.

    cuvee's typed ``metadata`` struct is read back to the document's mapping (null fields dropped,
    ``other_json`` merged), as are older JSON-string metadata columns. ``input_row`` is the row's index in the file;
    datatrove's own counter, which default ids (``path/N``) keep using, skips rows that gave no document.
    """

    _current_row = 0

    def _row(self, id_in_file: int | str) -> int:
        return self._current_row

    def read_file(self, filepath: str):
        import pyarrow.parquet as pq

        with self.data_folder.open(filepath, "rb") as f, pq.ParquetFile(f) as pqf:
            li = row = 0
            columns = [self.text_key, self.id_key] if not self.read_metadata else None
            for batch in pqf.iter_batches(batch_size=self.batch_size, columns=columns):
                documents = []
                with self.track_time("batch"):
                    for line in batch.to_pylist():
                        self._current_row = row
                        row += 1
                        document = self.get_document_from_dict(line, filepath, li)
                        if not document:
                            continue
                        documents.append(document)
                        li += 1
                yield from documents

    def _default_adapter(self, data: dict, path: str, id_in_file: int | str):
        from cuvee.pipeline.writers import metadata_from_row

        data = dict(data)
        meta = data.get("metadata")
        if isinstance(meta, (dict, str)):
            try:
                data["metadata"] = metadata_from_row(meta)
            except ValueError:  # a plain string that is not JSON: datatrove's own handling
                pass
        out = super()._default_adapter(data, path, id_in_file)
        out["metadata"] = {k: v for k, v in out["metadata"].items() if v is not None}
        return out

