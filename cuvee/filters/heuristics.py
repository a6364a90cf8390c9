"""FineWeb's heuristic filters as cuvee stages: thin wrappers over datatrove's own filters.

We do not re-implement Gopher / C4 / FineWeb rules: the stages build datatrove's filters with FineWeb's
thresholds (datatrove examples/fineweb.py) exposed as parameters. The exceptions are three ``filter`` loops
rewritten to do less Python work per document, with the rules, their order and thresholds untouched: C4
(:class:`_C4RulesOnePass`), Gopher repetition (:class:`_GopherRepetitionCompiled`, n-grams in
:mod:`cuvee.filters.repetition`) and Gopher quality (:class:`_GopherQualityPerDistinctWord`). Tests hold each
equal to datatrove's own ``filter`` (verdicts, texts, C4's counters) on real pages and edge cases under several
rule settings, so a datatrove upgrade that changes a rule fails a test instead of drifting silently. Two things
are added:

* ``word_tokenizer: fast`` (default) hands datatrove our :class:`~cuvee.filters.words.FastWordTokenizer`
  through its supported hook (a ``WordTokenizer`` instance passed as ``language``), instead of spaCy,
  which is most of the filters' run time; ``spacy`` restores datatrove's behaviour exactly.
* empty documents are dropped as ``empty`` instead of crashing on a division by zero, and the C4
  bad-words lists are read from the LDNOOBW copy in ``cuvee/assets`` instead of being downloaded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4BadWordsFilter,
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS
from datatrove.pipeline.filters.gopher_repetition_filter import find_duplicates
from datatrove.utils.text import PUNCTUATION_SET, split_into_sentences, split_into_words
from pydantic import Field, field_validator

from cuvee.filters.repetition import PageWords
from cuvee.filters.words import make_word_tokenizer
from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

LDNOOBW_DIR = Path(__file__).resolve().parent.parent / "assets" / "url_lists" / "ldnoobw"
# C4 pins the English list at LDNOOBW commit 25e679f; the other languages use HEAD 5faf2ba (as datatrove)
_LDNOOBW_FILES = {"en": "en.c4_commit_25e679f"}

WordTokenizerKind = Literal["fast", "spacy"]


class _EmptyGuard:
    """Mixin: empty or whitespace-only text is dropped as ``empty`` before datatrove's rules divide by 0."""

    def filter(self, doc):
        if not doc.text or not doc.text.strip():
            return False, "empty"
        return super().filter(doc)


class _GopherRepetitionCompiled(GopherRepetitionFilter):
    """datatrove's Gopher repetition rules, same order and verdicts, with the n-gram measures computed by
    :mod:`cuvee.filters.repetition` (no string per n-gram). Tested equal to ``GopherRepetitionFilter.filter``."""

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        text = doc.text
        if not text:
            return False, "empty"
        paragraphs = self.paragraph_exp.split(text.strip())
        paragraphs_duplicates, char_duplicates = find_duplicates(paragraphs)
        if self.dup_para_frac and paragraphs_duplicates / len(paragraphs) > self.dup_para_frac:
            return False, "dup_para_frac"
        if self.dup_para_char_frac and char_duplicates / len(text) > self.dup_para_char_frac:
            return False, "dup_para_char_frac"
        lines = self._line_splitter.split(text)
        line_duplicates, char_duplicates = find_duplicates(lines)
        if self.dup_line_frac and line_duplicates / len(lines) > self.dup_line_frac:
            return False, "dup_line_frac"
        if self.dup_line_char_frac and char_duplicates / len(text) > self.dup_line_char_frac:
            return False, "dup_line_char_frac"
        page = PageWords(split_into_words(text, self.language))
        for n, n_frac in self.top_n_grams:
            top_char_length = page.top_ngram_chars(n)
            if top_char_length is None:
                continue
            if top_char_length / len(text) > n_frac:
                return False, f"top_{n}_gram"
        for n, n_frac in self.dup_n_grams:
            if page.repeated_ngram_chars(n) / len(text) > n_frac:
                return False, f"duplicated_{n}_n_grams"
        return True


