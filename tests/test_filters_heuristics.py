"""Heuristic stages (datatrove Gopher / C4 / FineWeb wrappers): keep real article text, drop junk, count
drop reasons the way the accounting contract expects."""

import gzip
import json
from pathlib import Path

import pytest
from datatrove.data import Document

from cuvee.filters.heuristics import LDNOOBW_DIR
from cuvee.pipeline.registry import BuildContext, get_stage

REPO = Path(__file__).resolve().parents[1]
CTX = BuildContext(run_dir=Path("."), work_dir=Path("."), tasks=1, stage_index=0, stage_name="t")


def build(stage, **params):
    spec = get_stage(stage)
    steps = spec.build(spec.params(**params), CTX)
    assert len(steps) == 1
    return steps[0]


def run_step(step, docs):
    """Run a step like the executor does; return kept docs and its stats counters."""
    kept = list(step.run(iter(docs)))
    return kept, {k: v.total for k, v in step.stats.stats.items()}


@pytest.fixture(scope="module")
def article():
    """A long, clean, human-written article from the WCXB ground truth (in the repo)."""
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            if row["page_type"] == "article" and 3000 < len(row["main_content"]) < 8000:
                return row["main_content"]
    raise AssertionError("no article in the curated file")


def junk_docs():
    spam = "Buy cheap watches now\n\n" * 40
    nav = "\n".join(["Home", "About", "Contact", "Login", "Products", "Blog"] * 10)
    symbols = " ".join(["#tag"] * 80)
    return {"repetition": spam, "navigation": nav, "symbols": symbols, "empty": "   \n "}


@pytest.mark.parametrize("stage", ["gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality", "c4_badwords"])
def test_stage_keeps_real_article(stage, article):
    kept, stats = run_step(build(stage), [Document(text=article, id="a", metadata={"language": "en"})])
    assert len(kept) == 1 and stats["total"] == 1 and stats["forwarded"] == 1


@pytest.mark.parametrize("stage,expected", [
    ("gopher_repetition", {"repetition": "dup_para_frac", "navigation": "dup_line_frac"}),
    ("gopher_quality", {"navigation": "gopher_enough_stop_words", "symbols": "gopher_too_many_hashes"}),
    ("fineweb_quality", {"navigation": "line_punct_ratio"}),
    ("c4_quality", {"navigation": "too_few_sentences"}),
])
def test_stage_drops_junk_with_named_reason(stage, expected):
    junk = junk_docs()
    docs = [Document(text=junk[k], id=k) for k in expected]
    kept, stats = run_step(build(stage), docs)
    assert kept == []
    assert stats["dropped"] == len(expected)
    reasons = {k: v for k, v in stats.items() if k.startswith("dropped_")}
    assert sum(reasons.values()) == len(expected)
    for reason in expected.values():
        assert f"dropped_{reason}" in reasons, reasons


@pytest.mark.parametrize("stage", ["gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality"])
def test_empty_document_is_counted_not_crashing(stage):
    kept, stats = run_step(build(stage, min_doc_words=0) if stage == "gopher_quality" else build(stage),
                           [Document(text=" \n ", id="e")])
    assert kept == [] and stats["dropped_empty"] == 1


def test_c4_quality_rewrites_text_to_kept_lines(article):
    doc = Document(text=article + "\nPlease enable JavaScript to view the comments.\nWe use cookies. See our privacy policy.", id="a")
    kept, _ = run_step(build("c4_quality"), [doc])
    assert kept and "JavaScript" not in kept[0].text and "privacy policy" not in kept[0].text


def test_c4_curly_bracket_and_lorem_ipsum_drop_pages(article):
    docs = [Document(text=article + "\nfunction f() { return 1; } is the code.", id="c"),
            Document(text="Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n" + article, id="l")]
    kept, stats = run_step(build("c4_quality"), docs)
    assert kept == [] and stats["dropped_curly_bracket"] == 1 and stats["dropped_lorem_ipsum"] == 1


