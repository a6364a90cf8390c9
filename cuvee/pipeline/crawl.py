"""Common Crawl as users meet it: a snapshot name, its ``*.paths.gz`` listing, and a sample of its files.

``input: {common_crawl: {snapshot: CC-MAIN-2024-22, kind: warc, files: 4, seed: 0}}`` fetches
``crawl-data/CC-MAIN-2024-22/warc.paths.gz`` from ``https://data.commoncrawl.org/`` (or
``s3://commoncrawl/``, or any mirror given as ``base_url``; or reads a local ``paths_file``), picks a
deterministic sample of it and expands it to full URLs. The chosen URLs are recorded in the run's plan
(``cuvee/pipeline/plan.py``), so a rerun whose listing or sample differs is refused before any work.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import Field, field_validator

from cuvee.kernel.config import StrictModel
from cuvee.kernel.errors import UserError
from cuvee.pipeline.remote import RetryPolicy

_SECRET_WORDS = ("key", "secret", "token", "password", "passwd", "credential")
DEFAULT_BASES = {"https": "https://data.commoncrawl.org/", "s3": "s3://commoncrawl/"}


class CommonCrawlInput(StrictModel):

    snapshot: str = Field(pattern=r"^CC-MAIN-\d{4}-\d{2}$", description="crawl name, e.g. CC-MAIN-2024-22")
    kind: Literal["warc", "wet"] = Field("warc", description="which listing: warc (HTML responses) or wet (CC's text)")
    files: int | float = Field(description="how many files of the listing: an int N >= 1, or a fraction 0 < f <= 1")
    seed: int = Field(0, description="sample seed: the same seed and listing give the same files")
    source: Literal["https", "s3"] = Field("https", description="https://data.commoncrawl.org/ or s3://commoncrawl/")
    base_url: str | None = Field(None, description="a mirror or test server instead of the source's default base")
    paths_file: str | None = Field(None, description="a local *.paths(.gz) listing instead of fetching the snapshot's")
    storage_options: dict[str, Any] = Field(default_factory=dict,
                                            description="fsspec options, e.g. {endpoint_url: ..., anon: true} for s3")

    @field_validator("files")
    @classmethod
    def _files(cls, v):
        if isinstance(v, bool):
            raise ValueError("files must be a number")
        if isinstance(v, int) and v < 1:
            raise ValueError("an int files must be >= 1 (or give a fraction 0 < f <= 1)")
        if isinstance(v, float) and not 0 < v <= 1:
            raise ValueError("a fractional files must be in (0, 1]")
        return v

    @field_validator("storage_options")
    @classmethod
    def _no_credentials(cls, v):
        def walk(d, where):
            for k, x in d.items():
                if any(w in str(k).lower() for w in _SECRET_WORDS):
                    raise ValueError(f"{where}{k}: credentials do not belong in a recipe (it is copied into the run "
                                     f"folder, its stats and the dataset card); use the environment "
                                     f"(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE) instead")
                if isinstance(x, dict):
                    walk(x, f"{where}{k}.")
        walk(v, "")
        return v

    @field_validator("base_url")
    @classmethod
    def _base(cls, v):
        if v is None:
            return v
        if "://" not in v:
            raise ValueError("base_url must be a URL (https://..., http://..., s3://...)")
        return v if v.endswith("/") else v + "/"

    def base(self) -> str:
        return self.base_url or DEFAULT_BASES[self.source]

    def listing_url(self) -> str:
        return self.paths_file or f"{self.base()}crawl-data/{self.snapshot}/{self.kind}.paths.gz"


@dataclass(frozen=True)
class SnapshotSample:
    listing: str  # where the listing was read
    listing_sha256: str  # of its decompressed text: a changed listing changes the plan
    total: int  # files in the listing
    urls: tuple[str, ...]  # the sample, full URLs, in listing order

    def describe(self, cfg: CommonCrawlInput) -> str:
        return f"{cfg.snapshot} {cfg.kind}: {len(self.urls)} of {self.total} files, seed {cfg.seed} ({self.listing})"


class ListingError(UserError, ValueError):
    """The snapshot's listing cannot be had (unknown snapshot, unreachable base, empty listing)."""


