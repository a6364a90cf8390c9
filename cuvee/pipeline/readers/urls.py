"""A Common Crawl snapshot sample: an explicit list of archive URLs, sharded as the run's plan records."""

from __future__ import annotations

from cuvee.pipeline.readers.archives import CommonCrawlReader


class UrlListReader(CommonCrawlReader):
    """Reads an explicit list of archive URLs (a Common Crawl snapshot sample): rank r of W reads
    ``urls[r::W]``, as the run's plan records. Each URL is opened through fsspec (``storage_options``, e.g. an
    S3 endpoint) with the retry policy of :meth:`CommonCrawlReader._open`."""

    name = "🕷 CommonCrawl snapshot sample"

    def __init__(self, urls: list[str], fmt: str = "auto", storage_options: dict | None = None, **kwargs):
        # the data folder is never listed (the URLs are given); "/" keeps datatrove's base class content
        super().__init__("/", fmt=fmt, **kwargs)
        self.urls = list(urls)
        self.storage_options = dict(storage_options or {})

    def _shard(self, rank: int, world_size: int) -> list[str]:
        return self.urls[rank::world_size]

    def _source_path(self, filepath: str) -> str:
        return filepath  # already the URL the plan lists

    def _open(self, filepath: str):
        import fsspec

        from cuvee.pipeline.remote import timeout_options

        opts = timeout_options(filepath, self.timeout_s, self.storage_options if "://" in filepath else {})
        fs, path = fsspec.core.url_to_fs(filepath, **opts)
        return self._retrying(lambda: fs.open(path, "rb"), filepath)
