"""The one per-file shard loop every cuvee reader runs: each file of a task's shard is counted exactly once.

Per input file, exactly one of ``files_read`` (read to its end), ``files_failed`` (reading ended at a counted
error: a cut file, an open / I/O error, logged) or ``files_limited`` (``limit`` stopped it, or it was never
opened because ``limit`` was reached earlier). datatrove's own loop pulls one document past ``limit`` and
ends the task at the first unreadable file, so the run's accounting could not balance.
"""

from __future__ import annotations

from datatrove.data import Document, DocumentsPipeline
from datatrove.utils.logging import logger


class FileFailed(Exception):
    """Reading a file ended at an error that is already counted and logged (e.g. a file cut inside a record):
    the documents before it stand, the file is counted as ``files_failed``."""


class ShardLoop:
    """Mixin for datatrove disk readers: ``read_files_shard`` with exact per-file accounting.

    Subclasses say how documents are counted through the three ``_count_*`` hooks (archive readers count
    each record as it is read; table readers count a file's documents when it ends).
    """

    def _count_skipped(self) -> None:
        """A document passed over by ``skip``."""

    def _count_forwarded(self, document: Document) -> None:
        """A document about to be yielded."""

    def _count_file_documents(self, ndocs: int) -> None:
        """A file ended after ``ndocs`` documents were yielded from it."""

    def read_files_shard(self, shard: list[str]) -> DocumentsPipeline:
        yielded = skipped = 0
        for i, filepath in enumerate(shard):
            if self.limit != -1 and yielded >= self.limit:
                self.stat_update("files_limited", value=len(shard) - i)
                break
            self.stat_update("input_files")
            logger.info(f"Reading input file {filepath}, {i + 1}/{len(shard)}")
            failed = limited = False
            ndocs = 0
            gen = self.read_file(filepath)
            try:
                for document in gen:
                    if skipped < self.skip:
                        skipped += 1
                        self._count_skipped()
                        continue
                    ndocs += 1
                    self._count_forwarded(document)
                    yield document
                    yielded += 1
                    if self.limit != -1 and yielded >= self.limit:
                        limited = True
                        break
            except FileFailed:
                failed = True
            except Exception as e:  # noqa: BLE001 - open / I/O errors: the file is counted and logged, the task goes on
                logger.error(f"{filepath}: reading failed ({type(e).__name__}: {e}); file counted as failed")
                failed = True
            finally:
                gen.close()
            self._count_file_documents(ndocs)
            self.stat_update("files_limited" if limited else "files_failed" if failed else "files_read")
