"""One record of a mix input file, read at its row, and the cuvee run folder that wrote the file.

Why not iterate :func:`cuvee.pipeline.io.iter_documents` to the row: a trace reads one record of a file that may
hold millions, so a Parquet row is read from its row group alone and a JSON-lines row by skipping lines. The row
numbering is the mix index's (cuvee/mixer/docindex.py): the Parquet row, or the JSON-lines record counted over
non-blank lines, as ``iter_documents`` yields them; the record becomes the same mapping that function makes
(``metadata_from_row``: a typed struct with ``other_json`` merged back, top-level extras kept; the id a record
without one gets, ``<file>/<line>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cuvee.kernel.workdir import owner
from cuvee.trace.mixfolder import TraceError

RUN_FILES = ("recipe.resolved.json", "stats.json")


@dataclass
class Row:
    """A stored document: ``text``, ``id``, ``metadata`` (provenance and stage decisions), and where it was read."""

    text: str
    id: str
    metadata: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # top-level keys beside text/id/metadata (a JSONL input's fields)
    file: str = ""
    row: int = 0

    def field(self, key: str):
        """A source's ``text_key``: ``text`` itself, else a top-level or metadata field."""
        if key == "text":
            return self.text
        return self.extra.get(key, self.metadata.get(key))


def _from_record(rec: dict, file: str, row: int, line: int) -> Row:
    from cuvee.pipeline.writers import metadata_from_row

    meta = metadata_from_row(rec.get("metadata"))
    extra = {k: v for k, v in rec.items() if k not in ("text", "id", "metadata", "media") and v is not None}
    return Row(text=rec.get("text") or "", id=str(rec.get("id") or f"{file}/{line}"), metadata={**extra, **meta},
               extra=extra, file=file, row=row)


def open_text(path: str):
    if path.endswith(".zst"):
        import io

        import zstandard

        return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), encoding="utf-8")
    if path.endswith(".gz"):
        from cuvee.pipeline.fastgzip import open_gzip

        return open_gzip(path, "rt")
    return open(path, encoding="utf-8")


def read_row(file: str, row: int) -> Row:
    """Record ``row`` of ``file`` (Parquet or JSON lines); one line when the file is gone or shorter."""
    if not Path(file).is_file():
        raise TraceError(f"{file}: the mix input file is gone (moved or deleted since the mix was built); the "
                         f"shard's tokens can no longer be traced to its records")
    if file.endswith(".parquet"):
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(file)
        start = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if row < start + n:
                rec = pf.read_row_group(g).slice(row - start, 1).to_pylist()[0]
                return _from_record(rec, file, row, row)
            start += n
    else:
        seen = 0
        with open_text(file) as f:
            for line_no, line in enumerate(f):
                if not line.strip():
                    continue
                if seen == row:
                    return _from_record(json.loads(line), file, row, line_no)
                seen += 1
    raise TraceError(f"{file}: has no record {row:,}; the file changed since the mix was built")


def run_folder_of(file: str | Path, levels: int = 4) -> Path | None:
    """The cuvee run folder (marker kind ``run`` with ``recipe.resolved.json``) holding ``file``, looking up at most
    ``levels`` folders; None for an input no run wrote (a curated JSONL file, an output moved elsewhere)."""
    p = Path(file).resolve().parent
    for cand in [p, *p.parents][:levels]:
        mark = owner(cand)
        if mark is not None:
            return cand if mark.get("kind") == "run" and (cand / RUN_FILES[0]).is_file() else None
    return None


def run_outputs(run: Path) -> list[str]:
    """The document files run folder ``run`` wrote: ``stats.json``'s list, else its output folder's files."""
    from cuvee.pipeline.io import DOC_SUFFIXES, expand_paths

    try:
        out = (json.loads((run / "stats.json").read_text()).get("output") or {})
    except (OSError, ValueError):
        out = {}
    files = [str(f) for f in out.get("files") or [] if str(f).endswith(DOC_SUFFIXES) and Path(f).is_file()]
    if files:
        return files
    folder = Path(out.get("path") or run / "output")
    return expand_paths(str(folder)) if folder.is_dir() else []


def find_id(files: list[str], doc_id: str) -> Row | None:
    """The first record with id ``doc_id`` in ``files`` (Parquet: its ``id`` column is read first, then one row)."""
    for file in files:
        if file.endswith(".parquet"):
            import pyarrow.parquet as pq

            ids = pq.read_table(file, columns=["id"]).column("id").to_pylist()
            if doc_id in ids:
                return read_row(file, ids.index(doc_id))
            continue
        forms = {doc_id, json.dumps(doc_id)[1:-1], json.dumps(doc_id, ensure_ascii=False)[1:-1]}
        with open_text(file) as f:
            row = 0
            for line_no, line in enumerate(f):
                if not line.strip():
                    continue
                if any(x in line for x in forms):  # cheap test first; the id is compared once parsed
                    rec = _from_record(json.loads(line), file, row, line_no)
                    if rec.id == doc_id:
                        return rec
                row += 1
    return None
