"""A Common Crawl listing entry that would leave the base once decoded is refused before anything is fetched."""

from __future__ import annotations

import gzip

import pytest

from cuvee.pipeline.crawl import (
    CommonCrawlInput,
    ListingError,
    expand,
    is_relative_crawl_path,
)

GOOD = "crawl-data/CC-MAIN-2024-22/segments/1715971057216.39/warc/CC-MAIN-20240521-00000.warc.gz"


@pytest.mark.parametrize("entry", [
    "crawl-data/%2e%2e/%2e%2e/secret/x.warc.gz",
    "crawl-data/%2E%2E/%2E%2E/secret/x.warc.gz",
    "crawl-data/.%2e/x.warc.gz",
    "crawl-data/%252e%252e/%252e%252e/secret/x.warc.gz",
    "crawl-data%2f..%2f..%2fsecret/x.warc.gz",
    "%2fetc/passwd",
    "crawl-data/..\\..\\secret/x.warc.gz",
    "crawl-data/%2e%2e%5c%2e%2e%5csecret/x.warc.gz",
    "http%3a//evil.example/x.warc.gz",
    "crawl-data/x%00.warc.gz",
])
def test_encoded_traversal_entries_are_refused(tmp_path, entry):
    assert not is_relative_crawl_path(entry)
    listing = tmp_path / "warc.paths.gz"
    listing.write_bytes(gzip.compress(f"{GOOD}\n{entry}\n".encode()))
    cfg = CommonCrawlInput(snapshot="CC-MAIN-2024-22", files=1, paths_file=str(listing),
                           base_url="http://127.0.0.1:9/")
    with pytest.raises(ListingError, match="not relative crawl paths"):
        expand(cfg)


def test_ordinary_entries_pass():
    assert is_relative_crawl_path(GOOD)
    assert is_relative_crawl_path("crawl-data/CC-MAIN-2008-2009/a..b/x.arc.gz")
    assert is_relative_crawl_path("crawl-data/x%20y.warc.gz")