class CuveeGopherRepetition(_EmptyGuard, _GopherRepetitionCompiled):
    name = "👯 Gopher Repetition (cuvee)"


_PUNCTUATION_CHARS = "".join(c for c in PUNCTUATION_SET if len(c) == 1)


class _GopherQualityPerDistinctWord(GopherQualityFilter):
    """datatrove's Gopher quality rules, same order and verdicts; the two per-character scans of every word
    ("has a non-punctuation character", "has a letter") are done once per distinct word (a page repeats most
    of its words), the first by ``str.strip`` over the punctuation characters (empty exactly when every
    character is punctuation). Tested equal to ``GopherQualityFilter.filter``."""

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        text = doc.text
        words = split_into_words(text, self.language)
        n_words = len(words)
        distinct = set(words)
        not_symbol = {w: bool(w.strip(_PUNCTUATION_CHARS)) for w in distinct}
        non_symbol_words = [w for w in words if not_symbol[w]]
        n_non_symbol_words_words = len(non_symbol_words)
        if self.min_doc_words and n_non_symbol_words_words < self.min_doc_words:
            return False, "gopher_short_doc"
        if self.max_doc_words and n_non_symbol_words_words > self.max_doc_words:
            return False, "gopher_long_doc"
        avg_n_words = np.mean(np.fromiter(map(len, non_symbol_words), dtype=np.int64, count=n_non_symbol_words_words))
        if self.min_avg_word_length and avg_n_words < self.min_avg_word_length:
            return False, "gopher_below_avg_threshold"
        if self.max_avg_word_length and avg_n_words > self.max_avg_word_length:
            return False, "gopher_above_avg_threshold"
        if self.max_symbol_word_ratio and text.count("#") / n_words > self.max_symbol_word_ratio:
            return False, "gopher_too_many_hashes"
        if self.max_symbol_word_ratio and (text.count("...") + text.count("…")) / n_words > self.max_symbol_word_ratio:
            return False, "gopher_too_many_ellipsis"
        lines = text.splitlines()
        if (
            self.max_bullet_lines_ratio
            and sum(s.lstrip().startswith("•") or s.lstrip().startswith("-") for s in lines) / len(lines)
            > self.max_bullet_lines_ratio
        ):
            return False, "gopher_too_many_bullets"
        if (
            self.max_ellipsis_lines_ratio
            and sum(s.rstrip().endswith("...") or s.rstrip().endswith("…") for s in lines) / len(lines)
            > self.max_ellipsis_lines_ratio
        ):
            return False, "gopher_too_many_end_ellipsis"
        if self.max_non_alpha_words_ratio:
            has_alpha = {w: w.isalpha() or any(c.isalpha() for c in w) for w in distinct}
            if sum(map(has_alpha.__getitem__, words)) / n_words < self.max_non_alpha_words_ratio:
                return False, "gopher_below_alpha_threshold"
        if self.min_stop_words and len(self.stop_words.intersection(distinct)) < self.min_stop_words:
            return False, "gopher_enough_stop_words"
        return True


class CuveeGopherQuality(_EmptyGuard, _GopherQualityPerDistinctWord):
    name = "🥇 Gopher Quality (cuvee)"


def add_unit_counts(step, counts: dict[str, int]) -> None:
    """``k`` calls of ``step.stat_update(key)`` in one step each: k updates of 1 leave datatrove's
    ``MetricStats`` at total = n, mean = min = max = 1, variance 0, which is what is set here."""
    for key, k in counts.items():
        if k:
            m = step.stats[key]
            m.mean = (m.mean * m.n + k) / (m.n + k)
            m.total += k
            m.n += k
            m.min = min(m.min, 1)
            m.max = max(m.max, 1)


_POLICY_RE = re.compile("|".join(map(re.escape, POLICY_SUBSTRINGS)))


