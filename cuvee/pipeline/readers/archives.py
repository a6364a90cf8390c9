"""Robust Common Crawl readers: WARC, WET and legacy ARC, gzip'd or plain, with full record accounting.

Why not datatrove's ``WarcReader``: it silently skips every record it cannot use (request/metadata
records, undecodable pages, broken files) and loses Common Crawl's own per-record metadata. cuvee's
contract is that every record read is either a document or a named, counted drop, so this reader
counts each record under ``total`` and every non-document under ``dropped_<reason>``:

``dropped_non_response_record``  warcinfo / request / metadata / revisit / ... records
``dropped_malformed_record``     unparseable WARC/ARC/HTTP headers, or an unreadable region between records
                                 (garbage, non-gzip bytes): counted once, reading resumes at the next record
``dropped_length_mismatch``      a Content-Length / ARC length that does not match the record's bytes (the
                                 record is never kept cut; the records it overlaps are read normally)
``dropped_corrupt_gzip``         a gzip member that does not decompress (its record; resumes at the next member)
``dropped_truncated_file``       a file that ends inside a record (one per file, logged; the file fails)
``dropped_record_too_large``     records over ``max_record_bytes`` (never read into memory)

Damage inside one gzip member is counted once. Files are counted by :mod:`cuvee.pipeline.readers.shard`.

How bytes travel (the contract with ``response_check`` and ``extract``): an HTTP response becomes a
Document with ``text=""`` and its *raw, still undecoded* payload in ``doc.media[0].media_bytes``
(a datatrove ``Media`` with id ``RAW_PAYLOAD_ID``). ``response_check`` decodes it (charset detection)
into ``doc.text`` and removes the media entry. Because datatrove writers drop ``media_bytes`` unless
``save_media_bytes=True``, no raw bytes reach JSONL/Parquet files even if a recipe omits the check.
WET ``conversion`` records are already plain text: they arrive with ``doc.text`` set and
``metadata["warc_type"] == "conversion"``; later stages pass them through.

Metadata kept: ``url``, ``date`` (ISO-8601), ``warc_record_id``, ``warc_type``, ``http_status`` (int,
absent for non-HTTP records), ``content_type`` (HTTP Content-Type header or the record's type),
``payload_type`` (CC's ``WARC-Identified-Payload-Type``), ``cc_languages`` (comma-separated ISO-639-1
codes from CC's CLD2 ``metadata`` record or a WET ``WARC-Identified-Content-Language`` header, most
likely first), ``cc_charset`` (CC's detected charset), ``cc_snapshot`` (e.g. ``CC-MAIN-2020-34``, from
the warcinfo record or the file path).

Identity at the source, on every document, so one record can be re-read from its archive alone:
``source_file`` (the archive as the run's plan lists it: a local path or a remote URL), ``source_offset`` and
``source_length`` (the byte range to read: for a gzip file, the record's gzip member(s), compressed, which is the
record itself in Common Crawl's one-member-per-record files; for a plain file, the record's header and block),
``source_skip`` (only in a gzip file that is not one member per record: decompressed bytes to pass over after
``source_offset`` before the record starts; ``source_length`` then runs to the end of the file when the member's
end is not yet known, as for a file gzip'd whole, which cannot be entered anywhere but at its start; every
document has the same keys, so any writer takes them), and ``payload_digest``
(``WARC-Payload-Digest`` as the record states it; for a record without one, a WET conversion or any ARC record,
``sha1:<base32>`` of the payload as stored, computed here, the same form). Decoding, extraction and every later
stage leave these keys alone.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Iterator

from datatrove.data import Document, DocumentsPipeline, Media, MediaType
from datatrove.io import DataFolderLike
from datatrove.pipeline.readers.base import BaseDiskReader
from datatrove.utils.logging import logger

from cuvee.pipeline.readers.framing import framed_records
from cuvee.pipeline.readers.listing import list_input_files, split_input_path
from cuvee.pipeline.readers.payload import (
    MalformedRecord,
    arc_date,
    lang_code,
    parse_cc_metadata_block,
    parse_http_response,
    payload_digest,
)
from cuvee.pipeline.readers.shard import FileFailed, ShardLoop
from cuvee.pipeline.readers.stream import ByteStream
from cuvee.pipeline.remote import remote_folder

RAW_PAYLOAD_ID = "raw_http_payload"
FORMATS = ("auto", "warc", "arc", "wet")
_SNAPSHOT_RE = re.compile(r"CC-MAIN-\d{4}-\d{2}")
_DOCUMENT_TYPES = ("response", "resource", "conversion")


def detect_format(head: bytes, path: str) -> str:
    """'warc' or 'arc' from the first (decompressed) bytes, falling back to the file extension."""
    head = head.lstrip(b"\r\n")
    if head.startswith(b"WARC/"):
        return "warc"
    if head.startswith(b"filedesc://") or re.match(rb"^\S+://\S* \S+ \d{8,} ", head):
        return "arc"
    name = path.lower()
    if ".arc" in name:
        return "arc"
    return "warc"



def _size(raw) -> int | None:
    """The file's size in bytes (None when the stream cannot tell), read before any record."""
    try:
        size = raw.seek(0, os.SEEK_END)
        raw.seek(0)
    except (OSError, ValueError, NotImplementedError):
        return None
    return size if isinstance(size, int) else None


