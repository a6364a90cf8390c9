"""A compact, exact, on-disk-cached set of domains for the URL filter's 4.5M-entry UT1 snapshot.

Why: datatrove's ``URLFilter`` builds a Python ``set`` from its bundled 123 MB domain list in every task
(measured 2.4-8 s CPU and ~0.8 GB RSS per process on the shared dev machine, more than the whole rest of
a small task's non-extraction work). Here the list is parsed once, sorted, and cached as two ``.npy`` arrays
(``blob``: the UTF-8 domains joined by ``\\n``; ``offsets``: where each starts) under
``$CUVEE_CACHE_DIR`` (default ``~/.cache/cuvee``); later tasks memory-map them in milliseconds and share the
pages through the OS cache. Membership is an exact binary search over the sorted byte strings, so the
decisions are identical to the Python set (no hashing, no false positives).

The parse reproduces datatrove's ``get_list(..., do_normalize=False)``: every line not starting with ``#``,
stripped. The cache key is the source file's path, size and mtime plus a format version; a stale or
unreadable cache is rebuilt, an unwritable cache directory only costs the rebuild (logged).

datatrove's own snapshot (:func:`datatrove_blocklist`) is read straight from the tarball in its wheel (no
124 MB extraction); its list is already sorted and clean, which is checked and then used as the blob
without a Python sort: a cold build is ~1 s instead of ~10 s. It is built once per machine, as a kernel job
(one lock, one record), so the tasks of a run (or two runs) never build it at the same time; a run builds it in
the parent process before any task starts (the URL filter's builder declares it, :mod:`cuvee.pipeline.first_use`).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from datatrove.utils.logging import logger

from cuvee.kernel.atomic import replacing, write_bytes

_FORMAT = 1
BUILT = "built.json"  # the blocklist job's record (cuvee.kernel.jobs)
_PRINTABLE_OR_NEWLINE = bytes(range(0x21, 0x7F)) + b"\n"  # visible ASCII: nothing for strip() to remove


def cache_dir() -> Path:
    return Path(os.environ.get("CUVEE_CACHE_DIR") or Path.home() / ".cache" / "cuvee")


def parse_domain_lines(lines: Iterable[str]) -> set[str]:
    """datatrove's ``parse_list(do_normalize=False)``: lines not starting with '#', stripped."""
    return {x.strip() for x in lines if x and x[0] != "#"}


