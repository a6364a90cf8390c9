"""Line dedup as in CCNet and Llama 3: within buckets of N documents, remove every line whose normalised
form occurs in at least k documents of the bucket (boilerplate: menus, cookie notices, footers).

Buckets are consecutive runs of N documents in (rank, position) order, so a bucket spans as many
ranks as it needs. Pass 1 (recording) normalises and hashes every line once and stores two things per
rank: the hashes to count (each distinct line once per document unless ``count_per_document`` is
false) and the hash of every line in order (8 bytes per line). Normalising and hashing is one compiled
loop per batch (:mod:`cuvee.dedup.native_lines`), equal line by line to ``normalize_line`` + hash. The phase counts the former per bucket
with the partitioned spill (memory within ``memory_budget_mb``) and writes the sorted hashes that
reach k; the filter looks up the stored per-line hashes (no second normalisation) and removes those
lines. Documents left empty, or with fewer than ``min_words`` words after a removal, are dropped with
their reason.

With ``one_pass: true`` (one task) the rule is decided as documents stream by, Dolma-style: a line is removed
from a document once k-1 *earlier* documents of its bucket held it (so the first k-1 copies stay, which the
barrier would remove too; with ``count_per_document: false``, once it occurred k-1 times before), counted in a
compiled in-memory table (:mod:`cuvee.dedup.line_counts`). It reads the input once and writes no line-hash
files; memory grows with the distinct lines of a bucket.

Provenance: every document the filter sees gets ``line_lines_removed`` (0 when none) and, from the barrier,
``line_cluster_size``: the largest count among its removed lines (documents of its bucket holding the line, or its
occurrences without ``count_per_document``), the size of the largest line cluster it was cut from; 1 when no line
was removed, as a document alone in the other dedups' clusters. A line removed from every copy has no keeper. ``one_pass`` decides on counts so far, not a cluster's size:
it writes ``line_lines_removed`` only.
"""

from __future__ import annotations

from itertools import compress, islice
from pathlib import Path

import numba as nb
import numpy as np
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field

from cuvee.dedup.files import AtomicWriter, PositionTracker, load_array, rank_file
from cuvee.dedup.line_counts import LineCountTable
from cuvee.dedup.native_lines import line_hashes_of
from cuvee.dedup.spill import chunk_records, key_partitions
from cuvee.dedup.steps import RecordingStep, check_one_pass_recipe, check_one_pass_run, lean_filter_run
from cuvee.dedup.text import WORD_RE
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

HASH_RECORD = np.dtype([("h", "<u8")])
REMOVED_KEY, CLUSTER_KEY = "line_lines_removed", "line_cluster_size"


class LineDedupParams(StageParams):
    bucket_size: int = Field(30_000_000, ge=1, description="documents per bucket (Llama 3: 30M)")
    min_occurrences: int = Field(6, ge=2, description="a line seen in this many documents of a bucket is removed")
    count_per_document: bool = Field(True, description="count a line once per document (a list repeating a line "
                                                       "inside one page does not make it boilerplate)")
    min_words: int = Field(5, ge=0, description="after removing lines, drop documents with fewer words")
    memory_budget_mb: int = Field(1024, ge=1, description="per phase task; larger buckets spill to disk "
                                                         "(one_pass: the most its line counts may take)")
    one_pass: bool = Field(False, description="executor.tasks 1 only: decide while reading, on what was seen so "
                                              "far: a line is removed once k-1 earlier documents (k: min_occurrences) of the bucket "
                                              "held it (or, count_per_document false, once it occurred k-1 times "
                                              "before; with k=2 that is Dolma's paragraph rule, the first copy "
                                              "stays); counts in memory, ~40 bytes per distinct line")

    def metadata_fields(self) -> dict[str, str]:
        return {REMOVED_KEY: "int64"} | ({} if self.one_pass else {CLUSTER_KEY: "int64"})


def line_hashes(text: str) -> np.ndarray:
    """Hash of the normalised form of each line of ``text`` (split on "\\n"); 0 marks lines that
    normalise to nothing (never removed)."""
    return line_hashes_of([text])[0]


