"""The per-document index of a mix: for every document of every shard, in shard order, the blend source (or
selection) it came from, the epoch it was drawn in, and the key of its record in the mix's input (file, row,
document id). Any token of a shard then leads to the pipeline output row it was cut from, and that row's own
provenance metadata (``source_file``, offsets, stage decisions, dedup clusters) to its page.

Why fixed-width records: the trainer reads every document's source at each start and a tracer reads one position;
memory-mapped arrays cost nothing to open, and a document drawn in several epochs stores its identity once.

Layout (little endian, raw records, no header, every file written through the kernel's atomic write and listed
with its sha256 in ``manifest.json``; each field is the narrowest of u2/u4/u8 that holds its largest possible
value in this mix, known before the blend, and the record dtypes are named in the manifest as ``doc_dtype`` and
``entry_dtype``: read them with ``np.memmap(path, dtype=np.dtype([tuple(f) for f in block["doc_dtype"]]))``)::

    <name>_NNNNN.docs   one record per document of shard NNNNN, in shard order:
                          source     index into manifest["sources"] (a selection is a source of its own)
                          epoch      the pass over its source it was drawn in, from 0 (rehydrated sources: the
                                     pass of its weight class, cuvee/mixer/rehydrate.py)
                          entry      its row in the mix's document table
    <name>.documents    one record per distinct source document, in order of first draw:
                          file       index into manifest["document_index"]["files"] (the mix's input files)
                          row        its position among that file's records (Parquet: the row; JSONL: the
                                     non-blank line), as cuvee.pipeline.io.iter_documents reads them
                          id_end     end of its id in <name>.ids (entry k's id: ids[id_end[k-1]:id_end[k]])
    <name>.ids          the ids, UTF-8, concatenated; an empty id means the record had none of its own and
                        iter_documents names it "<file>/<row>"

The per-source token caches carry the same table at full width (:data:`ENTRY`: ``.cache/<source>.documents`` /
``.ids``, every selected document in cache order), so identity travels with the tokens from selection to shard.

Readers: :class:`MixIndex` (a mix folder), :class:`DocumentTable` (one table), :func:`read_records`.
"""

from __future__ import annotations

import hashlib
from array import array
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel.atomic import replacing, write_bytes
from cuvee.kernel.errors import UserError

FORMAT = "cuvee-docindex/1"
DOC = np.dtype([("source", "<u2"), ("epoch", "<u4"), ("entry", "<u8")])  # full width; a mix narrows its fields
ENTRY = np.dtype([("file", "<u4"), ("row", "<u8"), ("id_end", "<u8")])
DOCS_SUFFIX = ".docs"
TABLE_SUFFIX = ".documents"
IDS_SUFFIX = ".ids"
KEY = "document_index"  # the manifest's block
_FLUSH = 1 << 16  # entries buffered before a write


class DocumentIndexError(UserError, ValueError):
    """A mix's per-document index is missing, incomplete or not the shards'; the message says how to rebuild."""


def _dtype_doc(dtype: np.dtype) -> list[list[str]]:
    return [[name, dtype.fields[name][0].str] for name in dtype.names]


def read_records(path: str | Path, dtype: np.dtype) -> np.ndarray:
    """The records of a raw file, memory-mapped (an empty file gives an empty array)."""
    path = Path(path)
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise DocumentIndexError(f"{path}: {size:,} bytes is not a whole number of {dtype.itemsize}-byte records; "
                                 f"the file is cut or not an index")
    if size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


@dataclass(frozen=True)
class DocumentKey:
    """Where a document's record is: the mix input ``file``, its ``row`` there, and its ``id``."""

    file: str
    row: int
    id: str


