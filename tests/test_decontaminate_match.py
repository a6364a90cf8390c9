"""The n-gram matcher on real text: the shipped cloze items planted into real WCXB pages (data/curated) verbatim,
inside long pages, split over paragraphs, lightly edited, and as short fragments that must not match; on the
unplanted pages every match is checked against a brute-force oracle of shared normalised 13-word sequences."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from cuvee.dedup.ngram_match import NgramIndex, char_spans, normalise_word, word_ids, word_spans

REPO = Path(__file__).resolve().parents[1]
CLOZE = REPO / "cuvee" / "assets" / "eval_tasks" / "cuvee_wcxb_cloze.jsonl"
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
N = 13


def item_text(it: dict) -> str:
    return it["context"] + " " + it["choices"][it["label"]]


@pytest.fixture(scope="module")
def real():
    from cuvee.train.demo_data import split_heldout

    items = [json.loads(line) for line in CLOZE.read_text().splitlines()]
    with gzip.open(WCXB, "rt") as f:
        rows = [json.loads(line) for line in f]
    train, _held = split_heldout(rows)  # the cloze items come from the held-out pages only
    pages = [r["main_content"] for r in train if r["main_content"]]
    index = NgramIndex.build([word_ids(item_text(it)) for it in items], N)
    return {"items": items, "pages": pages, "index": index}


def grams(text: str, n: int = N) -> set[tuple[str, ...]]:
    """Brute force: every run of n normalised words, as tuples of strings (no hashing)."""
    w = [normalise_word(x) for x in re.findall(r"\w+", text)]
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def found(index, text) -> set[int]:
    return {m.item for m in index.find(word_ids(text))}


def test_unplanted_pages_match_exactly_what_the_oracle_finds(real):
    """No false match: every (page, item) the index reports shares a 13-word run, and none is missed. The
    WCXB pages do share some real text with the held-out items (site boilerplate, one page crawled twice)."""
    item_grams = [grams(item_text(it)) for it in real["items"]]
    every = set().union(*item_grams)
    reported = {(p, i) for p, page in enumerate(real["pages"]) for i in found(real["index"], page)}
    truth = set()
    for p, page in enumerate(real["pages"]):
        shared = grams(page) & every
        truth |= {(p, i) for i, g in enumerate(item_grams) if shared and shared & g}
    assert reported == truth
    assert len({p for p, _ in truth}) < 0.02 * len(real["pages"])  # the pages are mostly clean


def _planted_page(real, k: int) -> str:
    return max(real["pages"][k * 7: k * 7 + 7], key=len)


def test_verbatim_and_inside_long_documents(real):
    items = real["items"]
    for k in range(0, 400, 20):
        text = item_text(items[k])
        assert k in found(real["index"], text)
        page = _planted_page(real, k // 20)
        mid = page.rfind(" ", 0, len(page) // 2)
        long_doc = page[:mid] + " " + text + " " + page[mid:]
        assert len(long_doc) > 5 * len(text)
        assert k in found(real["index"], long_doc)


def test_split_over_lines_and_paragraphs_gives_the_item_span(real):
    items = real["items"]
    for k in range(3, 400, 25):
        words = item_text(items[k]).split(" ")
        a, b = len(words) // 3, 2 * len(words) // 3
        split = " ".join(words[:a]) + "\n\n" + " ".join(words[a:b]) + "\n" + " ".join(words[b:])
        doc = "An unrelated opening paragraph.\n\n" + split + "\n\nAn unrelated closing line."
        ids, starts, ends = word_spans(doc)
        ms = [m for m in real["index"].find(ids) if m.item == k]
        assert ms, k
        spans = char_spans(ms[0], starts, ends)
        # the whole item, across the breaks, and nothing else (from its first word to its last)
        assert doc[spans[0][0]:spans[-1][1]] == re.sub(r"^\W+|\W+$", "", split)


def test_lightly_edited_copies(real):
    items = real["items"]
    for k in range(7, 400, 30):
        text = item_text(items[k])
        shouting = text.upper()
        no_punct = re.sub(r"[^\w\s]", " ", text)
        spaced = re.sub(r" ", "  \t", text).replace(".", " . ")
        for variant in (shouting, no_punct, spaced):
            assert k in found(real["index"], variant), (k, variant[:80])
        # 10 % of words substituted at random places: found exactly when some 13-word run survived (the oracle);
        # evenly spaced edits every 10 words leave none, which no 13-gram test can catch
        words = text.split()
        rng = np.random.default_rng(k)
        hit = set(rng.choice(len(words), size=max(1, len(words) // 10), replace=False).tolist())
        edited = " ".join("zzzq" if i in hit else w for i, w in enumerate(words))
        assert (k in found(real["index"], edited)) == bool(grams(edited) & grams(text))


def test_short_fragments_and_short_items_never_match(real):
    """Fragments of fewer than 13 words planted into pages match nothing; an item shorter than n is too
    short to test even when the document holds it verbatim."""
    items = real["items"]
    page = _planted_page(real, 3)
    base = found(real["index"], page)
    for k in range(0, 400, 15):
        words = re.findall(r"\w+", item_text(items[k]))  # 12 words as the matcher counts them
        for start in (0, len(words) // 2):
            fragment = " ".join(words[start:start + N - 1])
            assert found(real["index"], page + "\n" + fragment + "\n" + page) == base
    short = "Which planet is known as the red planet"  # 8 words
    index = NgramIndex.build([word_ids(short), word_ids(item_text(items[0]))], N)
    assert index.too_short.tolist() == [True, False]
    assert found(index, "Quiz: " + short + "? Mars.") == set()


def test_min_ngrams_and_token_ids():
    """The same index works on token ids; min_ngrams asks for several distinct n-grams (or all an item has)."""
    rng = np.random.default_rng(0)
    item = rng.integers(0, 50_000, size=40)
    doc = np.concatenate([rng.integers(0, 50_000, size=100), item[:14], rng.integers(0, 50_000, size=50)])
    idx1 = NgramIndex.build([item], N)
    (m,) = idx1.find(doc)
    assert m.grams == 2 and m.spans == ((100, 114),)  # token positions
    assert NgramIndex.build([item], N, min_ngrams=3).find(doc) == []
    tiny = item[:13]  # one n-gram: min(min_ngrams, 1) = 1 suffices
    assert [x.item for x in NgramIndex.build([tiny], N, min_ngrams=3).find(doc)] == [0]


def test_index_round_trips_through_disk(tmp_path, real):
    index = real["index"]
    index.save(tmp_path / "ix")
    loaded = NgramIndex.load(tmp_path / "ix")
    page = real["pages"][0] + " " + item_text(real["items"][42])
    assert found(loaded, page) == found(index, page) and 42 in found(loaded, page)
    (tmp_path / "ix" / "hashes.u64").write_bytes(b"\0" * 8)  # a torn write is refused, not half-used
    with pytest.raises(ValueError, match="do not match"):
        NgramIndex.load(tmp_path / "ix")


def test_an_item_shared_by_two_benchmarks_is_reported_for_both():
    text = "the mitochondria is the powerhouse of the cell and produces most of the chemical energy needed"
    index = NgramIndex.build([word_ids(text), word_ids("x " * 20), word_ids(text)], N)
    assert sorted(m.item for m in index.find(word_ids("Notes: " + text))) == [0, 2]
