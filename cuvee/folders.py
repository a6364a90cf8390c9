"""Moved to :mod:`cuvee.kernel.workdir` (folders) and :mod:`cuvee.kernel.atomic` (writes); this name stays only
while callers move over."""

from cuvee.kernel.atomic import write_text as atomic_write_text
from cuvee.kernel.workdir import (
    KINDS,
    LOCK,
    MARKER,
    PLAN,
    FolderError,
    FolderLock,
    bind,
    bind_check,
    claim,
    empty_owned,
    fingerprint,
    locked,
    owner,
    remove_owned,
)
from cuvee.kernel.workdir import sweep as clean_stale_tmp

__all__ = ["KINDS", "LOCK", "MARKER", "PLAN", "FolderError", "FolderLock", "atomic_write_text", "bind", "bind_check",
           "claim", "clean_stale_tmp", "empty_owned", "fingerprint", "locked", "owner", "remove_owned"]