class DocumentTable:
    """A table of document keys (``<prefix>.documents`` + ``<prefix>.ids``), memory-mapped."""

    def __init__(self, prefix: str | Path, files: list[str], dtype: np.dtype = ENTRY):
        self.prefix, self.files = Path(prefix), list(files)
        self.entries = read_records(f"{prefix}{TABLE_SUFFIX}", dtype)
        self.ids = read_records(f"{prefix}{IDS_SUFFIX}", np.dtype(np.uint8))

    def __len__(self) -> int:
        return len(self.entries)

    def id_bytes(self, k: int) -> bytes:
        start = int(self.entries[k - 1]["id_end"]) if k else 0
        return bytes(self.ids[start:int(self.entries[k]["id_end"])])

    def key(self, k: int) -> DocumentKey:
        e = self.entries[k]
        file, row = self.files[int(e["file"])], int(e["row"])
        raw = self.id_bytes(k)
        return DocumentKey(file, row, raw.decode("utf-8", "surrogatepass") if raw else f"{file}/{row}")


class TableWriter:
    """Appends document keys to a :class:`DocumentTable` of ``dtype``; a context manager whose files appear under
    their names only when the block ends without an error (the kernel's ``replacing``)."""

    def __init__(self, prefix: str | Path, dtype: np.dtype = ENTRY):
        self.prefix, self.dtype = Path(prefix), dtype
        self.count = 0
        self.id_bytes = 0  # ids written so far
        self._file, self._row, self._ends, self._ids = array("Q"), array("Q"), array("Q"), bytearray()
        self._sha = {TABLE_SUFFIX: hashlib.sha256(), IDS_SUFFIX: hashlib.sha256()}
        self._held = ExitStack()
        self._out: dict[str, object] = {}

    def __enter__(self) -> TableWriter:
        for suffix in (TABLE_SUFFIX, IDS_SUFFIX):
            tmp = self._held.enter_context(replacing(f"{self.prefix}{suffix}"))
            self._out[suffix] = self._held.enter_context(open(tmp, "wb"))
        return self

    def add_many(self, files, rows, ids: list[bytes]) -> None:
        """Append keys (an empty id: the record has none of its own), entry numbers ``count, count + 1, ...``."""
        for doc_id in ids:
            self.id_bytes += len(doc_id)
            self._ends.append(self.id_bytes)
        self._file.extend(files)
        self._row.extend(rows)
        self._ids += b"".join(ids)
        self.count += len(ids)
        if len(self._file) >= _FLUSH:
            self._flush()

    def add_gathered(self, files: np.ndarray, rows: np.ndarray, ends: np.ndarray, blob: bytes) -> None:
        """Append keys whose ids are given as one ``blob`` and their ends in it (a vectorised :meth:`add_many`)."""
        self._flush()
        rec = np.empty(len(files), dtype=self.dtype)
        rec["file"], rec["row"], rec["id_end"] = files, rows, ends + self.id_bytes
        self._write(rec.tobytes(), blob)
        self.id_bytes += len(blob)
        self.count += len(files)

    def _flush(self) -> None:
        if not self._file:
            return
        rec = np.empty(len(self._file), dtype=self.dtype)
        rec["file"], rec["row"], rec["id_end"] = self._file, self._row, self._ends
        self._write(rec.tobytes(), bytes(self._ids))
        self._file, self._row, self._ends, self._ids = array("Q"), array("Q"), array("Q"), bytearray()

    def _write(self, table: bytes, ids: bytes) -> None:
        for suffix, data in ((TABLE_SUFFIX, table), (IDS_SUFFIX, ids)):
            self._out[suffix].write(data)
            self._sha[suffix].update(data)

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            self._flush()
        return self._held.__exit__(*exc)

    def sha256(self, suffix: str) -> str:
        return self._sha[suffix].hexdigest()


def own_id(doc_id: str, file: str, row: int) -> bytes:
    """What the table stores for a document's id: nothing when it is the name iter_documents gives a record
    without one (``<file>/<row>``), else its UTF-8 bytes."""
    return b"" if doc_id == f"{file}/{row}" else doc_id.encode("utf-8", "surrogatepass")


def _unsigned(bound: int) -> str:
    """The narrowest of u2, u4, u8 holding every value up to ``bound``."""
    return "<u2" if bound < 1 << 16 else "<u4" if bound < 1 << 32 else "<u8"


def narrowed(full: np.dtype, bounds: dict[str, int]) -> np.dtype:
    """``full`` with each field as narrow as its largest possible value allows (a mix's bounds are known before
    it blends: documents, epochs, files, rows), so small mixes of short documents pay bytes, not words."""
    return np.dtype([(name, _unsigned(bounds[name]) if name in bounds else full.fields[name][0].str)
                     for name in full.names])


