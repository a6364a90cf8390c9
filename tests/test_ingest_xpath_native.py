"""trafilatura's boilerplate XPaths compiled to Python: the same nodes as libxml2's evaluation on real pages and
on random trees built to hit every corner of the compiled subset, identical extraction output, and a clean
refusal (the XPath stays) for anything outside the subset."""

from __future__ import annotations

import random
from copy import copy

import pytest
from lxml.etree import XPath
from lxml.html import fromstring

from _extract_helpers import extract_samples, sample_pages
from cuvee.pipeline.stages import xpath_native
from cuvee.pipeline.stages.trafilatura_patches import Patches, expression_lists, patched
from cuvee.pipeline.stages.xpath_guard import REGEXP_NS
from cuvee.pipeline.stages.xpath_native import NativeXPath, compile_native, first_attribute, translate_table

NS = {"re": REGEXP_NS}


def _xp(path: str) -> XPath:
    return XPath(path, namespaces=NS)


def _compiled_lists():
    return [(f"{name}[{i}]", x, compile_native(x)) for name, lst in expression_lists().items()
            for i, x in enumerate(lst)]


def test_the_costly_lists_compile_and_the_rest_keep_their_xpath():
    got = {name: native is not None for name, _, native in _compiled_lists()}
    for name in ("OVERALL_DISCARD_XPATH", "REMOVE_COMMENTS_XPATH", "REMOVE_COMMENTS_AND_LISTS_XPATH",
                 "RAW_TREE_PRUNE_XPATH", "TEASER_DISCARD_XPATH", "PRECISION_DISCARD_XPATH", "DISCARD_IMAGE_ELEMENTS"):
        assert all(v for k, v in got.items() if k.startswith(name + "[")), name
    assert sum(got.values()) >= 18
    # unions of paths and the metadata expressions (child elements, //a[@href] steps) are not in the subset
    assert not got["COMMENTS_DISCARD_XPATH[1]"] and not got["AUTHOR_XPATHS[0]"] and not got["TAGS_XPATHS[0]"]


@pytest.mark.parametrize("path", [
    ".//*[self::div][1][@id]",                 # a predicate after a position
    ".//*[self::div][2]",                      # a position other than 1
    "(.//div)[1]|(.//main)[1]",                # a union of paths
    "//div[@class='x']//a[@href]",             # more than one step
    ".//*[re:test(@id, '(')]",                 # a pattern Python cannot compile: lxml decides, as before
    ".//*[rel='me']",                          # a child element compared with a string
    ".//*[string-length(@id) > 3]",            # another function
    ".//*[@id|@class='x']",                    # a union compared with a string
    ".//*[x:foo(@id)]",                        # another namespace
])
def test_expressions_outside_the_subset_are_refused(path):
    assert compile_native(XPath(path, namespaces={"re": REGEXP_NS, "x": "urn:x"})) is None


def test_every_compiled_expression_selects_the_same_nodes_on_realsample_pages():
    from trafilatura.htmlprocessing import convert_tags, tree_cleaning
    from trafilatura.settings import Extractor
    from trafilatura.utils import load_html

    compiled = [(name, x, n) for name, x, n in _compiled_lists() if n is not None]
    options = Extractor(output_format="txt", precision=True, tables=True)
    selected = trees = 0
    for doc in sample_pages():
        raw = load_html(doc.text)
        if raw is None:
            continue
        converted = convert_tags(tree_cleaning(copy(raw), options), options)  # trafilatura's tags: list, item...
        for tree in (raw, converted, *raw.iterdescendants("body", "article", "main")):  # subtrees as contexts too
            trees += 1
            for name, original, native in compiled:
                want = original(tree)
                assert native(tree) == want, name
                selected += len(want)
    assert trees > 80 and selected > 1000  # boilerplate was really selected, not only empty lists


TOKENS = ["cookie", "Cookie", "comment", "Comment", "commentary", "comments-title", "comment-list", "share",
          "Share", "shariff", "nav", "Navbar", "ad", "ad-", "ad-slot", "x-ad-y", "bottom", "link", "links", "hidden",
          "display:none", "display: none", "teaser", "Teaser", "caption", "post-content", "article-body",
          "main-content", "Main-Content", "mvp-post-add-box", "infinite-scroll", "elementor-share-buttons",
          "respond", "reply-to", "akismet", "fulltext", "FullText", "FULLTEXT", "\u212aelvin", "post", "entry",
          "content", "primary", "story", "text", "nav\u00a0bar", "x bottom", "bottom\ty", "tags", "", " "]
TAGS = ["div", "section", "article", "main", "p", "span", "list", "item", "ul", "ol", "details", "aside", "header",
        "h1", "a", "b", "cite", "quote"]
ATTRS = ["class", "id", "style", "role", "data-component", "aria-hidden", "itemprop", "data-lp-replacement-content"]


