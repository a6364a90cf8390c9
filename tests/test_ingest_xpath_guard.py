"""Guarded regex XPaths: the same nodes as trafilatura's own expressions on real pages, identical
extraction output, a rewrite only where it is provably the same test, and the originals restored."""

from __future__ import annotations

from copy import copy

import pytest
from lxml.etree import XPath
from lxml.html import fromstring

from _extract_helpers import extract_samples, sample_pages
from cuvee.pipeline.stages.trafilatura_patches import expression_lists
from cuvee.pipeline.stages.xpath_guard import REGEXP_NS, guard_path, guarded

NS = {"re": REGEXP_NS}


@pytest.fixture(scope="module")
def pages():
    docs = sample_pages()
    assert len(docs) > 40
    return docs


def test_guards_attribute_calls_only_where_the_test_is_the_same():
    g = guard_path(".//*[self::div][re:test(@id, '^shar|social') or re:test(@id|@class, 'x', 'i')]")
    assert g == ".//*[self::div][((@id) and re:test(@id, '^shar|social')) or ((@id|@class) and re:test(@id|@class, 'x', 'i'))]"
    # a pattern that matches '' is true for an element without the attribute: the guard would change that
    for keep in (".//*[re:test(@id, '^$')]", ".//*[re:test(@id, 'a*')]", ".//*[re:test(@id, 'x|')]",
                 ".//*[re:test(text(), 'x')]",  # not an attribute
                 ".//*[re:test(@id, '(')]",  # not a valid Python regex: left to lxml as it was
                 ".//*[re:test(@id, 'x') or x:foo(@id)]"):  # another namespace prefix
        assert guard_path(keep) == keep
    assert guard_path(".//*[contains(@style, 'display:none') and re:test(@id, 'x')]").count("((@id) and") == 1


def test_unguarded_patterns_would_have_changed_the_result():
    """The empty-match check is what keeps the rewrite exact: '^$' selects elements without an id."""
    tree = fromstring("<html><body><div id='a'>1</div><div>2</div><div class=''>3</div></body></html>")
    original = XPath(".//div[re:test(@id, '^$')]", namespaces=NS)
    naive = XPath(".//div[(@id) and re:test(@id, '^$')]", namespaces=NS)
    assert len(original(tree)) == 2 and naive(tree) == []
    assert guarded(original) is original


def test_every_rewritten_expression_selects_the_same_nodes_on_real_pages(pages):
    from trafilatura.htmlprocessing import convert_tags, tree_cleaning
    from trafilatura.settings import Extractor
    from trafilatura.utils import load_html

    rewritten = [(name, x, guarded(x)) for name, lst in expression_lists().items() for x in lst if guarded(x) is not x]
    assert len(rewritten) >= 10  # the pinned trafilatura has ~20: the speed-up really applies
    options = Extractor(output_format="txt", precision=True, tables=True)
    selected = 0
    for doc in pages:
        raw = load_html(doc.text)
        if raw is None:
            continue
        converted = convert_tags(tree_cleaning(copy(raw), options), options)  # trafilatura's own tags: list, item...
        for tree in (raw, converted):
            for name, original, new in rewritten:
                want = original(tree)
                assert new(tree) == want, name
                selected += len(want)
    assert selected > 100  # the expressions did select boilerplate on these pages, not just empty lists


def _extract(guard):
    return extract_samples(guard_xpaths=guard, native_xpaths=False)  # the guard alone


def test_same_extraction_with_and_without_the_guard_and_lists_restored():
    before = {name: list(lst) for name, lst in expression_lists().items()}
    on, off = _extract(True), _extract(False)
    assert on == off and len(on) > 30
    assert {name: list(lst) for name, lst in expression_lists().items()} == before