class SortedDomainSet:
    """Read-only exact set of strings backed by a sorted byte blob (membership by binary search)."""

    def __init__(self, blob, offsets):
        self._blob = blob  # numpy uint8 (possibly memory-mapped)
        self._off = offsets  # numpy int64, len = n + 1 (end of the last entry + 1 separator)
        self._n = len(offsets) - 1

    @classmethod
    def from_strings(cls, items: Iterable[str]) -> SortedDomainSet:
        import numpy as np

        enc = sorted({s.encode("utf-8", "surrogatepass") for s in items})
        blob = np.frombuffer(b"\n".join(enc) + b"\n", dtype=np.uint8) if enc else np.zeros(0, np.uint8)
        lengths = np.fromiter((len(b) + 1 for b in enc), dtype=np.int64, count=len(enc))
        offsets = np.zeros(len(enc) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(blob, offsets)

    @classmethod
    def from_list_bytes(cls, data: bytes) -> SortedDomainSet:
        """A list file's bytes, parsed as :func:`parse_domain_lines` would. A list that is already sorted,
        unique, ASCII and clean (no comments, blank lines or surrounding spaces: datatrove's snapshot) is
        used as the blob itself, without a Python sort; any other goes the general way."""
        import numpy as np

        body = data if data.endswith(b"\n") else data + b"\n"
        clean = (bool(data) and not body.translate(None, _PRINTABLE_OR_NEWLINE) and body[:1] not in (b"#", b"\n")
                 and b"\n#" not in body and b"\n\n" not in body)
        if clean:
            lines = body[:-1].split(b"\n")
            clean = all(a < b for a, b in itertools.pairwise(lines))
        if not clean:
            with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") as f:  # lines exactly as open() gives them
                return cls.from_strings(parse_domain_lines(f))
        blob = np.frombuffer(body, dtype=np.uint8)
        offsets = np.concatenate([np.zeros(1, np.int64), np.flatnonzero(blob == 10).astype(np.int64) + 1])
        return cls(blob, offsets)

    def _at(self, i: int) -> bytes:
        return self._blob[self._off[i]: self._off[i + 1] - 1].tobytes()

    def __len__(self) -> int:
        return self._n

    def __contains__(self, item) -> bool:
        if not isinstance(item, str):
            return False
        try:
            key = item.encode("utf-8", "surrogatepass")
        except UnicodeError:
            return False
        lo, hi = 0, self._n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo < self._n and self._at(lo) == key

    def __iter__(self) -> Iterator[str]:
        for i in range(self._n):
            yield self._at(i).decode("utf-8", "surrogatepass")


class UnionDomainSet:
    """A big cached :class:`SortedDomainSet` plus a small in-memory set (the recipe's own lists)."""

    def __init__(self, big: SortedDomainSet, small: set[str]):
        self.big = big
        self.small = {s for s in small if s not in big}

    def __contains__(self, item) -> bool:
        return item in self.small or item in self.big

    def __len__(self) -> int:
        return len(self.big) + len(self.small)

    def __iter__(self) -> Iterator[str]:
        yield from self.big
        yield from self.small


def load_domain_set(path: str | Path, cache: Path | None = None) -> SortedDomainSet:
    """The domain list at ``path`` as a :class:`SortedDomainSet`, from the cache when it is fresh."""
    import numpy as np

    path = Path(path)
    st = path.stat()
    key = hashlib.sha256(f"{_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = (cache or cache_dir()) / "url_domains"
    blob_file, off_file = folder / f"{path.name}-{key}.blob.npy", folder / f"{path.name}-{key}.offsets.npy"
    if blob_file.is_file() and off_file.is_file():
        try:  # memory-mapped: nothing is read until looked up, and tasks share the pages
            return SortedDomainSet(np.load(blob_file, mmap_mode="r"), np.load(off_file, mmap_mode="r"))
        except Exception as e:  # noqa: BLE001 - a damaged cache is rebuilt
            logger.warning(f"url filter: domain cache {blob_file} unreadable ({e}); rebuilding")
    ds = SortedDomainSet.from_list_bytes(path.read_bytes())
    try:
        _save(ds, blob_file, off_file)
        # a log line (a task's log file, or -v): the console says it its own way (cuvee.pipeline.first_use)
        logger.debug(f"url filter: cached {len(ds):,} domains from {path} in {folder}")
    except OSError as e:
        _unwritable(folder, e)
    return ds


def _save(ds: SortedDomainSet, blob_file: Path, off_file: Path) -> None:
    """The two arrays through the kernel's atomic write, offsets last: their presence marks a complete cache."""
    import numpy as np

    blob_file.parent.mkdir(parents=True, exist_ok=True)
    for arr, final in ((ds._blob, blob_file), (ds._off, off_file)):
        with replacing(final) as tmp, open(tmp, "wb") as f:
            np.save(f, arr)


def _unwritable(folder: Path, e: Exception) -> None:
    logger.warning(f"url filter: could not write the domain cache under {folder} ({e}); rebuilding it every run")


DATATROVE_TARBALL = "url_filterblacklistsv0_3_0.tar.gz"


def datatrove_tarball() -> Path:
    from datatrove.pipeline.filters.url_filter import ASSETS_PATH

    return Path(ASSETS_PATH) / DATATROVE_TARBALL


def _blocklist_files(tarball: Path, cache: Path | None) -> tuple[Path, Path, Path]:
    st = tarball.stat()
    key = hashlib.sha256(f"{_FORMAT}|{tarball.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = (cache or cache_dir()) / "url_blocklist" / key
    return folder / "domains.blob.npy", folder / "domains.offsets.npy", folder / "urls"


def blocklist_cached(tarball: Path | None = None, cache: Path | None = None) -> bool:
    """Whether :func:`datatrove_blocklist` would load without building (cheap: two stats)."""
    _blob, off, urls = _blocklist_files(tarball or datatrove_tarball(), cache)
    return off.is_file() and urls.is_file()


def datatrove_blocklist(tarball: Path | None = None, cache: Path | None = None,
                        announce: Callable[[str], None] | None = None) -> tuple[SortedDomainSet, Path]:
    """datatrove's UT1 snapshot: its domains (memory-mapped) and the folder holding its ``urls`` list.

    Built once per machine as a kernel job (:func:`cuvee.kernel.jobs.run_once`: a process that finds it being built
    waits, then loads it); an unwritable cache only costs the build, served from memory. ``announce`` is told
    before and after a build, so a caller can show the step."""
    import numpy as np

    from cuvee.kernel.jobs import run_once
    from cuvee.kernel.workdir import FolderError

    tarball = tarball or datatrove_tarball()
    blob_file, off_file, urls_file = _blocklist_files(tarball, cache)
    folder = off_file.parent
    if not (off_file.is_file() and urls_file.is_file()):
        built: dict = {}

        def build() -> dict:
            t0 = time.perf_counter()
            if announce:
                announce("url_filter: building the URL blocklist cache (once per machine)")
            built.update(_read_tarball(tarball))
            _save(built["domains"], blob_file, off_file)
            write_bytes(urls_file, built["urls"])
            if announce:
                announce(f"url_filter: blocklist cache built ({len(built['domains']):,} domains) in "
                         f"{time.perf_counter() - t0:.1f} s")
            return {"format": _FORMAT, "domains": len(built["domains"])}

        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(folder.parent, os.W_OK):  # run_once waits for a lock it cannot create as for a busy one
                raise OSError("not writable")
            run_once(folder / BUILT, folder.parent, folder.name, build, matches=lambda rec: rec.get("format") == _FORMAT,
                     mismatch=lambda: OSError(f"{folder / BUILT} is not this cache's record"))
        except (OSError, FolderError) as e:
            _unwritable(folder, e)
            built = built or _read_tarball(tarball)
            mine = Path(tempfile.mkdtemp(prefix="cuvee-urls-"))
            (mine / "urls").write_bytes(built["urls"])
            return built["domains"], mine
    try:
        return SortedDomainSet(np.load(blob_file, mmap_mode="r"), np.load(off_file, mmap_mode="r")), urls_file.parent
    except Exception as e:  # noqa: BLE001 - a damaged cache is rebuilt
        logger.warning(f"url filter: blocklist cache {folder} unreadable ({e}); rebuilding")
        off_file.unlink(missing_ok=True)
        (folder / BUILT).unlink(missing_ok=True)
        return datatrove_blocklist(tarball, cache, announce)


def _read_tarball(tarball: Path) -> dict:
    """``{"domains": SortedDomainSet, "urls": bytes}``, read straight from the tarball (no extraction)."""
    import tarfile

    from cuvee.pipeline.fastgzip import open_gzip

    found: dict[str, bytes] = {}
    with open_gzip(tarball, "rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
        for member in tar:
            if member.name in ("domains", "urls"):
                found[member.name] = tar.extractfile(member).read()
    return {"domains": SortedDomainSet.from_list_bytes(found["domains"]), "urls": found["urls"]}
