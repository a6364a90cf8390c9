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

How: while the ``extract`` stage runs (``extract.guard_xpaths``, default true), the expression lists in
``trafilatura.xpaths`` are swapped **in place** for the guarded ones (every trafilatura module holds the
same list objects) and restored afterwards. A trafilatura release that moves them only loses the speed-up,
never changes the output. With ``extract.native_xpaths`` (default true), an expression that fits
``xpath_native``'s subset is swapped for its compiled Python twin instead, and only the others for their
guarded XPath.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

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


def expression_lists() -> dict[str, list]:
    """trafilatura's module-level XPath lists (name -> the list object every trafilatura module shares)."""
    from lxml.etree import XPath
    import trafilatura.xpaths as xpaths

    return {name: value for name, value in vars(xpaths).items()
            if isinstance(value, list) and value and all(isinstance(x, XPath) for x in value)}


_native: dict[str, object] = {}


def compiled(xpath):
    """The expression compiled to Python (``xpath_native``, once per process), or None outside its subset."""
    from cuvee.pipeline.stages.xpath_native import compile_native

    if xpath.path not in _native:
        _native[xpath.path] = compile_native(xpath)
    return _native[xpath.path]


@contextmanager
def guarded_xpaths(enabled: bool = True, native: bool = False):
    """Within the block, trafilatura evaluates the guarded (and, with ``native``, compiled) expressions; the
    originals come back afterwards."""
    if not enabled and not native:
        yield
        return

    def swap(xpath):  # the compiled twin if asked for and there is one, else guarded or trafilatura's own
        return (native and compiled(xpath)) or (guarded(xpath) if enabled else xpath)

    saved = [(lst, list(lst)) for lst in expression_lists().values()]
    try:  # a swap that fails half-way (an expression that does not compile) still restores every list
        for lst, original in saved:
            lst[:] = [swap(x) for x in original]
        yield
    finally:
        for lst, original in saved:
            lst[:] = original