def test_c4_badwords_uses_local_pinned_list(article):
    words = [w.strip() for w in (LDNOOBW_DIR / "en.c4_commit_25e679f").read_text().splitlines() if w.strip().isalpha()]
    bad = Document(text=article + f"\nThis line mentions {words[len(words) // 2]} once.", id="b", metadata={"language": "en"})
    other = Document(text="Texto normal sin problemas.", id="x", metadata={"language": "xx"})
    kept, stats = run_step(build("c4_badwords"), [bad, other])
    assert [d.id for d in kept] == ["x"]  # unknown language: kept and counted, not a crash
    assert stats["dropped_document_removed_with_badwords"] == 1
    assert stats["missing_badwords_lang"] == 1


def test_c4_badwords_can_fail_on_missing_language():
    step = build("c4_badwords", fail_on_missing_language=True)
    with pytest.raises(ValueError, match="no bad-words list for language 'xx'"):
        list(step.run(iter([Document(text="hello", id="x", metadata={"language": "xx"})])))


def test_thresholds_are_parameters(article):
    # the same article fails when the minimum word count is above its length
    n_words = len(article.split())
    kept, stats = run_step(build("gopher_quality", min_doc_words=n_words * 2), [Document(text=article, id="a")])
    assert kept == [] and stats["dropped_gopher_short_doc"] == 1


def test_bad_params_are_rejected_at_validation():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        get_stage("gopher_quality").params(word_tokenizer="nltk")
    with pytest.raises(ValidationError):
        get_stage("fineweb_quality").params(line_punct_thr=2)
    with pytest.raises(ValidationError):
        get_stage("c4_quality").params(no_such_key=1)


C4_EDGE = [
    "", " \n ", "One two three.\nFour five six.\nSeven eight nine.\nTen eleven twelve!\nA b c?\nd e f.",
    "We use cookies on this site. Read our Privacy Policy now.\nEnable JavaScript to see it all, please.\n"
    "Real text goes here [1] and [edit] there [citation needed].\nShort.\nx\n" + "w" * 1200 + " long word.",
    "Lorem ipsum dolor sit amet.\nThis is fine text.", "A line with a { brace } in it.\nAnother line here.",
    "Ends with an ellipsis...\nEnds with a quote \"here.\"\nNo end mark here\n\n\n\tTabbed line here now.",
    "Terms of use apply. See the terms of use!\nOur site uses cookies, you know.\n" * 3,
    "Mr. Smith went to Washington. He met Dr. Jones there! Then? They left.\n" * 4,
]


def _c4_cases():
    from tests._dedup_helpers import real_texts

    texts = list(real_texts()[:400]) + C4_EDGE
    # real pages with the edge lines mixed in, so page drops and line drops meet real prose
    texts += [t + "\n" + e for t, e in zip(real_texts()[400:500], C4_EDGE * 12) if e]
    return texts


@pytest.mark.parametrize("params", [
    {}, {"filter_no_terminal_punct": True}, {"split_paragraph": False},
    {"min_num_sentences": -1, "min_words_per_line": -1, "max_word_length": -1, "remove_citations": False},
    {"max_word_length": 5, "min_num_sentences": 40, "filter_policy": False, "filter_javascript": False},
    {"filter_lorem_ipsum": False, "filter_curly_bracket": False, "min_words_per_line": 8},
])
def test_c4_rules_equal_datatrove_filter(params):
    """cuvee's one-pass C4 rules give datatrove's C4QualityFilter verdicts, texts and counters exactly."""
    from datatrove.pipeline.filters import C4QualityFilter

    from cuvee.filters.heuristics import _C4RulesOnePass
    from cuvee.filters.words import make_word_tokenizer

    kw = {"filter_no_terminal_punct": False} | params
    language = make_word_tokenizer("fast", "en")
    ours, theirs = _C4RulesOnePass(language=language, **kw), C4QualityFilter(language=language, **kw)
    texts = [t for t in _c4_cases() if t.strip()]
    drops = 0
    for i, t in enumerate(texts):
        a, b = Document(text=t, id=str(i)), Document(text=t, id=str(i))
        va, vb = ours.filter(a), theirs.filter(b)
        assert (va, a.text) == (vb, b.text), i
        drops += va is not True
    assert 0 < drops < len(texts)
    assert dict(ours.stats.stats) == dict(theirs.stats.stats)