class CommonCrawlReader(ShardLoop, BaseDiskReader):
    """Reads WARC / WET / ARC files (format auto-detected per file) into Documents, counting every record.

    Sharding across ranks, fsspec paths, ``limit`` and ``skip`` behave like datatrove's readers; ``skip``ped
    documents are counted as ``dropped_skipped``. With no ``glob_pattern`` only archive files
    (``.warc``, ``.arc``, ``.wet``, optionally compressed) are read from the folder (see
    :func:`~cuvee.pipeline.readers.listing.plan_input_files`).
    """

    name = "🕷 CommonCrawl (WARC/WET/ARC)"

    def __init__(
        self,
        data_folder: DataFolderLike,
        glob_pattern: str | None = None,
        fmt: str = "auto",
        limit: int = -1,
        skip: int = 0,
        max_record_bytes: int = 10_000_000,
        recursive: bool = True,
        default_metadata: dict | None = None,
        retries: int = 5,
        backoff_s: float = 1.0,
        timeout_s: float | None = None,
    ):
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        if isinstance(data_folder, str):  # a remote folder's connects and reads give up after timeout_s
            data_folder = remote_folder(data_folder, timeout_s)
        super().__init__(
            data_folder, limit=limit, skip=skip, recursive=recursive, glob_pattern=glob_pattern,
            default_metadata=default_metadata, add_file_path=False,
        )
        self.fmt = fmt
        self.max_record_bytes = max_record_bytes
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s

    # --- file listing / sharding (one helper shared with the run's plan check, so they never disagree)
    def _shard(self, rank: int, world_size: int) -> list[str]:
        files = list_input_files(self.data_folder, self.glob_pattern, self.recursive, archives_only=True)
        if not files:
            raise RuntimeError(f"no WARC/WET/ARC files found in {self.data_folder.path} (glob {self.glob_pattern!r})")
        return files[rank::world_size]

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        shard = self._shard(rank, world_size)
        if not shard:
            logger.warning(f"No files for rank {rank} in {self.data_folder.path}")
        self._log_limit_scope(rank, world_size)
        for doc in self.read_files_shard(shard):
            self.update_doc_stats(doc)
            yield doc

    # --- the shard loop's counters: every record is counted as it is read (``total`` / ``dropped_*``)
    def _count_skipped(self) -> None:
        self.stat_update("dropped", "dropped_skipped")

    def _count_forwarded(self, document: Document) -> None:
        self.stat_update("forwarded")

    # --- per-file reading
    def _open(self, filepath: str):
        """The raw file; remote files through :class:`~cuvee.pipeline.remote.RetryingFile` (reopen at the
        byte reached after a cut connection or a 5xx, counted as ``read_retries``)."""
        from fsspec.implementations.local import LocalFileSystem

        if isinstance(self.data_folder.fs, LocalFileSystem):
            return self.data_folder.open(filepath, "rb", compression=None)
        return self._retrying(lambda: self.data_folder.open(filepath, "rb", compression=None), filepath)

    def _retrying(self, opener, name: str):
        from cuvee.pipeline.remote import RetryingFile, RetryPolicy

        return RetryingFile(opener, RetryPolicy(self.retries, self.backoff_s), self._count_retry, name=name)

    def _count_retry(self, exc: BaseException) -> None:
        self.stat_update("read_retries")
        logger.warning(f"remote read failed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); retrying")

    def read_file(self, filepath: str) -> Iterator[Document]:
        with self._open(filepath) as raw:
            head = raw.read(2)
            raw.seek(0)
            gz = head == b"\x1f\x8b"
            fmt = self.fmt
            if fmt == "auto":
                if gz:
                    try:
                        peek = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw.read(1 << 16), 64)
                    except zlib.error:
                        peek = b""
                    raw.seek(0)
                else:
                    peek = raw.read(64)
                    raw.seek(0)
                fmt = detect_format(peek, filepath)
            snapshot = _SNAPSHOT_RE.search(filepath)
            ctx = {"cc_snapshot": snapshot.group(0) if snapshot else None, "file": filepath,
                   "source": self._source_path(filepath), "size": _size(raw)}
            stream = ByteStream(raw, gz)
            if fmt == "arc":
                yield from self._read_arc(stream, ctx)
            else:
                yield from self._read_warc(stream, ctx)

    def _source_path(self, filepath: str) -> str:
        """The file as the run's plan lists it (:func:`~cuvee.pipeline.readers.listing.plan_input_files`): a local
        absolute path or the remote URL."""
        return self.data_folder.resolve_paths(filepath)

    def _drop(self, reason: str) -> None:
        self.stat_update("total", "dropped", f"dropped_{reason}")

    def _records(self, stream: ByteStream, ctx: dict, kind: str):
        return framed_records(stream, kind, ctx["file"], self.max_record_bytes, self._drop)

    def _doc(self, rec_id: str, text: str, payload: bytes | None, meta: dict, ctx: dict, loc: tuple) -> Document:
        if ctx.get("cc_snapshot"):
            meta["cc_snapshot"] = ctx["cc_snapshot"]
        offset, length, skip = loc
        if length is None and ctx["size"] is not None:  # the member's end is not known yet: read to the file's end
            length = ctx["size"] - offset
        meta["source_file"], meta["source_offset"], meta["source_length"] = ctx["source"], offset, length
        if skip:
            meta["source_skip"] = skip
        media = [Media(id=RAW_PAYLOAD_ID, type=MediaType.DOCUMENT, url=meta.get("url") or "", media_bytes=payload,
                       metadata={"format": "http_payload"})] if payload is not None else []
        doc = Document(text=text, id=rec_id, media=media, metadata={k: v for k, v in meta.items() if v is not None})
        if self.default_metadata:
            doc.metadata = self.default_metadata | doc.metadata
        return doc

    # --- WARC / WET
    def _read_warc(self, stream: ByteStream, ctx: dict) -> Iterator[Document]:
        pending: Document | None = None  # a response waiting for its CC 'metadata' record (CLD2 languages)
        failed: FileFailed | None = None
        try:
            for headers, block, loc in self._records(stream, ctx, "warc"):
                rtype = (headers.get("warc-type") or "unknown").lower()
                if rtype == "metadata" and pending is not None and headers.get("warc-concurrent-to") == pending.metadata.get("warc_record_id"):
                    try:
                        pending.metadata.update(parse_cc_metadata_block(block))
                    except Exception:  # noqa: BLE001 - CC's metadata is optional: the document stands
                        pass
                    self._drop("non_response_record")
                    continue
                if pending is not None:
                    doc, pending = pending, None
                    self.stat_update("total")
                    yield doc
                if rtype == "warcinfo":
                    m = _SNAPSHOT_RE.search(block[:4096].decode("utf-8", "replace"))
                    if m:
                        ctx["cc_snapshot"] = m.group(0)
                if rtype not in _DOCUMENT_TYPES:
                    self._drop("non_response_record")
                    continue
                try:
                    doc = self._warc_document(rtype, headers, block, ctx, loc)
                except MalformedRecord as e:
                    logger.warning(f"{ctx['file']}: malformed record {headers.get('warc-record-id')}: {e}")
                    self._drop("malformed_record")
                    continue
                if rtype == "response":
                    pending = doc
                else:
                    self.stat_update("total")
                    yield doc
        except FileFailed as e:  # the response read before the cut is whole: it is still a document
            failed = e
        if pending is not None:
            self.stat_update("total")
            yield pending
        if failed is not None:
            raise failed

    def _warc_document(self, rtype: str, headers, block: bytes, ctx: dict, loc: tuple) -> Document:
        rec_id = headers.get("warc-record-id") or ""
        meta = {
            "url": (headers.get("warc-target-uri") or "").strip("<>"),
            "date": headers.get("warc-date"),
            "warc_record_id": rec_id,
            "warc_type": rtype,
            "payload_type": headers.get("warc-identified-payload-type"),
        }
        if not rec_id:
            raise MalformedRecord("no WARC-Record-ID")
        if rtype == "conversion":  # WET: already plain text
            meta["content_type"] = headers.get("content-type") or "text/plain"
            langs = headers.get("warc-identified-content-language")
            if langs:
                meta["cc_languages"] = ",".join(lang_code(x) for x in langs.split(","))
            meta["payload_digest"] = headers.get("warc-payload-digest") or payload_digest(block)
            return self._doc(rec_id, block.decode("utf-8", "replace"), None, meta, ctx, loc)
        ctype = headers.get("content-type") or ""
        if rtype == "response" and (block.startswith(b"HTTP/") or "application/http" in ctype):
            status, http_headers, body, stored = parse_http_response(block)
            meta["http_status"] = status
            meta["content_type"] = http_headers.get("content-type", "")
        else:  # resource records / non-HTTP responses: the block is the payload
            meta["content_type"] = ctype
            body = stored = block
        meta["payload_digest"] = headers.get("warc-payload-digest") or payload_digest(stored)
        return self._doc(rec_id, "", body, meta, ctx, loc)

    # --- ARC v1 / v2
    def _read_arc(self, stream: ByteStream, ctx: dict) -> Iterator[Document]:
        n = 0
        for (url, _ip, date, arc_ctype, _length), block, loc in self._records(stream, ctx, "arc"):
            n += 1
            if url.startswith("filedesc://") or not block.startswith(b"HTTP/"):
                self._drop("non_response_record")  # the file header, dns: entries, bare payloads without HTTP
                continue
            try:
                status, http_headers, body, stored = parse_http_response(block)
            except MalformedRecord as e:
                logger.warning(f"{ctx['file']}: malformed ARC record {url}: {e}")
                self._drop("malformed_record")
                continue
            rec_id = f"arc:{os.path.basename(ctx['file'])}:{n}:{_record_digest(url, date, block)}"
            meta = {
                "url": url, "date": arc_date(date), "warc_record_id": rec_id, "warc_type": "response",
                "http_status": status, "content_type": http_headers.get("content-type", arc_ctype),
                "payload_digest": payload_digest(stored),  # ARC records carry no digest
            }
            self.stat_update("total")
            yield self._doc(rec_id, "", body, meta, ctx, loc)


