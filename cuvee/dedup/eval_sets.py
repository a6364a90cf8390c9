"""Eval sets for decontamination, read only from local files: items as (id, text) from JSONL/JSON/Parquet/CSV
or plain text, or from an lm-evaluation-harness task YAML whose data files are local copies.

Why no lm-eval import and no download: the task YAML is read with a safe loader (``!function`` tags become
inert strings, never imported), its ``data_files`` resolved as ``cuvee.train.lm_eval_backend`` does (``~`` and
``$VARS`` expanded, relative to the YAML's folder), and a task whose data is not on disk is one line naming
the file to provide. An item's text is its named fields joined in order (lists and mappings by their string
leaves); ``choices[label]`` picks the element of list ``choices`` that field ``label`` indexes (the gold answer).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cuvee.yaml_safe import YamlLoadError, load_yaml

TASKS_DIR = Path(__file__).resolve().parents[1] / "assets" / "eval_tasks"
FILE_FORMATS = ("jsonl", "json", "parquet", "csv", "txt")
_INDEXED = re.compile(r"^([\w.]+)\[(\w+)\]$")
_JINJA_REF = re.compile(r"\{\{\s*([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)")
_IDENT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class EvalSetError(ValueError):
    """An eval set cannot be read: a missing local copy, an unknown task, a field absent from the data."""


@dataclass(frozen=True)
class Source:
    """One resolved eval set: where its items are and which fields make an item's text (None: every string)."""

    name: str
    files: tuple[str, ...]
    fmt: str
    fields: tuple[str, ...] | None
    id_field: str | None


def file_format(path: str) -> str:
    name = path.lower().removesuffix(".gz")
    for suffix, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"), (".parquet", "parquet"),
                        (".csv", "csv"), (".txt", "txt"), (".text", "txt")):
        if name.endswith(suffix):
            return fmt
    raise EvalSetError(f"eval set file {path}: unknown format (expected one of .jsonl .json .parquet .csv .txt, "
                       f"optionally .gz)")


# ---- lm-evaluation-harness task YAMLs, read without lm-eval ---------------------------------------------------
def _read_task_yaml(path: Path):
    """A task YAML as plain data: tags (``!function utils.f``) kept as text, nothing imported or run, and the
    alias / depth / size limits every cuvee YAML has."""
    return load_yaml(path.read_text(encoding="utf-8"), str(path), inert_tags=True)


def task_files(include_path: tuple[str, ...] = ()) -> dict[str, Path]:
    """Task name -> YAML for the tasks shipped with cuvee and those under ``include_path`` (these win)."""
    out: dict[str, Path] = {}
    for folder in (TASKS_DIR, *map(Path, include_path)):
        for p in sorted(Path(folder).expanduser().rglob("*.y*ml")):
            out[p.stem] = p
            try:
                name = _read_task_yaml(p).get("task")
            except (YamlLoadError, OSError, AttributeError, UnicodeDecodeError):
                continue
            if isinstance(name, str):
                out[name] = p
    return out