TRICKY_WORDS = [["ab", "c", "a", "bc"] * 7, ["a b", "c", "a", "b c"] * 5, ["x"] * 30, ["", "", "a"] * 9,
                ["é", "🙂", "x", "\ud800"] * 12, ["one"], [], ["to", "be", "or", "not"] * 3 + ["to", "be"]]


@pytest.mark.parametrize("mods", [None, (7, 11)])
def test_repetition_measures_equal_datatrove_functions(mods):
    """Compiled n-gram measures = datatrove's string-based ones; with tiny moduli most keys collide, the
    kernel's verification catches every collision and the result is still exact."""
    from datatrove.pipeline.filters.gopher_repetition_filter import find_all_duplicate, find_top_duplicate, get_n_grams
    from datatrove.utils.text import split_into_words

    from cuvee.filters.repetition import PageWords
    from cuvee.filters.words import make_word_tokenizer
    from tests._dedup_helpers import real_texts

    tok = make_word_tokenizer("fast", "en")
    pages = [split_into_words(t, tok) for t in real_texts()[:150]] + TRICKY_WORDS
    pages += [w * 3 for w in pages[:20]]  # repetitive pages: long repeats and many hits
    for words in pages:
        page = PageWords(words) if mods is None else PageWords(words, *mods)
        for n in (2, 3, 4):
            want = find_top_duplicate(get_n_grams(words, n)) if len(words) >= n else None
            assert page.top_ngram_chars(n) == want, (n, words[:8])
        for n in range(1, 11):
            assert page.repeated_ngram_chars(n) == find_all_duplicate(words, n), (n, words[:8])


@pytest.mark.parametrize("params", [{}, {"top_n_grams": ((2, 0.05), (3, 0.04)), "dup_n_grams": ((5, 0.02), (7, 0.01))},
                                    {"dup_line_frac": None, "dup_para_frac": None, "dup_line_char_frac": None,
                                     "dup_para_char_frac": None}])
def test_gopher_repetition_equals_datatrove_filter(params):
    from datatrove.pipeline.filters import GopherRepetitionFilter

    from cuvee.filters.heuristics import _GopherRepetitionCompiled
    from cuvee.filters.words import make_word_tokenizer
    from tests._dedup_helpers import real_texts

    language = make_word_tokenizer("fast", "en")
    ours, theirs = _GopherRepetitionCompiled(language=language, **params), GopherRepetitionFilter(language=language, **params)
    texts = list(real_texts()[:300]) + [t + "\n\n" + t for t in real_texts()[300:330]]
    texts += [" ".join(real_texts()[i].split()[:40]) * 4 for i in range(20)] + ["x", "a b " * 300, "\n\n\n"]
    verdicts = []
    for i, t in enumerate(texts):
        a, b = Document(text=t, id=str(i)), Document(text=t, id=str(i))
        va, vb = ours.filter(a), theirs.filter(b)
        assert va == vb, (i, va, vb)
        verdicts.append(va)
    assert True in verdicts and len({v for v in verdicts if v is not True}) >= 2


@pytest.mark.parametrize("params", [{}, {"min_doc_words": 0, "max_non_alpha_words_ratio": 0.85, "min_stop_words": 5},
                                    {"max_avg_word_length": 5, "min_avg_word_length": 4.5}])
def test_gopher_quality_equals_datatrove_filter(params):
    from datatrove.pipeline.filters import GopherQualityFilter

    from cuvee.filters.heuristics import _GopherQualityPerDistinctWord
    from cuvee.filters.words import make_word_tokenizer
    from tests._dedup_helpers import real_texts

    language = make_word_tokenizer("fast", "en")
    ours, theirs = _GopherQualityPerDistinctWord(language=language, **params), GopherQualityFilter(language=language, **params)
    texts = list(real_texts()[:300]) + ["... !!! ---", "• a\n• b\n- c", "x " * 60 + "...\n" * 10, "# # # tag " * 30,
                                        "Ünïcødé wörds ½ ² ٣ — «quoted» text, " * 20, "123 456 789 " * 40, "…"]
    verdicts = []
    for i, t in enumerate(texts):
        va, vb = ours.filter(Document(text=t, id=str(i))), theirs.filter(Document(text=t, id=str(i)))
        assert va == vb, (i, va, vb)
        verdicts.append(va)
    assert True in verdicts and len({v for v in verdicts if v is not True}) >= 2
