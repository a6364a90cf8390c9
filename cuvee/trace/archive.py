"""A document's recorded byte range, read again from its archive (local path or URL), and parsed back into the
record by the run's own reader.

Why the run's reader and not a second parser: the claim checked is that *these bytes are what the run read*, so
the bytes go through :class:`cuvee.pipeline.readers.CommonCrawlReader` (framing, gzip members, HTTP payload,
digests) exactly as in the run, and the record it frames at the recorded place (``source_offset``, and
``source_skip`` in a file gzip'd whole) must carry the recorded WARC-Record-ID and payload digest. Remote archives
are read with the readers' remote I/O (``cuvee.pipeline.remote``: fsspec with connect/read timeouts, transient
failures retried); one that cannot be read is one line.
"""

from __future__ import annotations

import io
from pathlib import Path

from cuvee.trace.mixfolder import TraceError

RETRIES, BACKOFF_S, TIMEOUT_S = 1, 0.5, 20.0  # a trace waits seconds for an archive, not a run's minutes


def is_remote(source: str) -> bool:
    return "://" in source and not source.startswith("file://")


def read_range(source: str, offset: int, length: int | None, storage_options: dict | None = None) -> bytes:
    """``length`` bytes of ``source`` at ``offset`` (to the end when ``length`` is None)."""
    try:
        if not is_remote(source):
            path = source.removeprefix("file://")
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read() if length is None else f.read(length)
        else:
            data = _remote(source, offset, length, storage_options)
    except (OSError, ValueError, RuntimeError) as e:
        raise TraceError(f"archive {source} cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                         f"is it reachable from here?") from None
    except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types (aiohttp, botocore)
        raise TraceError(f"archive {source} cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if length is not None and len(data) != length:
        raise TraceError(f"archive {source}: {len(data):,} bytes at offset {offset:,} where the run read {length:,}; "
                         f"the file is shorter than when the run read it")
    return data


def _remote(source: str, offset: int, length: int | None, storage_options: dict | None) -> bytes:
    import fsspec

    from cuvee.pipeline.remote import RetryingFile, RetryPolicy, timeout_options

    fs, path = fsspec.core.url_to_fs(source, **timeout_options(source, TIMEOUT_S, storage_options))
    policy = RetryPolicy(RETRIES, BACKOFF_S)
    if length is not None:
        return policy.call(lambda: fs.cat_file(path, start=offset, end=offset + length))
    with RetryingFile(lambda: fs.open(path, "rb"), policy, name=source) as f:
        f.seek(offset)
        return f.read()


def _reader(data: bytes, source: str):
    """The run's archive reader over ``data`` (the range read), naming the record's file as the run did."""
    from cuvee.pipeline.readers import CommonCrawlReader

    class OneRange(CommonCrawlReader):
        def _open(self, filepath: str):
            return io.BytesIO(data)

        def _source_path(self, filepath: str) -> str:
            return source

    return OneRange(str(Path(".").resolve()), fmt="auto")


def parse_record(data: bytes, meta: dict, start: int):
    """The document the reader frames at the recorded place in ``data`` (read from byte ``start`` of the file)."""
    source = meta["source_file"]
    want = (int(meta["source_offset"]), int(meta.get("source_skip") or 0))
    for doc in _reader(data, source).read_file(source):
        m = doc.metadata
        if (int(m["source_offset"]) + start, int(m.get("source_skip") or 0)) == want:
            return doc
    raise TraceError(f"archive {source}: no record starts at the recorded offset {want[0]:,}"
                     + (f" (+{want[1]:,} decompressed)" if want[1] else "") + "; the file changed since the run read it")


def reread(meta: dict, storage_options: dict | None = None) -> tuple[object, dict]:
    """(document, what was read) for the record a row names: its range read again and parsed by the reader."""
    offset, length = int(meta["source_offset"]), meta.get("source_length")
    data = read_range(meta["source_file"], offset, None if length is None else int(length), storage_options)
    doc = parse_record(data, meta, offset)
    return doc, {"read": "remote" if is_remote(meta["source_file"]) else "local", "bytes": len(data)}


def same_record(doc, meta: dict) -> list[str]:
    """What differs between the re-read record and the row's recorded identity (empty: the same record)."""
    got = doc.metadata
    diffs = []
    for key in ("payload_digest", "url"):
        if meta.get(key) is not None and got.get(key) != meta[key]:
            diffs.append(f"{key} {got.get(key)!r} != recorded {meta[key]!r}")
    rid, want = str(got.get("warc_record_id", "")), str(meta.get("warc_record_id", ""))
    if want.startswith("arc:"):  # cuvee's ARC id counts records from where reading started: compare its digest
        rid, want = rid.rsplit(":", 1)[-1], want.rsplit(":", 1)[-1]
    if want and rid != want:
        diffs.append(f"record id {rid!r} != recorded {want!r}")
    return diffs
