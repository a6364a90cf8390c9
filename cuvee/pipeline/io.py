"""Reading cuvee / datatrove outputs back (Parquet or JSONL) for the mixer, classifiers and cards."""

from __future__ import annotations

import glob as _glob
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from datatrove.data import Document

from cuvee.pipeline.fastgzip import open_gzip

DOC_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz")


def expand_paths(paths: str | Iterable[str]) -> list[str]:
    """Files from files, folders (recursive) and globs, sorted for determinism; missing paths are errors."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [str(paths)]
    out: list[str] = []
    for p in paths:
        p = str(p)
        if any(ch in p for ch in "*?["):
            matches = sorted(_glob.glob(p, recursive=True))
        elif os.path.isdir(p):
            matches = sorted(str(f) for f in Path(p).rglob("*") if f.is_file() and str(f).endswith(DOC_SUFFIXES))
        elif os.path.exists(p):
            matches = [p]
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
        if not matches:
            raise FileNotFoundError(f"no document files match {p}")
        out.extend(matches)
    return out


def _doc_from_row(row: dict, source: str, i: int) -> Document:
    from cuvee.pipeline.writers import metadata_from_row

    meta = metadata_from_row(row.get("metadata"))
    extra = {k: v for k, v in row.items() if k not in ("text", "id", "metadata", "media") and v is not None}
    meta = {**extra, **meta}
    return Document(text=row.get("text") or "", id=str(row.get("id") or f"{source}/{i}"), metadata=meta)


def _open_zst(path: str, mode: str = "rt"):
    import io

    import zstandard

    return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), encoding="utf-8")


def iter_documents(paths: str | Iterable[str], columns: list[str] | None = None) -> Iterator[Document]:
    """Yield Documents from Parquet/JSONL files, folders or globs, in a deterministic order."""
    for path in expand_paths(paths):
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(path)
            i = 0
            for batch in pf.iter_batches(batch_size=1024, columns=columns):
                for row in batch.to_pylist():
                    yield _doc_from_row(row, path, i)
                    i += 1
        else:
            opener = _open_zst if path.endswith(".zst") else open_gzip if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                for i, line in enumerate(f):
                    if line.strip():
                        yield _doc_from_row(json.loads(line), path, i)