def _record_digest(url: str, date: str, block: bytes) -> str:
    """What makes an ARC record's id unique, as a WARC-Record-ID is: ARC has no record id, and a file's name and
    record number repeat across folders (``2008/x.arc.gz``, ``2009/x.arc.gz``) and input paths. Only a byte-identical
    copy of a record gets the same id, as a copied WARC record keeps its WARC-Record-ID."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{url} {date}\n".encode())
    h.update(block)
    return h.hexdigest()


def make_reader(data_folder: str, glob_pattern: str | None = None, fmt: str = "auto", **options) -> CommonCrawlReader:
    """A datatrove reader step for one input entry: a folder (+ optional glob), a single file, a glob, or an fsspec URL.

    ``data_folder`` may itself be a file or contain glob characters when ``glob_pattern`` is None: it is then
    split with :func:`split_input_path` (``runs/cc/*.warc.gz`` -> folder ``runs/cc``, glob ``*.warc.gz``).
    ``fmt`` is one of auto, warc, arc, wet (wet is read as WARC; its ``conversion`` records are text).
    ``options`` are :class:`CommonCrawlReader`'s (``limit``, ``skip``, ``max_record_bytes``, ``retries``, ``backoff_s``,
    ``timeout_s``: each connect and read of a remote file gives up after it, :func:`cuvee.pipeline.remote.timeout_options`).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if glob_pattern is None:
        data_folder, glob_pattern = split_input_path(str(data_folder))
    return CommonCrawlReader(data_folder, glob_pattern=glob_pattern, fmt=fmt, **options)