class _C4RulesOnePass(C4QualityFilter):
    """datatrove's C4 rules with the same decisions, texts and counters, and less Python work per line
    (they were 2x Dolma's ``c4_v2`` per document): line counters are summed per document instead of one
    ``stat_update`` per line, a line shorter than ``max_word_length`` skips the per-word length scan, the
    citation regex runs only on lines with a ``[``, and sentences are counted only until the page has
    ``min_num_sentences`` (the count is only compared with it). Tested equal to ``C4QualityFilter.filter``
    (texts, verdicts, every counter) on real pages and edge cases with every rule setting."""

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        split_paragraph, language = self.split_paragraph, self.language
        lines = doc.text.splitlines() if split_paragraph else split_into_sentences(doc.text, language)
        max_len, min_words, min_sentences = self.max_word_length, self.min_words_per_line, self.min_num_sentences
        total = too_long = no_punct = too_few = javascript = policy = 0
        num_sentences = 0
        kept: list[str] = []
        verdict: bool | tuple[bool, str] = True
        for line in lines:
            line = line.strip()
            total += 1
            words = line.split()
            if max_len != -1 and len(line) > max_len and any(len(w) > max_len for w in words):
                too_long += 1
                continue
            if self.remove_citations and "[" in line:
                line = CITATION_REGEX.sub("", line)
            if self.filter_no_terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
                no_punct += 1
                continue
            if len(words) < min_words:
                too_few += 1
                continue
            line_l = line.lower()
            if self.filter_lorem_ipsum and "lorem ipsum" in line_l:
                verdict = False, "lorem_ipsum"
                break
            if self.filter_javascript and "javascript" in line_l:
                javascript += 1
                continue
            if self.filter_curly_bracket and "{" in line:
                verdict = False, "curly_bracket"
                break
            if self.filter_policy and _POLICY_RE.search(line_l):
                policy += 1
                continue
            if min_sentences != -1 and num_sentences < min_sentences:
                num_sentences += len(split_into_sentences(line, language)) if split_paragraph else 1
            kept.append(line)
        add_unit_counts(self, {"line-total": total, "line-filter-too_long_word": too_long,
                               "line-filter-no_terminal_punc": no_punct, "line-filter-too_few_words": too_few,
                               "line-filter-javascript": javascript, "line-filter-policy": policy,
                               "line-kept": len(kept)})
        if verdict is not True:
            return verdict
        if num_sentences < min_sentences:
            return False, "too_few_sentences"
        doc.text = ("\n" if split_paragraph else " ").join(kept).strip()
        return True


class CuveeC4Quality(_EmptyGuard, _C4RulesOnePass):
    name = "⛰ C4 Quality (cuvee)"


class CuveeFineWebQuality(_EmptyGuard, FineWebQualityFilter):
    name = "🍷 FineWeb Quality (cuvee)"


class LocalC4BadWords(C4BadWordsFilter):
    """datatrove's C4 bad-words filter reading the LDNOOBW lists shipped in cuvee (never downloads)."""

    name = "⛰ C4 Badwords (local lists)"

    def __init__(self, *args, lists_dir: str | Path = LDNOOBW_DIR, **kwargs):
        super().__init__(*args, **kwargs)
        self.lists_dir = Path(lists_dir)

    def _get_badwords(self, lang: str):
        if lang in self._badwords_regex:
            return self._badwords_regex[lang]
        from datatrove.pipeline.filters.c4_filters import _BADWORDS_ALLOWLIST

        path = self.lists_dir / _LDNOOBW_FILES.get(lang, lang)
        if not path.is_file():
            if self.fail_on_missing_language:
                raise ValueError(f"no bad-words list for language {lang!r} in {self.lists_dir}; "
                                 "set fail_on_missing_language: false to keep such documents unchecked")
            self._badwords_regex[lang] = None
            return None
        words = {w.strip() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}
        for allow in _BADWORDS_ALLOWLIST.values():
            words -= allow
        alternation = "|".join(re.escape(w) for w in sorted(words))
        # same construction as datatrove: no word boundaries for scripts written without spaces
        self._badwords_regex[lang] = (re.compile(alternation) if lang in ("ja", "th", "zh")
                                      else re.compile(rf"(?:\W|^)({alternation})(?:\W|$)"))
        return self._badwords_regex[lang]