def _load_task_yaml(path: Path, depth: int = 0) -> dict:
    try:
        cfg = _read_task_yaml(path)
    except YamlLoadError as e:
        raise EvalSetError(f"task file {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise EvalSetError(f"task file {path}: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(cfg, dict):
        raise EvalSetError(f"task file {path}: not a mapping")
    if inc := cfg.pop("include", None):
        if depth > 5:
            raise EvalSetError(f"task file {path}: include nested too deep")
        base = _load_task_yaml((path.parent / str(inc)).resolve(), depth + 1)
        cfg = {**base, **cfg}
    return cfg


def _resolve_file(value: str, yaml_path: Path, task: str) -> str:
    expanded = os.path.expandvars(os.path.expanduser(str(value)))
    if "$" in expanded:
        var = re.search(r"\$\{?(\w+)", expanded).group(1)
        raise EvalSetError(f"task {task}: its data file {value!r} needs ${var}, which is not set (point it at your "
                           f"local copies, docs/DOWNSTREAM_EVAL.md; nothing is downloaded)")
    p = Path(expanded)
    p = p if p.is_absolute() else yaml_path.parent / p
    if not p.is_file():
        raise EvalSetError(f"task {task}: local data file {p} not found (make a local copy, docs/DOWNSTREAM_EVAL.md; "
                           f"nothing is downloaded)")
    return str(p.resolve())


def _task_fields(cfg: dict) -> tuple[str, ...] | None:
    """Fields the task's prompt and choices read, when they are plain names or ``{{ name }}`` templates; None
    (every string of a record) when the task builds them in code."""
    fields: list[str] = []
    for key in ("doc_to_text", "doc_to_choice"):
        v = cfg.get(key)
        if not isinstance(v, str) or v.startswith("!"):
            return None
        refs = _JINJA_REF.findall(v) if "{{" in v else ([v] if _IDENT.match(v) else [])
        if not refs:
            return None
        fields += [r for r in refs if r not in fields]
    return tuple(fields) or None


def resolve_task(spec: str, split: str | None = None, include_path: tuple[str, ...] = ()) -> tuple[str, tuple[str, ...], dict]:
    """(task name, local data files, task config) of an lm-eval task name or task YAML path, offline."""
    p = Path(spec).expanduser()
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise EvalSetError(f"task file {spec} not found")
        path = p.resolve()
    else:
        known = task_files(include_path)
        if spec not in known:
            from cuvee.pipeline.recipe import did_you_mean

            raise EvalSetError(f"task {spec!r} has no local task file{did_you_mean(spec, known)} (shipped: "
                               f"{', '.join(sorted(k for k, v in known.items() if k == v.stem))}; add your own "
                               f"folder of lm-eval task YAMLs with include_path, or name the data with path:)")
        path = known[spec]
    cfg = _load_task_yaml(path)
    task = str(cfg.get("task") or path.stem)
    if cfg.get("dataset_path") not in ("json", "parquet", "csv", "text"):
        raise EvalSetError(f"task {task} ({path}): dataset_path {cfg.get('dataset_path')!r} is a hub dataset; "
                           f"decontaminate reads only local copies (dataset_path json/parquet/csv with data_files, "
                           f"or name the file with path:)")
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if not files:
        raise EvalSetError(f"task {task} ({path}): dataset_kwargs.data_files is required (local data file)")
    if isinstance(files, dict):
        want = split or cfg.get("test_split") or cfg.get("validation_split") or next(iter(files))
        if want not in files:
            raise EvalSetError(f"task {task}: split {want!r} not among its data_files ({', '.join(files)})")
        files = files[want]
    files = files if isinstance(files, list) else [files]
    return task, tuple(_resolve_file(f, path, task) for f in files), cfg


def resolve(name: str | None, path: str | None, task: str | None, fields: list[str] | None, id_field: str | None,
            split: str | None = None, include_path: tuple[str, ...] = ()) -> Source:
    """A recipe's eval set entry as a :class:`Source`; raises :class:`EvalSetError` (one line) when unreadable."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise EvalSetError(f"eval set file {path} not found")
        fmt = file_format(str(p))
        if fmt == "txt" and fields:
            raise EvalSetError(f"eval set {path}: a .txt file has one item per line, it has no fields")
        src = Source(name or p.name.split(".")[0], (str(p.resolve()),), fmt, tuple(fields) if fields else None, id_field)
    else:
        task_name, files, cfg = resolve_task(str(task), split, include_path)
        fmt = file_format(files[0]) if cfg.get("dataset_path") != "text" else "txt"
        src = Source(name or task_name, files, fmt, tuple(fields) if fields else _task_fields(cfg), id_field)
        if not fields and src.fields:
            try:
                check_fields(src)
            except EvalSetError:  # the prompt reads fields its process_docs makes: take every string of a record
                src = Source(src.name, files, fmt, None, id_field)
    check_fields(src)
    return src


# ---- reading items ---------------------------------------------------------------------------------------------
def _open_text(path: str):
    return io.TextIOWrapper(gzip.open(path), encoding="utf-8", errors="replace") if path.endswith(".gz") \
        else open(path, encoding="utf-8", errors="replace")


def records(src: Source) -> Iterator[dict | None]:
    """Every record of the source's files, in order; None for a line that is not a JSON object (counted)."""
    for path in src.files:
        if src.fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
                yield from batch.to_pylist()
            continue
        with _open_text(path) as f:
            if src.fmt == "txt":
                yield from ({"text": line.rstrip("\n")} for line in f)
            elif src.fmt == "csv":
                yield from csv.DictReader(f)
            elif src.fmt == "json":
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


_MISSING = object()


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
        raise EvalSetError(f"eval set {src.name}: {src.files[0]} holds no record")
    for f in (*(src.fields or ()), *([src.id_field] if src.id_field else [])):
        if get_field(first, f) is _MISSING:
            from cuvee.pipeline.recipe import did_you_mean

            raise EvalSetError(f"eval set {src.name}: field {f!r} is not in its first record"
                               f"{did_you_mean(f.split('[')[0], list(first))} (fields: {', '.join(list(first)[:20])})")


def items(src: Source) -> Iterator[tuple[str, str | None]]:
    """(item id, text) per record; text None for a record that is not an object or lacks a field (counted)."""
    for i, r in enumerate(records(src)):
        if r is None:
            yield str(i), None
        else:
            yield item_id(r, src, i), item_text(r, src)
