"""Did an input change since the plan? One stamp and one comparison for every kind of input a command binds
(pipeline inputs, mix sources, shards, eval files, task YAMLs and their data and code files).

A stamp is a small JSON-able dict: ``bytes`` (size), and for a local file ``mtime_ns`` and the SHA-256 of its
first and last 64 KiB (``head_tail_sha256``); for a remote file the store's version keys (ETag, modification
time, version id). A rewrite in place at the same size changes the time; a copy that keeps the time but not the
bytes changes the hash in most cases. ``content_only`` drops the time, for inputs that may move or be copied
(a mix's shards) but must keep their bytes. :func:`change` says in words what differs, or None.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

EDGE = 64 * 1024  # bytes hashed at each end of a local file
REMOTE_KEYS = ("ETag", "etag", "LastModified", "last_modified", "mtime", "VersionId", "generation")
_TIME_KEYS = ("mtime_ns",)


def stamp(path: str | Path, *, content_only: bool = False) -> dict[str, Any]:
    """The stamp of a local file (``OSError`` when it cannot be read)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        h = hashlib.sha256(f.read(EDGE))
        if st.st_size > EDGE:
            f.seek(max(EDGE, st.st_size - EDGE))
            h.update(f.read(EDGE))
    out: dict[str, Any] = {"bytes": st.st_size, "head_tail_sha256": h.hexdigest()}
    if not content_only:
        out["mtime_ns"] = st.st_mtime_ns
    return out


def remote_stamp(info: dict[str, Any]) -> dict[str, Any] | None:
    """The stamp of a remote file from its fsspec ``info()``; None when the store gives neither size nor version."""
    out: dict[str, Any] = {k: str(info[k]) for k in REMOTE_KEYS if info.get(k) is not None}
    if info.get("size") is not None:
        out["bytes"] = int(info["size"])
    return out or None


def stamps(paths, *, content_only: bool = False) -> dict[str, dict[str, Any]]:
    """``{absolute path: stamp}`` for local files, in the order given."""
    return {os.path.abspath(p): stamp(p, content_only=content_only) for p in paths}


def change(before: dict[str, Any] | None, now: dict[str, Any] | None) -> str | None:
    """What differs between two stamps of one file, in words; None when they agree or either is unknown.

    Keys only one side has are ignored (a plan recorded before a key existed still resumes)."""
    if not isinstance(before, dict) or not isinstance(now, dict):
        return None
    if now.get("missing"):
        return "missing now"
    if before.get("bytes") is not None and now.get("bytes") is not None and before["bytes"] != now["bytes"]:
        return f"size {before['bytes']} -> {now['bytes']} bytes"
    shared = [k for k in before if k in now and k != "bytes"]
    if "head_tail_sha256" in shared and before["head_tail_sha256"] != now["head_tail_sha256"]:
        return "same size, other content"
    if any(before[k] != now[k] for k in shared if k in _TIME_KEYS):
        return "same size, rewritten (modification time differs)"
    other = [k for k in shared if k not in _TIME_KEYS and k != "head_tail_sha256" and before[k] != now[k]]
    if other:
        return "same size, another version on the store (" + ", ".join(
            f"{k} {before[k]} -> {now[k]}" for k in sorted(other)) + ")"
    return None


def first_change(before: dict[str, dict], now: dict[str, dict]) -> tuple[str, str] | None:
    """``(path, what changed)`` of the first file stamped in both maps whose stamps differ, else None.

    Files only one side has are left to the plan's own comparison (``bind`` lists them)."""
    for path, new in now.items():
        if path in before and (what := change(before[path], new)):
            return path, what
    return None


def restamp(before: dict[str, dict]) -> dict[str, dict]:
    """Stamp again the local files of ``before``, with the same keys (``{"missing": True}`` for a file gone)."""
    out = {}
    for path, old in before.items():
        try:
            out[path] = stamp(path, content_only="mtime_ns" not in (old or {}))
        except OSError:
            out[path] = {"missing": True}
    return out