# --------------------------------------------------------------------------------------------------
class _WordsParams(StageParams):
    word_tokenizer: WordTokenizerKind = Field("fast", description="fast: cuvee's spaCy-like regex splitter; spacy: datatrove's default")
    language: str = Field("en", description="language of the word tokenizer (spaCy) / stop words")


class GopherRepetitionParams(_WordsParams):
    dup_line_frac: float | None = Field(0.3, ge=0, le=1)
    dup_para_frac: float | None = Field(0.3, ge=0, le=1)
    dup_line_char_frac: float | None = Field(0.2, ge=0, le=1)
    dup_para_char_frac: float | None = Field(0.2, ge=0, le=1)
    top_n_grams: list[tuple[int, float]] = Field(default_factory=lambda: [(2, 0.2), (3, 0.18), (4, 0.16)])
    dup_n_grams: list[tuple[int, float]] = Field(
        default_factory=lambda: [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)])


@register_stage("gopher_repetition", GopherRepetitionParams)
def build_gopher_repetition(p: GopherRepetitionParams, ctx: BuildContext):
    """Gopher repetition rules (Rae et al. 2021, table A1): duplicated lines/paragraphs and n-grams."""
    from cuvee.filters import repetition
    from cuvee.pipeline.first_use import kernels_before_run

    kernels_before_run(ctx.stage_name, repetition.KERNELS, repetition.warm_up)
    return [CuveeGopherRepetition(
        dup_line_frac=p.dup_line_frac, dup_para_frac=p.dup_para_frac, dup_line_char_frac=p.dup_line_char_frac,
        dup_para_char_frac=p.dup_para_char_frac, top_n_grams=tuple(map(tuple, p.top_n_grams)),
        dup_n_grams=tuple(map(tuple, p.dup_n_grams)), language=make_word_tokenizer(p.word_tokenizer, p.language),
        exclusion_writer=ctx.exclusion_writer())]


class GopherQualityParams(_WordsParams):
    min_doc_words: int | None = Field(50, ge=0)
    max_doc_words: int | None = Field(100_000, ge=0)
    min_avg_word_length: float | None = Field(3, ge=0)
    max_avg_word_length: float | None = Field(10, ge=0)
    max_symbol_word_ratio: float | None = Field(0.1, ge=0)
    max_bullet_lines_ratio: float | None = Field(0.9, ge=0, le=1)
    max_ellipsis_lines_ratio: float | None = Field(0.3, ge=0, le=1)
    max_non_alpha_words_ratio: float | None = Field(0.8, ge=0, le=1, description="min share of words with a letter (datatrove's name)")
    min_stop_words: int | None = Field(2, ge=0)
    stop_words: list[str] | None = Field(None, description="default: the, be, to, of, and, that, have, with")

    @field_validator("max_doc_words", "max_avg_word_length")
    @classmethod
    def _max_not_below_min(cls, v, info):
        lo_name = "min_" + info.field_name[4:]
        lo = info.data.get(lo_name)
        if v is not None and lo is not None and v < lo:
            raise ValueError(f"{info.field_name} ({v}) must be at least {lo_name} ({lo})")
        return v


@register_stage("gopher_quality", GopherQualityParams)
def build_gopher_quality(p: GopherQualityParams, ctx: BuildContext):
    """Gopher quality rules (Rae et al. 2021): word counts and lengths, symbol ratios, bullets, stop words."""
    return [CuveeGopherQuality(
        min_doc_words=p.min_doc_words, max_doc_words=p.max_doc_words, min_avg_word_length=p.min_avg_word_length,
        max_avg_word_length=p.max_avg_word_length, max_symbol_word_ratio=p.max_symbol_word_ratio,
        max_bullet_lines_ratio=p.max_bullet_lines_ratio, max_ellipsis_lines_ratio=p.max_ellipsis_lines_ratio,
        max_non_alpha_words_ratio=p.max_non_alpha_words_ratio, min_stop_words=p.min_stop_words,
        stop_words=p.stop_words, language=make_word_tokenizer(p.word_tokenizer, p.language),
        exclusion_writer=ctx.exclusion_writer())]