def distinct_per_document(hashes: np.ndarray, n_lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each document's distinct non-zero hashes, sorted, concatenated in document order; count per document).

    One compiled pass sorting each document's few dozen hashes on its own: a lexsort of the whole batch by
    (document, hash) cost about 4 us a document."""
    out = np.empty(len(hashes), dtype=np.uint64)
    counts = np.empty(len(n_lines), dtype=np.uint32)
    used = _distinct_per_document(hashes.astype(np.uint64, copy=False), n_lines.astype(np.int64), out, counts)
    return out[:used], counts


@nb.njit(cache=True, nogil=True)
def _distinct_per_document(hashes, n_lines, out, counts):
    j = 0
    start = 0
    for d in range(len(n_lines)):
        seg = np.sort(hashes[start:start + n_lines[d]])
        start += n_lines[d]
        c = 0
        for x in seg:
            if x != 0 and (c == 0 or x != out[j - 1]):
                out[j] = x
                j += 1
                c += 1
        counts[d] = c
    return j


class LineHashRecorder(RecordingStep):
    name = "📏 line hashes"

    def __init__(self, folder, count_per_document: bool):
        super().__init__(folder)
        self.count_per_document = count_per_document

    def open(self, rank: int) -> None:
        self.hashes = AtomicWriter(rank_file(self.folder / "lines", rank, "hash.u64"))
        self.counts = AtomicWriter(rank_file(self.folder / "lines", rank, "count.u32"))
        self.all_lines = AtomicWriter(rank_file(self.folder / "lines", rank, "all.u64"))
        self.n_lines = AtomicWriter(rank_file(self.folder / "lines", rank, "nlines.u32"))

    def record(self, batch: list) -> None:
        if not batch:
            return
        every, n_lines = line_hashes_of([doc.text for doc in batch])
        if self.count_per_document:
            counted, counts = distinct_per_document(every, n_lines)
        else:
            counted = every[every != 0]
            doc = np.repeat(np.arange(len(batch)), n_lines)
            counts = np.bincount(doc[every != 0], minlength=len(batch)).astype(np.uint32)
        self.counts.write(counts)
        self.n_lines.write(n_lines)
        self.hashes.write(counted)
        self.all_lines.write(every)

    def close(self, ok: bool) -> None:
        for w in (self.hashes, self.counts, self.all_lines, self.n_lines):
            w.close() if ok else w.abort()


def rank_doc_counts(folder: Path, source_tasks: int) -> np.ndarray:
    files = [rank_file(folder / "lines", r, "count.u32") for r in range(source_tasks)]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"line dedup: line hashes missing (recording tasks not finished?): {missing[:3]}")
    return np.array([f.stat().st_size // 4 for f in files], dtype=np.int64)


class CountFrequentLines(PipelineStep):
    """Phase: for each bucket of this task, the sorted hashes of lines seen in >= k documents."""

    type = "🫂 - DEDUP"
    name = "📏 count lines"

    def __init__(self, folder, source_tasks: int, bucket_size: int, min_occurrences: int, memory_budget_mb: int):
        super().__init__()
        self.folder = Path(folder)
        self.source_tasks = source_tasks
        self.bucket_size = bucket_size
        self.k = min_occurrences
        self.budget = memory_budget_mb * 2**20

    def _bucket_chunks(self, b: int, docs_per_rank: np.ndarray):
        """Line-hash chunks of the documents in global range [b*N, (b+1)*N)."""
        starts = np.concatenate([[0], np.cumsum(docs_per_rank)])
        lo, hi = b * self.bucket_size, (b + 1) * self.bucket_size
        step = chunk_records(self.budget, 8)
        pieces = []
        for r in range(self.source_tasks):
            a, z = max(lo, starts[r]) - starts[r], min(hi, starts[r + 1]) - starts[r]
            if z <= a:
                continue
            counts = load_array(rank_file(self.folder / "lines", r, "count.u32"), np.uint32, mmap=True)
            first = int(np.sum(counts[:a], dtype=np.int64))
            n = int(np.sum(counts[a:z], dtype=np.int64))
            pieces.append((r, first, n))

        def chunks():
            for r, first, n in pieces:
                mm = load_array(rank_file(self.folder / "lines", r, "hash.u64"), HASH_RECORD, mmap=True)
                for i in range(first, first + n, step):
                    yield np.array(mm[i:min(i + step, first + n)])

        return chunks, sum(n for _, _, n in pieces)

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        docs_per_rank = rank_doc_counts(self.folder, self.source_tasks)
        n_buckets = max(1, -(-int(docs_per_rank.sum()) // self.bucket_size))
        with self.track_time():
            for b in range(rank, n_buckets, world_size):
                chunks, total = self._bucket_chunks(b, docs_per_rank)
                out = AtomicWriter(self.folder / "frequent" / f"{b:05d}.u64")
                sizes = AtomicWriter(self.folder / "frequent" / f"{b:05d}.count.u32")  # each line's cluster size
                try:
                    for part in key_partitions(chunks, HASH_RECORD, "h", total, self.budget, self.folder,
                                               stats=lambda k, v: self.stat_update(k, value=v)):
                        uniq, counts = np.unique(part["h"], return_counts=True)
                        frequent = uniq[counts >= self.k]
                        out.write(frequent)
                        sizes.write(np.minimum(counts[counts >= self.k], 2**32 - 1).astype(np.uint32))
                        self.stat_update("line_hashes", value=len(part))
                        self.stat_update("distinct_lines", value=len(uniq))
                        self.stat_update("frequent_lines", value=len(frequent))
                except BaseException:
                    out.abort()
                    sizes.abort()
                    raise
                out.close()
                sizes.close()
                self.stat_update("buckets")
        return
        yield


class LineDedupFilter(BaseFilter):
    """Removes the frequent lines of each document's bucket; drops documents left empty or too short."""

    name = "📏 line dedup"
    replays_exactly = True  # the phases' line counts decide: the same on every read

    def __init__(self, folder, source_tasks: int, bucket_size: int, min_words: int, exclusion_writer=None):
        super().__init__(exclusion_writer=exclusion_writer)
        self.folder = Path(folder)
        self.source_tasks = source_tasks
        self.bucket_size = bucket_size
        self.min_words = min_words

    def run(self, data, rank: int = 0, world_size: int = 1):
        docs_per_rank = rank_doc_counts(self.folder, self.source_tasks)
        self._offset = int(docs_per_rank[:rank].sum())
        self._tracker = PositionTracker(self.folder / "ids", rank, self.name)
        self._bucket = -1
        self._frequent = np.zeros(0, dtype=np.uint64)
        # every line's hash, stored by the recording pass; a cursor walks it as positions advance
        self._all = load_array(rank_file(self.folder / "lines", rank, "all.u64"), np.uint64, mmap=True)
        self._n_lines = load_array(rank_file(self.folder / "lines", rank, "nlines.u32"), np.uint32)
        self._line_start = np.concatenate([[0], np.cumsum(self._n_lines, dtype=np.int64)])
        self._chunk_start = self._chunk_end = 0
        if self.exclusion_writer:
            yield from super().run(data, rank, world_size)
        else:  # BaseFilter's counters once per batch, not once per document (~4 us a document)
            yield from lean_filter_run(self, data, self._decide_batch)

    CHUNK_DOCS = 4096

    def _look_up_chunk(self, pos: int) -> None:
        """Which lines of documents ``pos`` .. (up to CHUNK_DOCS, within pos's bucket) are frequent, looked up in
        one vectorised pass instead of a handful of small numpy calls per document."""
        bucket = (self._offset + pos) // self.bucket_size
        if bucket != self._bucket:
            path = self.folder / "frequent" / f"{bucket:05d}.u64"
            if not path.exists():
                raise FileNotFoundError(f"line dedup: {path} missing (count phase not finished?)")
            self._frequent = load_array(path, np.uint64, mmap=True)
            self._counts = load_array(path.with_name(f"{bucket:05d}.count.u32"), np.uint32, mmap=True)
            self._bucket = bucket
        end = min(pos + self.CHUNK_DOCS, (bucket + 1) * self.bucket_size - self._offset, len(self._n_lines))
        first, last = self._line_start[pos], self._line_start[end]
        h = self._all[first:last]
        if len(self._frequent):
            idx = np.minimum(np.searchsorted(self._frequent, h), len(self._frequent) - 1)
            hit = (self._frequent[idx] == h) & (h != 0)
            sizes = np.append(np.where(hit, self._counts[idx], 0), 0)  # a trailing 0: no segment starts past the end
        else:
            hit = np.zeros(len(h), dtype=bool)
            sizes = np.zeros(len(h) + 1, dtype=np.uint32)
        hits_before = np.concatenate([[0], np.cumsum(hit)])
        starts = self._line_start[pos:end + 1] - first
        self._chunk_hits = (hits_before[starts[1:]] - hits_before[starts[:-1]]).tolist()
        # per document, the largest cluster among its removed lines (read only for documents with a hit)
        self._chunk_sizes = np.maximum.reduceat(sizes, starts[:-1]).tolist() if end > pos else []
        self._chunk_keep, self._chunk_lines = (~hit).tolist(), starts.tolist()  # one list per chunk, sliced per document
        self._chunk_start, self._chunk_end = pos, end

    def _decide_batch(self, batch: list) -> list:
        """One verdict per document (True, or (False, reason)); the line counters updated once per batch."""
        start = self._tracker.take(batch)
        return verdicts_counting_lines(self, [self._decide(pos, doc) for pos, doc in enumerate(batch, start)])

    def filter(self, doc):  # the exclusion-writer path: one document at a time
        return self._decide_batch([doc])[0]

    def _decide(self, pos: int, doc) -> tuple:
        """(verdict, lines removed, characters removed) for ``doc``, at position ``pos``."""
        if not self._chunk_start <= pos < self._chunk_end:
            self._look_up_chunk(pos)
        i = pos - self._chunk_start
        if not self._chunk_hits[i]:
            doc.metadata[REMOVED_KEY], doc.metadata[CLUSTER_KEY] = 0, 1
            return True, 0, 0
        doc.metadata[REMOVED_KEY], doc.metadata[CLUSTER_KEY] = self._chunk_hits[i], self._chunk_sizes[i]
        keep = self._chunk_keep[self._chunk_lines[i]:self._chunk_lines[i + 1]]
        lines = doc.text.split("\n")
        if len(lines) != len(keep):
            raise RuntimeError(f"line dedup: document {doc.id!r} has {len(lines)} lines, {len(keep)} were recorded "
                               "(its text changed between the recording pass and the filter)")
        return remove_lines(doc, lines, keep, self._chunk_hits[i], self.min_words)


def verdicts_counting_lines(step: PipelineStep, results: list) -> list:
    """The verdicts of ``results`` ((verdict, lines removed, characters removed) per document), with the batch's
    ``lines_removed``, ``chars_removed`` and ``docs_with_lines_removed`` added to ``step``'s counters at once."""
    removed = chars = touched = 0
    for _, r, c in results:
        if r:
            removed, chars, touched = removed + r, chars + c, touched + 1
    if touched:
        step.stat_update("lines_removed", value=removed)
        step.stat_update("chars_removed", value=chars)
        step.stat_update("docs_with_lines_removed", value=touched)
    return [v for v, _, _ in results]


def remove_lines(doc, lines: list[str], keep: list[bool], removed: int, min_words: int):
    """Removes from ``doc.text`` (already split into ``lines``) the ``removed`` lines whose ``keep`` flag is False.
    Returns (True, or (False, reason) for a document left empty or under ``min_words`` words; lines removed;
    characters removed, every removed line with its newline)."""
    kept = "\n".join(compress(lines, keep))
    chars = len(doc.text) - len(kept) if removed < len(keep) else len(doc.text) + 1
    text = kept.strip()
    if not text:
        return (False, "empty_after_line_dedup"), removed, chars
    if min_words and sum(1 for _ in islice(WORD_RE.finditer(text), min_words)) < min_words:
        return (False, "too_short_after_line_dedup"), removed, chars
    doc.text = text
    return True, removed, chars


class OnePassLineDedup(BaseFilter):
    """One task: removes a line from a document once k-1 earlier documents of its bucket held it (or it occurred
    k-1 times before, without ``count_per_document``), decided as documents stream by (no line-hash files, no
    count phase, no second read of the input).

    Not the barrier's rule: the barrier removes a frequent line from *every* document holding it, the first
    ones included, since it counts the whole bucket first; here the first k-1 documents keep their copies.
    Deterministic for a given input stream, so the compiler may replay it after a later barrier."""

    name = "📏 line dedup (one pass)"
    replays_exactly = True
    BATCH = 1024

    def __init__(self, bucket_size: int, min_occurrences: int, count_per_document: bool, min_words: int,
                 memory_budget_mb: int, exclusion_writer=None):
        super().__init__(exclusion_writer=exclusion_writer)
        self.bucket_size = bucket_size
        self.k = min_occurrences
        self.per_document = count_per_document
        self.min_words = min_words
        self.budget_mb = memory_budget_mb

    def run(self, data, rank: int = 0, world_size: int = 1):
        check_one_pass_run("line_dedup", world_size)
        self._table = LineCountTable(self.k - 1, self.per_document, self.budget_mb * 2**20)
        self._pos = self._distinct = 0
        if self.exclusion_writer:
            yield from super().run(data, rank, world_size)
        else:
            yield from lean_filter_run(self, data, self._decide_batch, self.BATCH)
        self.stat_update("distinct_lines", value=self._distinct + self._table.used)  # summed over buckets
        self._table = None

    def _verdicts(self, batch: list) -> list:
        """(verdict, lines removed, characters removed) per document, counted in stream order and per bucket."""
        out = []
        while batch:
            room = self.bucket_size - self._pos % self.bucket_size  # documents left in the current bucket
            part, batch = batch[:room], batch[room:]
            if self._pos and self._pos % self.bucket_size == 0:
                self._distinct += self._table.used
                self._table.clear()
            texts = [d.text for d in part]
            hashes, n_lines = line_hashes_of(texts)
            remove, removed = self._table.decide(hashes, n_lines, self._pos, self.budget_mb)
            self._pos += len(part)
            starts = np.concatenate([[0], np.cumsum(n_lines, dtype=np.int64)]).tolist()
            keep = (~remove).tolist() if removed.any() else []
            for i, (doc, r) in enumerate(zip(part, removed.tolist())):
                doc.metadata[REMOVED_KEY] = r
                if not r:
                    out.append((True, 0, 0))
                    continue
                lines = texts[i].split("\n")
                out.append(remove_lines(doc, lines, keep[starts[i]:starts[i + 1]], r, self.min_words))
        return out

    def _decide_batch(self, batch: list) -> list:
        """One verdict per document (True, or (False, reason)); the line counters updated once per batch."""
        return verdicts_counting_lines(self, self._verdicts(batch))

    def filter(self, doc):  # the exclusion-writer path: one document at a time
        return self._decide_batch([doc])[0]


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) the kernels, as the steps call them."""
    hashes, n_lines = line_hashes_of(["warm up\nwarm up", ""])
    distinct_per_document(hashes, n_lines)
    LineCountTable(1, True, 1 << 20).decide(hashes, n_lines, 0, 1)


@register_stage("line_dedup", LineDedupParams)
def build_line_dedup(p: LineDedupParams, ctx: BuildContext):
    """CCNet / Llama 3 line dedup: remove lines seen in >= k documents of each bucket of N documents."""
    from cuvee.dedup.line_counts import _decide_and_count
    from cuvee.dedup.native_lines import line_hashes_batch
    from cuvee.pipeline.first_use import kernels_before_run

    kernels_before_run(ctx.stage_name, (line_hashes_batch, _distinct_per_document, _decide_and_count), warm_up)
    if p.one_pass:
        check_one_pass_recipe(ctx)
        return [OnePassLineDedup(p.bucket_size, p.min_occurrences, p.count_per_document, p.min_words,
                                 p.memory_budget_mb, ctx.exclusion_writer())]
    folder = ctx.stage_dir()
    return Barrier(
        before=[LineHashRecorder(folder, p.count_per_document)],
        phases=[Phase("line_counts", [CountFrequentLines(folder, ctx.tasks, p.bucket_size, p.min_occurrences,
                                                         p.memory_budget_mb)], tasks=ctx.tasks)],
        after=[LineDedupFilter(folder, ctx.tasks, p.bucket_size, p.min_words, ctx.exclusion_writer())],
    )
