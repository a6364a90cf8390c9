"""Eval items read offline, as (id, text), for decontamination: from a local JSONL/JSON/Parquet/CSV file or plain
text (one item a line), or from a task (:func:`cuvee.evaltasks.tasks.load_task`) whose data files are local copies.

Nothing is imported or run: a task whose prompt is made by code (``process_docs``, ``!function`` templates) has
every string of a record checked instead of the prompt's fields. An item's text is its named fields joined in
order (lists and mappings by their string leaves); ``choices[label]`` picks the element of list ``choices`` that
field ``label`` indexes (the gold answer). Text files are decoded strictly (UTF-8, with or without a BOM, gzip
allowed): a file in another encoding is refused in one line naming the line and byte, before any work, because a
mis-decoded item loses every n-gram holding an accented word and would be counted as checked and not found.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cuvee.evaltasks.errors import EvalTaskError
from cuvee.evaltasks.tasks import load_task
from cuvee.kernel.config import did_you_mean

_INDEXED = re.compile(r"^([\w.]+)\[(\w+)\]$")
_JINJA_REF = re.compile(r"\{\{\s*([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)")
_IDENT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_MISSING = object()


@dataclass(frozen=True)
class Source:
    """One eval set: its item files, their format, the fields of an item's text (None: every string), and every
    file it depends on (a task's YAMLs and code too), which the decontaminate stage stamps."""

    name: str
    files: tuple[str, ...]
    fmt: str
    fields: tuple[str, ...] | None
    id_field: str | None
    inputs: tuple[str, ...]


def file_format(path: str) -> str:
    name = path.lower().removesuffix(".gz")
    for suffix, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"), (".parquet", "parquet"),
                        (".csv", "csv"), (".txt", "txt"), (".text", "txt")):
        if name.endswith(suffix):
            return fmt
    raise EvalTaskError(f"eval set file {path}: unknown format (expected one of .jsonl .json .parquet .csv .txt, "
                        f"optionally .gz)")


def _task_fields(cfg: dict) -> tuple[str, ...] | None:
    """Fields the task's prompt and choices read, when they are plain names or ``{{ name }}`` templates; None
    (every string of a record) when the task builds them in code."""
    fields: list[str] = []
    for key in ("doc_to_text", "doc_to_choice"):
        v = cfg.get(key)
        if not isinstance(v, str):
            return None
        refs = _JINJA_REF.findall(v) if "{{" in v else ([v] if _IDENT.match(v) else [])
        if not refs:
            return None
        fields += [r for r in refs if r not in fields]
    return tuple(fields) or None


def resolve(name: str | None, path: str | None, task: str | None, fields: list[str] | None, id_field: str | None,
            split: str | None = None, include_path: tuple[str, ...] = ()) -> Source:
    """A recipe's eval set entry as a :class:`Source`, its files checked to decode; one-line EvalTaskError if not."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise EvalTaskError(f"eval set file {path} not found")
        fmt = file_format(str(p))
        if fmt == "txt" and fields:
            raise EvalTaskError(f"eval set {path}: a .txt file has one item per line, it has no fields")
        files = (str(p.resolve()),)
        src = Source(name or p.name.split(".")[0], files, fmt, tuple(fields) if fields else None, id_field, files)
    else:
        t = load_task(str(task), include_path)
        files = t.split_files(split)
        fmt = "txt" if t.config.get("dataset_path") == "text" else file_format(files[0])
        src = Source(name or t.name, files, fmt, tuple(fields) if fields else _task_fields(t.config), id_field,
                     tuple(t.files()))
    if fmt != "parquet":
        for f in src.files:
            check_decodes(f)
    if not fields and src.fields:
        try:
            check_fields(src)
        except EvalTaskError:  # the prompt reads fields its process_docs makes: take every string of a record
            src = Source(src.name, src.files, src.fmt, None, id_field, src.inputs)
    check_fields(src)
    return src


def check_decodes(path: str) -> None:
    """One line naming the file, the line and the byte when a text eval file is not UTF-8 (eval sets are small:
    the file is read whole)."""
    try:
        with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise EvalTaskError(f"eval file {path}: cannot read it: {' '.join(str(e).split())[:200]}") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise EvalTaskError(f"eval file {path}: not UTF-8 at line {line} (byte {e.start}: "
                            f"{data[e.start:e.start + 1]!r}, {e.reason}); save it as UTF-8 (e.g. iconv -f latin1 -t "
                            f"utf-8): cuvee does not guess encodings, and a mis-decoded item would be checked without "
                            f"its accented words") from None


def _open_text(path: str):
    return io.TextIOWrapper(gzip.open(path), encoding="utf-8-sig") if path.endswith(".gz") \
        else open(path, encoding="utf-8-sig")


def records(src: Source) -> Iterator[dict | None]:
    """Every record of the source's files, in order; None for a line that is not a JSON object (counted)."""
    for path in src.files:
        if src.fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
                yield from batch.to_pylist()
            continue
        try:
            with _open_text(path) as f:
                yield from _text_records(f, src.fmt)
        except UnicodeDecodeError as e:  # checked when resolved: the file changed since
            raise EvalTaskError(f"eval file {path}: not UTF-8 (byte {e.start} of a block): it changed since the "
                                f"run checked it") from None


