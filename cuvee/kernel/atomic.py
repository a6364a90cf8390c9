"""One atomic write: readers see the old file or the new one, never half of it, and a killed writer leaves only
a temporary that the stale-file sweep recognises.

Every temporary is a sibling named ``.<name>.<pid>.cuvee-tmp`` (:func:`temp_path`); :func:`is_temp` is the
sweep's test, so a temporary of any writer here is always swept. Writers that stream (a shard, a checkpoint, an
array) write to :func:`temp_path` through :func:`replacing` and the rename happens only when the block ends
without an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".cuvee-tmp"
_LEGACY_SUFFIXES = (".tmp",)  # temporaries of earlier versions, swept too


def temp_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


def is_temp(path: Path) -> bool:
    """Whether ``path`` is a temporary some writer here left (now or in an earlier version)."""
    name = path.name
    return name.endswith(TEMP_SUFFIX) or name.endswith(_LEGACY_SUFFIXES)


@contextmanager
def replacing(path: str | Path, *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; on a clean exit it replaces ``path``, on an error it is removed."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding=encoding)


def write_json(path: str | Path, data: Any, *, indent: int | None = 2) -> None:
    write_text(path, json.dumps(data, indent=indent, default=str) + ("\n" if indent else ""))


def rename_into_place(tmp: str | Path, path: str | Path) -> None:
    """For writers that already hold a finished temporary from :func:`temp_path`: the one rename."""
    os.replace(tmp, path)
