"""Reading one mix source: pipeline outputs -> filtered texts -> a token cache (one sequence per document).

Why a cache: blending needs every source's exact token count (to plan epochs) and random access to its
documents (to shuffle and repeat them) - a Megatron-format cache gives both through a memory map.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvee.mixer.config import MixConfigError, SourceConfig
from cuvee.mixer.where import failed_key, missing_keys

log = logging.getLogger(__name__)


@dataclass
class SourceScan:
    """Counters for one source: every document read is kept or counted under a reason."""

    name: str
    files: list[dict] = field(default_factory=list)
    read: int = 0
    kept: int = 0
    chars: int = 0
    tokens: int = 0  # including one EOS per kept document
    dropped: dict[str, int] = field(default_factory=dict)
    meta_keys: set[str] = field(default_factory=set)  # metadata keys seen, to name a mistyped where key
    weighted_tokens: int | None = None  # a rehydrated source: sum of weight x tokens (one pass)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    @property
    def available_tokens(self) -> int:
        """Tokens of one pass over the source: rehydrated when it is, else its tokens."""
        return self.tokens if self.weighted_tokens is None else self.weighted_tokens

    def as_dict(self) -> dict:
        return {"read": self.read, "kept": self.kept, "dropped": dict(sorted(self.dropped.items())), "chars": self.chars}


REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def resolve_files(src: SourceConfig) -> list[str]:
    """The source's files, sorted; a missing path is a config error naming the source.

    Relative paths are taken from the working directory; one that does not exist there is retried from the
    repository root, so the bundled examples (data/curated, runs/...) work from any directory of a checkout.
    """
    from cuvee.pipeline.io import expand_paths

    files: list[str] = []
    for p in src.paths:
        try:
            files.extend(expand_paths([p]))
        except FileNotFoundError as e:
            alt = REPO_ROOT / p
            if Path(p).is_absolute() or alt == Path(p).resolve():
                raise MixConfigError(f"source '{src.name}': {e} (paths: {src.paths})") from None
            try:
                files.extend(expand_paths([str(alt)]))
            except FileNotFoundError:
                raise MixConfigError(f"source '{src.name}': {e} (paths: {src.paths})") from None
    return files


def file_digest(path: str) -> dict:
    from cuvee.mixer.tokenizers import sha256_file

    return {"path": path, "bytes": os.path.getsize(path), "sha256": sha256_file(path)}


def select_documents(src: SourceConfig, files: list[str], scan: SourceScan) -> Iterator[tuple[str, int, int, str, int]]:
    """``(text, file index, row, id, cluster size)`` of the documents that pass ``where`` and ``min_chars`` (and,
    for a rehydrated source, carry a usable cluster size; else 0); the rest are counted in ``scan.dropped``.

    ``row`` is the document's position among its file's records (cuvee.mixer.docindex: the key into the run)."""
    from cuvee.mixer.rehydrate import cluster_size
    from cuvee.pipeline.io import iter_documents

    key = src.rehydrate.key if src.rehydrate else None
    for f, path in enumerate(files):
        for row, doc in enumerate(iter_documents([path])):
            scan.read += 1
            meta = doc.metadata or {}
            scan.meta_keys.update(meta)
            failed = failed_key(src.where, meta)
            if failed is not None:
                scan.drop(f"where_{failed}")
                continue
            text = doc.text if src.text_key == "text" else meta.get(src.text_key)
            if not isinstance(text, str):
                scan.drop(f"no_{src.text_key}")
                continue
            if len(text) < max(1, src.min_chars):
                scan.drop("too_short")
                continue
            size = 0
            if key is not None:
                size = cluster_size(meta, key)
                if isinstance(size, str):
                    scan.drop(size)
                    continue
            scan.kept += 1
            scan.chars += len(text)
            yield text, f, row, doc.id, size


def select_texts(src: SourceConfig, files: list[str], scan: SourceScan) -> Iterator[str]:
    """The texts of :func:`select_documents` (tokenizer training, rephrase checks)."""
    return (d[0] for d in select_documents(src, files, scan))


def where_hint(src: SourceConfig, scan: SourceScan) -> str:
    """For an empty source: the ``where`` keys no document has, with the closest key documents do have."""
    keys = {**src.where, **({src.rehydrate.key: None} if src.rehydrate else {})}
    notes = missing_keys(keys, scan.meta_keys)
    return f"; {notes}" if notes else ""


def _batched(it: Iterator[str], n: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for x in it:
        batch.append(x)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def tokenize_texts(texts, tokenizer, writer, batch_size: int = 512) -> int:
    """Encode texts in batches (multithreaded backend) and append each document + EOS to ``writer``."""
    for batch in _batched(iter(texts), batch_size):
        writer.add_documents(tokenizer.encode_batch_numpy(batch), eos_id=tokenizer.eos_id)
    return writer.tokens


def tokenize_source(src: SourceConfig, files: list[str], tokenizer, cache_prefix: Path, dtype, batch_size: int) -> SourceScan:
    """Tokenize every selected document (plus EOS) into a Megatron-format cache at ``cache_prefix``, with each
    document's key (file, row, id: ``<cache_prefix>.documents`` / ``.ids``, cuvee.mixer.docindex) and, for a
    rehydrated source, its cluster size (``<cache_prefix>.cluster``)."""
    from cuvee.kernel.atomic import write_bytes
    from cuvee.mixer.docindex import TableWriter, own_id
    from cuvee.mixer.indexed import IndexedDataset, IndexedDatasetWriter
    from cuvee.mixer.rehydrate import SIZE_SUFFIX, doc_weights

    scan = SourceScan(src.name, files=[file_digest(f) for f in files])
    sizes = array("Q")
    keys: tuple[list, list, list] = ([], [], [])

    def texts(table: TableWriter) -> Iterator[str]:
        for text, f, row, doc_id, size in select_documents(src, files, scan):
            keys[0].append(f)
            keys[1].append(row)
            keys[2].append(own_id(doc_id, files[f], row))
            sizes.append(size)
            if len(keys[0]) >= 65536:
                table.add_many(*keys)
                for k in keys:
                    k.clear()
            yield text
        table.add_many(*keys)

    with IndexedDatasetWriter(cache_prefix, dtype=dtype) as writer, TableWriter(cache_prefix) as table:
        scan.tokens = tokenize_texts(texts(table), tokenizer, writer, batch_size)
    if scan.kept == 0:
        raise MixConfigError(
            f"source '{src.name}': no documents left after filtering ({scan.read} read, dropped {scan.dropped}); "
            f"check paths {src.paths}, where and text_key '{src.text_key}'{where_hint(src, scan)}"
        )
    if src.rehydrate is not None:
        write_bytes(f"{cache_prefix}{SIZE_SUFFIX}", np.asarray(sizes, dtype="<u8").tobytes())
        lengths = IndexedDataset(cache_prefix).sequence_lengths.astype(np.float64)
        scan.weighted_tokens = round(float((doc_weights(src.rehydrate.weigher(), sizes)[1] * lengths).sum()))
    log.info("source %s: %d/%d documents, %d tokens", src.name, scan.kept, scan.read, scan.tokens)
    return scan


def estimate_source(src: SourceConfig, files: list[str], tokenizer, sample_chars: int = 200_000) -> tuple[SourceScan, float]:
    """Counts and characters without tokenizing the source: tokens are estimated from a chars/token ratio
    measured on a systematic sample of at most ~``sample_chars`` characters spread over the whole source
    (every stride-th document; the stride doubles, dropping every other sampled document, when the budget fills)."""
    scan = SourceScan(src.name, files=[{"path": f, "bytes": os.path.getsize(f)} for f in files])
    sample: list[str] = []
    sampled = 0
    stride = 1
    per_doc = 2_000
    weigher = src.rehydrate.weigher() if src.rehydrate else None
    weighted_chars = weighted_docs = 0.0
    for text, _, _, _, size in select_documents(src, files, scan):
        if weigher is not None:
            w = weigher.weight(size)
            weighted_chars += w * len(text)
            weighted_docs += w
        if (scan.kept - 1) % stride == 0:
            sample.append(text[:per_doc])
            sampled += len(sample[-1])
            if sampled > sample_chars:
                sample = sample[::2]
                sampled = sum(len(t) for t in sample)
                stride *= 2
    if scan.kept == 0:
        raise MixConfigError(f"source '{src.name}': no documents left after filtering ({scan.read} read, dropped "
                             f"{scan.dropped}){where_hint(src, scan)}")
    sample_tokens = sum(len(x) for x in tokenizer.encode_batch_numpy(sample))
    chars_per_token = sampled / max(1, sample_tokens)
    scan.tokens = round(scan.chars / chars_per_token) + scan.kept  # + one EOS per document
    if weigher is not None:
        scan.weighted_tokens = round(weighted_chars / chars_per_token + weighted_docs)
    return scan, chars_per_token