def _read_listing(cfg: CommonCrawlInput, policy: RetryPolicy, timeout_s: float | None) -> bytes:
    import fsspec

    from cuvee.pipeline.remote import timeout_options

    url = cfg.listing_url()
    opts = timeout_options(url, timeout_s, cfg.storage_options if "://" in url else {})

    def fetch() -> bytes:
        with fsspec.open(url, "rb", **opts) as f:
            return f.read()

    try:
        data = policy.call(fetch)
    except FileNotFoundError:
        unreachable = _unreachable(url)
        if unreachable:
            raise ListingError(f"common_crawl: cannot reach {url} ({unreachable}); check the network, or use "
                               f"base_url (a mirror) or paths_file (a listing on disk)") from None
        raise ListingError(f"common_crawl: no listing at {url} (unknown snapshot {cfg.snapshot!r} or kind "
                           f"{cfg.kind!r}? snapshot names look like CC-MAIN-2024-22)") from None
    except Exception as e:  # noqa: BLE001 - any other failure is reported in one line, before work
        raise ListingError(f"common_crawl: cannot read the listing {url}: {type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ListingError(f"common_crawl: listing {url} is not a valid gzip file ({e})") from None
    return data


def _unreachable(url: str) -> str | None:
    """Why an HTTP(S) server cannot be reached at all (fsspec reports that as a missing file), else None."""
    if not url.startswith(("http://", "https://")):
        return None
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        urllib.request.urlopen(urllib.request.Request(f"{parts.scheme}://{parts.netloc}/", method="HEAD"), timeout=15)
    except urllib.error.HTTPError:
        return None  # the server answered: the listing itself is missing
    except (urllib.error.URLError, OSError) as e:
        return f"{type(getattr(e, 'reason', e)).__name__}: {getattr(e, 'reason', e)}"
    return None


def sample_indices(total: int, files: int | float, seed: int) -> list[int]:
    """Deterministic sample of ``files`` (N, or a fraction) of ``total`` listing entries, in listing order."""
    n = files if isinstance(files, int) else max(1, round(files * total))
    if n > total:
        raise ListingError(f"common_crawl: files: {files} asks for more files than the listing has ({total})")
    if n == total:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), n))


def is_relative_crawl_path(entry: str) -> bool:
    """True for a listing entry that stays below the base once a server decodes it: no scheme, no leading slash,
    no ``..`` segment, no control character, after percent-decoding until nothing changes (``%2e%2e``,
    ``%252e%252e``) and with ``\\`` read as ``/`` (as some servers and S3 gateways do)."""
    decoded = entry
    for _ in range(8):
        step = unquote(decoded)
        if step == decoded:
            break
        decoded = step
    else:
        return False  # still changing after 8 rounds: nothing a real listing holds
    decoded = decoded.replace("\\", "/")
    if "://" in decoded or decoded.startswith("/") or any(ord(c) < 32 or c == "\x7f" for c in decoded):
        return False
    return ".." not in decoded.split("/")


_CACHE: dict[str, SnapshotSample] = {}


def expand(cfg: CommonCrawlInput, policy: RetryPolicy | None = None, timeout_s: float | None = None) -> SnapshotSample:
    """The snapshot's listing, sampled and expanded to URLs (fetched once per process and config); ``timeout_s``
    bounds each connect and read of the listing."""
    key = cfg.model_dump_json()
    if key in _CACHE:
        return _CACHE[key]
    raw = _read_listing(cfg, policy or RetryPolicy(), timeout_s)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ListingError(f"common_crawl: listing {cfg.listing_url()} is not UTF-8 text") from None
    paths = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not paths:
        raise ListingError(f"common_crawl: listing {cfg.listing_url()} is empty")
    bad = [p for p in paths if not is_relative_crawl_path(p)]
    if bad:
        raise ListingError(f"common_crawl: listing {cfg.listing_url()} holds {len(bad)} entries that are not "
                           f"relative crawl paths, e.g. {bad[0][:120]!r}")
    base = cfg.base()
    urls = tuple(base + paths[i] for i in sample_indices(len(paths), cfg.files, cfg.seed))
    sample = SnapshotSample(cfg.listing_url(), hashlib.sha256(raw).hexdigest(), len(paths), urls)
    _CACHE[key] = sample
    return sample