def _text_records(f, fmt: str) -> Iterator[dict | None]:
    if fmt == "txt":
        yield from ({"text": line.rstrip("\n")} for line in f)
    elif fmt == "csv":
        yield from csv.DictReader(f)
    elif fmt == "json":
        data = json.load(f)
        rows = data if isinstance(data, list) else next((v for v in data.values() if isinstance(v, list)), [])
        yield from (r if isinstance(r, dict) else None for r in rows)
    else:
        for line in f:
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                r = None
            yield r if isinstance(r, dict) else None


def _strings(v) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _strings(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _strings(x)


def get_field(record: dict, spec: str):
    """``a.b`` walks mappings; ``a.b[c]`` is the element of list ``a.b`` at the index held by field ``c``
    (a number, or a letter A-Z as in ARC's answerKey)."""
    m = _INDEXED.match(spec)
    path, index = (m.group(1), m.group(2)) if m else (spec, None)
    v = record
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return _MISSING
        v = v[part]
    if index is None:
        return v
    key = record.get(index, _MISSING)
    if not isinstance(v, (list, tuple)) or key is _MISSING:
        return _MISSING
    k = str(key).strip()
    i = int(k) if k.isdigit() else (ord(k.upper()) - ord("A") if len(k) == 1 and k.isalpha() else -1)
    return v[i] if 0 <= i < len(v) else _MISSING


def item_text(record: dict, src: Source) -> str | None:
    """The text checked for an item: its fields' strings joined by spaces; None when a named field is missing."""
    if src.fields is None:
        return " ".join(s for k, v in record.items() if k != src.id_field for s in _strings(v))
    parts = []
    for f in src.fields:
        v = get_field(record, f)
        if v is _MISSING:
            return None
        parts.extend(_strings(v))
    return " ".join(parts)


def item_id(record: dict, src: Source, index: int) -> str:
    key = src.id_field or ("id" if "id" in record else None)
    v = record.get(key) if key else None
    return str(v) if v is not None and not isinstance(v, (dict, list)) else str(index)


def check_fields(src: Source) -> None:
    """The first record must hold every named field (and the id field): a misspelt field fails here, not
    after a whole corpus was checked against empty items."""
    if src.fmt == "txt":
        return
    first = next((r for r in records(src) if r is not None), None)
    if first is None:
        raise EvalTaskError(f"eval set {src.name}: {src.files[0]} holds no record")
    for f in (*(src.fields or ()), *([src.id_field] if src.id_field else [])):
        if get_field(first, f) is _MISSING:
            raise EvalTaskError(f"eval set {src.name}: field {f!r} is not in its first record"
                                f"{did_you_mean(f.split('[')[0], list(first))} (fields: {', '.join(list(first)[:20])})")


def items(src: Source) -> Iterator[tuple[str, str | None]]:
    """(item id, text) per record; text None for a record that is not an object or lacks a field (counted)."""
    for i, r in enumerate(records(src)):
        if r is None:
            yield str(i), None
        else:
            yield item_id(r, src, i), item_text(r, src)