def _random_tree(rng: random.Random):
    """A random nested tree whose attribute values and orders hit the compiled predicates' corners."""
    from lxml.html import Element

    root = Element("body")
    nodes = [root]
    for _ in range(rng.randint(5, 40)):
        parent = rng.choice(nodes)
        el = Element(rng.choice(TAGS))
        for name in rng.sample(ATTRS, rng.randint(0, 4)):  # random attribute order: unions take the first
            value = " ".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 3)))
            el.set(name, value if rng.random() > 0.1 else "")
        if rng.random() < 0.15:
            el.set("aria-hidden", "true")
        el.text = rng.choice(["", "text", None])
        parent.append(el)
        nodes.append(el)
    return root


def test_random_trees_select_the_same_nodes_for_every_compiled_expression():
    compiled = [(name, x, n) for name, x, n in _compiled_lists() if n is not None]
    rng = random.Random(7)
    hits = {name: 0 for name, _, _ in compiled}
    for _ in range(400):
        root = _random_tree(rng)
        for name, original, native in compiled:
            want = original(root)
            assert native(root) == want, (name, [e.attrib for e in want])
            hits[name] += len(want)
    # the random trees really exercised (nearly) every compiled expression
    assert sum(1 for v in hits.values() if v) >= len(hits) - 3, hits


def test_attribute_union_takes_the_first_attribute_in_attribute_order():
    tree = fromstring("<html><body><div class='cookie' id='a'>1</div><div id='a' class='cookie'>2</div>"
                      "<div id='' class='cookie'>3</div><div class='cookie'>4</div><div id='cookie'>5</div>"
                      "</body></html>")
    original = _xp(".//*[self::div][re:test(@id|@class, 'cookie')]")
    native = compile_native(original)
    assert [e.text for e in native(tree)] == [e.text for e in original(tree)] == ["1", "4", "5"]
    div = tree.find(".//div")
    assert first_attribute(div, ("id", "class")) == "cookie" and first_attribute(div, ("style",)) == ""


def test_positions_not_descendants_translate_and_flags():
    html = ("<html><body><div><p class='x'>a</p><p class='x'>b</p><section><p class='x'>c</p></section></div>"
            "<div class='keep'><h1>t</h1></div><div class='keep'>u</div><span id='FULLTEXT'>v</span>"
            "<span id='\u212a'>w</span><span id='BAAC'>z</span></body></html>")
    tree = fromstring(html)
    for path, expect in [
        (".//*[self::p][@class='x'][1]", ["a", "c"]),            # the first matching child of each parent
        ("(.//*[self::p][@class='x'])[1]", ["a"]),              # the first in document order
        ("(.//*[self::p][@class='none'])[1]", []),
        (".//*[self::div][@class='keep'][not(.//h1)]", ["u"]),
        (".//*[re:test(@id, 'fulltext', 'i')]", ["v"]),
        (".//*[re:test(@id, 'k', 'i')]", ["w"]),                 # the Kelvin sign folds to k, as in lxml
        (".//*[contains(translate(@id, 'AAB', 'x'), 'xC')]", ["z"]),  # first 'A' wins, 'B' deleted
        (".//p", ["a", "b", "c"]),
        ("(.//section)[1]", [None]),
    ]:
        original = _xp(path)
        native = compile_native(original)
        assert native is not None, path
        assert [e.text for e in native(tree)] == [e.text for e in original(tree)] == expect, path
    assert translate_table("AAB", "x") == {ord("A"): ord("x"), ord("B"): None}


def test_non_element_context_and_variables_go_to_the_xpath():
    tree = fromstring("<html><body><div class='cookie'>1</div></body></html>")
    native = compile_native(_xp(".//*[self::div][re:test(@class, 'cookie')]"))
    assert isinstance(native, NativeXPath)
    doc = tree.getroottree()
    assert native(doc) == native.xpath(doc) and len(native(doc)) == 1


def test_verdict_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(xpath_native, "CACHE_LIMIT", 4)
    test, cache = xpath_native.make_regex_test("^ad-|banner", "")
    values = [f"ad-{i}" for i in range(10)] + [f"x{i}" for i in range(10)] + ["a banner"]
    assert [test(v) for v in values] == [True] * 10 + [False] * 10 + [True]
    assert len(cache) <= 4


def test_same_extraction_with_and_without_compiled_xpaths_and_lists_restored():
    before = {name: list(lst) for name, lst in expression_lists().items()}
    on, off = extract_samples(native_xpaths=True), extract_samples(native_xpaths=False)
    assert on == off and len(on) > 30
    assert {name: list(lst) for name, lst in expression_lists().items()} == before
    lists = expression_lists()  # the list objects every trafilatura module shares, swapped in place
    with patched(Patches(native_xpaths=True)):  # compiled where possible, trafilatura's own elsewhere
        assert any(isinstance(x, NativeXPath) for x in lists["OVERALL_DISCARD_XPATH"])
        assert all(not isinstance(x, NativeXPath) for x in lists["TAGS_XPATHS"])
        assert lists["TAGS_XPATHS"] == before["TAGS_XPATHS"]  # not guarded either: guard_xpaths off
    assert {name: list(lst) for name, lst in expression_lists().items()} == before
