"""Which files a recipe input names: one listing shared by the readers' sharding and the run's plan, so they never disagree."""

from __future__ import annotations

import os

ARCHIVE_SUFFIXES = (".warc", ".arc", ".wet", ".warc.gz", ".arc.gz", ".wet.gz", ".warc.zst", ".warc.lz4")
_GLOB_CHARS = "*?["


def split_input_path(path: str) -> tuple[str, str | None]:
    """'data/x.warc.gz' -> ('data', 'x.warc.gz'); 's3://b/cc/*.warc.gz' -> ('s3://b/cc', '*.warc.gz'); folder -> (folder, None).

    Works for local paths and fsspec URLs: a path with glob characters is split at the last '/' before
    the first glob character; a single local file is split into its folder and (glob-escaped) name.
    """
    first = min((path.find(c) for c in _GLOB_CHARS if c in path), default=-1)
    if first != -1:
        cut = path.rfind("/", 0, first)
        return (path[:cut] or "/", path[cut + 1 :]) if cut != -1 else (".", path)
    if "://" not in path and os.path.isfile(path):
        import glob as _glob

        return os.path.dirname(os.path.abspath(path)), _glob.escape(os.path.basename(path))
    if "://" in path:
        import fsspec

        fs, _, (p,) = fsspec.get_fs_token_paths(path)
        if fs.isfile(p):
            import glob as _glob

            return path.rsplit("/", 1)[0], _glob.escape(path.rsplit("/", 1)[1])
    return path, None


def list_input_files(folder, glob_pattern: str | None, recursive: bool, archives_only: bool) -> list[str]:
    """The files a reader lists (relative to ``folder``), in datatrove's order; ``archives_only``: with no glob,
    keep only WARC/WET/ARC files (a folder of Common Crawl data often holds LICENSE / listing files too)."""
    files = folder.list_files(recursive=recursive, glob_pattern=glob_pattern)
    if archives_only and glob_pattern is None:
        files = [f for f in files if f.lower().endswith(ARCHIVE_SUFFIXES)]
    return files


def plan_input_files(path: str, fmt: str, timeout_s: float | None = None) -> list[str]:
    """Every file the reader for one recipe input ``path`` (format ``fmt``) will read, as full paths / URLs.

    Same listing as the readers' own sharding (``CommonCrawlReader._shard``, ``PlannedJsonlReader``,
    ``PlannedParquetReader``): rank ``r`` of ``W`` reads ``files[r::W]``. Used by the run's plan check;
    ``timeout_s`` bounds a remote listing's connects and reads.
    """
    from datatrove.io import get_datafolder

    from cuvee.pipeline.remote import remote_folder

    folder_path, glob_pattern = split_input_path(str(path))
    folder = get_datafolder(remote_folder(folder_path, timeout_s))
    files = list_input_files(folder, glob_pattern, True, archives_only=fmt not in ("jsonl", "parquet"))
    return [folder.resolve_paths(f) for f in files]
