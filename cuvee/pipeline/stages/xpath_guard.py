"""Guard trafilatura's regex XPath tests with an attribute check: the same nodes, less extraction time.

trafilatura finds boilerplate with XPath expressions such as
``.//*[self::div or ...][re:test(@id, '^shar|social|...') or re:test(@class, '...') or ...]``, evaluated over
the whole tree several times per page. ``re:test`` is an EXSLT extension that lxml implements in Python, so
libxml2 calls back into the interpreter for every candidate element and every regex clause, **including
elements that do not have the attribute at all** (most of them): the empty node-set becomes ``''`` and the
regex is searched in it. Timed on the throughput benchmark's 927 real pages, XPath evaluation was about half
of extraction time.

The rewrite: ``re:test(@a|@b, 'P')`` becomes ``((@a|@b) and re:test(@a|@b, 'P'))``. XPath's ``and`` stops
at a false left side, so elements without the attribute never reach Python. It is the same test whenever
``P`` cannot match the empty string (an absent attribute is ``''``, and ``re:test('', P)`` is then false);
:func:`guard_path` checks exactly that per call and leaves any other call alone, as well as calls on
anything but attributes and expressions that use a namespace prefix other than ``re``. Tested: every
rewritten expression selects the same nodes as the original on real pages, and extraction output is
identical with the guard on and off (``tests/test_ingest_xpath_guard.py``).

How: while the ``extract`` stage runs (``extract.guard_xpaths``, default true),
:mod:`~cuvee.pipeline.stages.trafilatura_patches` swaps the expression lists in ``trafilatura.xpaths`` for
their :func:`twin` (verified first, restored afterwards). With ``extract.native_xpaths`` (default true), an
expression that fits ``xpath_native``'s subset gets its compiled Python twin instead, and only the others
their guarded XPath.
"""

from __future__ import annotations

import re

REGEXP_NS = "http://exslt.org/regular-expressions"

# re:test(<attribute or union of attributes>, '<pattern>'[, '<flags>'])
_RE_TEST = re.compile(
    r"re:test\(\s*(@[\w-]+(?:\s*\|\s*@[\w-]+)*)\s*,\s*'([^']*)'\s*(?:,\s*'([^']*)'\s*)?\)")
_STRING_LITERAL = re.compile(r"'[^']*'|\"[^\"]*\"")
_PREFIX = re.compile(r"(?<![\w:.-])([A-Za-z_][\w.-]*):(?!:)")


def _matches_empty(pattern: str, flags: str) -> bool:
    """Whether lxml's ``re:test('', pattern, flags)`` would be true (an unparsable pattern counts as yes)."""
    try:
        return re.search(pattern, "", re.IGNORECASE if "i" in flags else 0) is not None
    except re.error:
        return True


def guard_path(path: str) -> str:
    """``path`` with each attribute ``re:test`` call guarded by the attribute's presence (see module doc)."""
    prefixes = set(_PREFIX.findall(_STRING_LITERAL.sub("''", path)))
    if prefixes - {"re"}:
        return path  # another namespace: the rewritten expression could not be compiled the same way

    def guard(m: re.Match) -> str:
        attributes, pattern, flags = m.group(1), m.group(2), m.group(3) or ""
        if _matches_empty(pattern, flags):
            return m.group(0)
        return f"(({attributes}) and {m.group(0)})"

    return _RE_TEST.sub(guard, path)


_compiled: dict[str, object] = {}


def guarded(xpath):
    """The guarded twin of an lxml ``XPath`` (compiled once per process), or the original if nothing changes."""
    from lxml.etree import XPath

    new_path = guard_path(xpath.path)
    if new_path == xpath.path:
        return xpath
    if new_path not in _compiled:
        _compiled[new_path] = XPath(new_path, namespaces={"re": REGEXP_NS})
    return _compiled[new_path]


_native: dict[str, object] = {}


def compiled(xpath):
    """The expression compiled to Python (``xpath_native``, once per process), or None outside its subset."""
    from cuvee.pipeline.stages.xpath_native import compile_native

    if xpath.path not in _native:
        _native[xpath.path] = compile_native(xpath)
    return _native[xpath.path]


def twin(xpath, guard: bool = True, native: bool = False):
    """What trafilatura evaluates instead of ``xpath``: its compiled twin if asked for and there is one, else
    the guarded XPath if asked for, else ``xpath`` itself."""
    return (native and compiled(xpath)) or (guarded(xpath) if guard else xpath)