class MixIndexWriter:
    """Writes a mix's index while its shards are written: :meth:`entry` gives a drawn cache document its table
    row (the first draw of a document makes one), :meth:`write_shard` a shard's records; :meth:`finish` copies the
    drawn documents' keys from the sources' caches into the mix's table, in order of first draw."""

    def __init__(self, out: Path, name: str, source_files: list[list[str]], caches: list[DocumentTable],
                 max_epoch: int):
        self.out, self.name = out, name
        self.files: list[str] = []
        self._remap = []
        for fs in source_files:  # one file list for the mix: a file read by two selections is listed once
            for f in fs:
                if f not in self.files:
                    self.files.append(f)
            self._remap.append(np.array([self.files.index(f) for f in fs], dtype=np.int64))
        self._caches = caches
        self._first = [array("q", bytes(8 * len(c))) for c in caches]  # entry + 1 of each cached document, 0: none
        self._src, self._doc = array("H"), array("Q")  # (source, cached document) of each entry
        documents = sum(len(c) for c in caches)
        self.doc_dtype = narrowed(DOC, {"epoch": max_epoch, "entry": documents})
        rows = max((int(c.entries["row"].max()) for c in caches if len(c)), default=0)
        self.entry_dtype = narrowed(ENTRY, {"file": len(self.files), "row": rows,
                                            "id_end": sum(len(c.ids) for c in caches)})
        self.bytes = 0
        self._table: TableWriter | None = None

    def entry(self, source: int, doc: int) -> int:
        first = self._first[source]
        k = first[doc] - 1
        if k < 0:
            k = len(self._src)
            first[doc] = k + 1
            self._src.append(source)
            self._doc.append(doc)
        return k

    def write_shard(self, prefix: Path, source: array, epoch: array, entry: array) -> dict:
        rec = np.empty(len(source), dtype=self.doc_dtype)
        rec["source"], rec["epoch"], rec["entry"] = source, epoch, entry
        data = rec.tobytes()
        path = Path(f"{prefix}{DOCS_SUFFIX}")
        write_bytes(path, data)
        self.bytes += len(data)
        return {"docs": path.name, "sha256_docs": hashlib.sha256(data).hexdigest()}

    def finish(self, chunk: int = 1 << 20) -> None:
        """The mix's table: every entry's key gathered from its source's cache table (vectorised, in chunks)."""
        src = np.frombuffer(self._src, dtype=np.uint16) if self._src else np.zeros(0, np.uint16)
        doc = np.frombuffer(self._doc, dtype=np.uint64).astype(np.int64) if self._doc else np.zeros(0, np.int64)
        with TableWriter(self.out / self.name, self.entry_dtype) as table:
            for lo in range(0, len(src), chunk):
                s, d = src[lo:lo + chunk], doc[lo:lo + chunk]
                files, rows, starts, ends = (np.empty(len(s), np.int64) for _ in range(4))
                for k, cache in enumerate(self._caches):
                    sel = s == k
                    e = cache.entries[d[sel]]
                    files[sel] = self._remap[k][e["file"].astype(np.int64)]
                    rows[sel], ends[sel] = e["row"], e["id_end"]
                    prev = cache.entries["id_end"][np.maximum(d[sel] - 1, 0)].astype(np.int64)
                    starts[sel] = np.where(d[sel] > 0, prev, 0)
                lengths = ends - starts
                out_end = np.cumsum(lengths)
                blob = np.empty(int(out_end[-1]) if len(s) else 0, dtype=np.uint8)
                for k, cache in enumerate(self._caches):  # each cache's id bytes, gathered into entry order
                    sel = np.flatnonzero(s == k)
                    n = lengths[sel]
                    if not n.sum():
                        continue
                    step = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
                    blob[np.repeat(out_end[sel] - n, n) + step] = cache.ids[np.repeat(starts[sel], n) + step]
                table.add_gathered(files, rows, out_end, blob.tobytes())
        self._table = table

    def block(self) -> dict:
        """The manifest's ``document_index`` block (after :meth:`finish`)."""
        t = self._table
        return {"format": FORMAT, "doc_dtype": _dtype_doc(self.doc_dtype), "entry_dtype": _dtype_doc(self.entry_dtype),
                "documents": f"{self.name}{TABLE_SUFFIX}", "ids": f"{self.name}{IDS_SUFFIX}", "entries": t.count,
                "sha256_documents": t.sha256(TABLE_SUFFIX), "sha256_ids": t.sha256(IDS_SUFFIX),
                "files": self.files, "bytes": self.bytes + t.count * self.entry_dtype.itemsize + t.id_bytes}


