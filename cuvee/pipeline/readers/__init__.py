"""cuvee's input readers: every record read is a document or a named, counted drop.

One module per concern:

- :mod:`.listing`   which files an input names (shared by the readers' sharding and the run's plan)
- :mod:`.shard`     the one per-file loop (``files_read`` / ``files_failed`` / ``files_limited``)
- :mod:`.stream`    decompressed bytes of an archive, with the gzip member tracker
- :mod:`.framing`   WARC / ARC record framing and typed header parsing
- :mod:`.payload`   HTTP responses and Common Crawl metadata inside a record
- :mod:`.archives`  the WARC / WET / ARC reader (``make_reader``)
- :mod:`.urls`      a Common Crawl snapshot sample (a list of archive URLs)
- :mod:`.tables`    JSONL and Parquet readers

The names below are the package's public API.
"""

from cuvee.pipeline.readers.archives import (
           FORMATS,
           RAW_PAYLOAD_ID,
           CommonCrawlReader,
           detect_format,
           make_reader,
)
from cuvee.pipeline.readers.listing import (
           ARCHIVE_SUFFIXES,
           plan_input_files,
           split_input_path,
)
from cuvee.pipeline.readers.tables import PlannedJsonlReader, PlannedParquetReader
from cuvee.pipeline.readers.urls import UrlListReader

__all__ = ["ARCHIVE_SUFFIXES", "FORMATS", "RAW_PAYLOAD_ID", "CommonCrawlReader", "PlannedJsonlReader",
           "PlannedParquetReader", "UrlListReader", "detect_format", "make_reader", "plan_input_files",
           "split_input_path"]