class C4QualityParams(_WordsParams):
    split_paragraph: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = Field(False, description="FineWeb turns C4's terminal-punctuation line rule off")
    min_num_sentences: int = Field(5, ge=-1)
    min_words_per_line: int = Field(3, ge=-1)
    max_word_length: int = Field(1000, ge=-1)
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


@register_stage("c4_quality", C4QualityParams)
def build_c4_quality(p: C4QualityParams, ctx: BuildContext):
    """C4 rules (Raffel et al. 2020) with FineWeb's setting: drops lines (javascript, policy, short) and pages
    (lorem ipsum, curly brackets, < 5 sentences); rewrites the text to the kept lines."""
    return [CuveeC4Quality(
        split_paragraph=p.split_paragraph, remove_citations=p.remove_citations,
        filter_no_terminal_punct=p.filter_no_terminal_punct, min_num_sentences=p.min_num_sentences,
        min_words_per_line=p.min_words_per_line, max_word_length=p.max_word_length,
        filter_lorem_ipsum=p.filter_lorem_ipsum, filter_javascript=p.filter_javascript,
        filter_curly_bracket=p.filter_curly_bracket, filter_policy=p.filter_policy,
        language=make_word_tokenizer(p.word_tokenizer, p.language),
        exclusion_writer=ctx.exclusion_writer())]


class C4BadWordsParams(StageParams):
    keep_fraction: float = Field(0.0, ge=0, le=1, description="share of bad-word pages kept anyway (C4: 0)")
    default_language: str = Field("en", description="for documents without metadata['language']")
    fail_on_missing_language: bool = Field(False, description="false: pages in languages without a list are kept and counted")
    seed: int | None = None


@register_stage("c4_badwords", C4BadWordsParams)
def build_c4_badwords(p: C4BadWordsParams, ctx: BuildContext):
    """C4's bad-words page filter with the LDNOOBW lists bundled in cuvee (English at C4's pinned commit)."""
    return [LocalC4BadWords(keep_fraction=p.keep_fraction, fail_on_missing_language=p.fail_on_missing_language,
                            seed=p.seed, default_language=p.default_language,
                            exclusion_writer=ctx.exclusion_writer())]


class FineWebQualityParams(_WordsParams):
    line_punct_thr: float = Field(0.12, ge=0, le=1)
    line_punct_exclude_zero: bool = False
    short_line_thr: float = Field(0.67, ge=0, le=1)
    short_line_length: int = Field(30, ge=0)
    char_duplicates_ratio: float = Field(0.01, ge=0, le=1)
    new_line_ratio: float = Field(0.3, ge=0)
    stop_chars: list[str] | None = Field(None, description="line-final characters; default datatrove's terminal punctuation")


@register_stage("fineweb_quality", FineWebQualityParams)
def build_fineweb_quality(p: FineWebQualityParams, ctx: BuildContext):
    """FineWeb's own rules (Penedo et al. 2024): line punctuation, short lines, duplicated lines, list-like pages."""
    return [CuveeFineWebQuality(
        line_punct_thr=p.line_punct_thr, line_punct_exclude_zero=p.line_punct_exclude_zero,
        stop_chars=tuple(p.stop_chars) if p.stop_chars is not None else None, short_line_thr=p.short_line_thr,
        short_line_length=p.short_line_length, char_duplicates_ratio=p.char_duplicates_ratio,
        new_line_ratio=p.new_line_ratio, language=make_word_tokenizer(p.word_tokenizer, p.language),
        exclusion_writer=ctx.exclusion_writer())]