# ---- reading a mix folder's index -----------------------------------------------------------------------------
def is_indexless_mix(manifest: dict) -> bool:
    """A manifest ``cuvee mix`` wrote before it wrote the per-document index."""
    return (str(manifest.get("blend", "")).startswith("greedy token deficit") and bool(manifest.get("shards"))
            and KEY not in manifest)


def refuse_indexless(folder: Path, manifest: dict) -> None:
    """One line, for a mix built before the index: nothing may guess its documents' sources."""
    if is_indexless_mix(manifest):
        raise DocumentIndexError(
            f"{folder}: mix '{manifest.get('name')}' has no per-document index (it was built before cuvee mix "
            f"recorded each document's source and identity); rebuild it: cuvee mix CONFIG --out {folder} (the same "
            f"config writes the same shards, now with the index; --fresh if the folder's plan differs)")


class MixIndex:
    """A mix folder's index: each shard's records, the document table and the sources' names."""

    def __init__(self, folder: str | Path, manifest: dict):
        self.folder, self.manifest = Path(folder), manifest
        block = manifest.get(KEY)
        if not isinstance(block, dict) or block.get("format") != FORMAT:
            refuse_indexless(self.folder, manifest)
            raise DocumentIndexError(f"{self.folder}: manifest.json has no per-document index of format {FORMAT}")
        self.sources = [str(s.get("name")) for s in manifest.get("sources") or []]
        self._shards = {s["prefix"]: s for s in manifest.get("shards") or []}
        self._block = block
        self.doc_dtype = np.dtype([tuple(f) for f in block["doc_dtype"]])
        self.entry_dtype = np.dtype([tuple(f) for f in block["entry_dtype"]])
        self._table: DocumentTable | None = None
        self._records: dict[str, np.ndarray] = {}

    @property
    def table(self) -> DocumentTable:
        if self._table is None:
            name = self._block["documents"][: -len(TABLE_SUFFIX)]
            self._table = DocumentTable(self.folder / name, self._block["files"], self.entry_dtype)
        return self._table

    def records(self, prefix: str) -> np.ndarray:
        """The DOC records of shard ``prefix`` (its file name without extension), checked against its size."""
        if prefix not in self._records:
            entry = self._shards.get(prefix)
            if entry is None or "docs" not in entry:
                raise DocumentIndexError(f"{self.folder}: shard {prefix} is not listed with its index in manifest.json")
            path = self.folder / entry["docs"]
            if not path.exists():
                raise DocumentIndexError(f"{path}: missing; the mix's index is incomplete (check it with cuvee mix "
                                         f"{self.folder} --verify, or rebuild the mix)")
            rec = read_records(path, self.doc_dtype)
            if len(rec) != entry.get("documents", len(rec)):
                raise DocumentIndexError(f"{path}: {len(rec):,} records for {entry['documents']:,} documents; the "
                                         f"index is not this shard's (rebuild the mix)")
            self._records[prefix] = rec
        return self._records[prefix]

    def describe(self, prefix: str, i: int) -> dict:
        """Document ``i`` of shard ``prefix``: its source, epoch, table entry and key."""
        r = self.records(prefix)[i]
        key = self.table.key(int(r["entry"]))
        src = (self.manifest.get("sources") or [])[int(r["source"])]
        return {"source": src.get("name"), "source_index": int(r["source"]), "selection": src.get("selection"),
                "epoch": int(r["epoch"]), "entry": int(r["entry"]), "file": key.file, "row": key.row, "id": key.id}
