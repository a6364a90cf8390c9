"""trafilatura's boilerplate XPaths compiled to Python over lxml's C tag iteration: the same nodes, a fraction
of the time.

Why: after the guard (``xpath_guard``), evaluating trafilatura's expression lists was still half of extraction
time on the throughput benchmark's real pages. libxml2 evaluates ``.//*[self::div or self::p or ...][...]``
by building a node-set for every ``self::`` test of every element and calls back into Python for every
``re:test``. Here the same expression becomes one loop: ``iterdescendants('div', 'p', ...)`` filters the tags
in C, attributes are read with ``get``, and each regular expression's verdict is cached per attribute value
(class names repeat within and across pages).

Only a small, exactly defined subset of XPath 1.0 is compiled - the forms trafilatura's lists use:

* ``.//*`` or ``.//name``, then predicates; ``(path)[1]`` (the first match in document order) and a final
  ``[1]`` (the first matching child of each parent);
* predicates built from ``or``, ``and``, ``not()``, parentheses, ``self::name``, ``@a`` (present),
  ``@a='literal'``, ``contains(S, 'lit')``, ``starts-with(S, 'lit')``, ``re:test(U, 'pattern'[, 'flags'])``
  and ``.//name`` (a descendant exists), where ``U`` is ``@a`` or a union ``@a|@b`` (its string value is
  the first attribute present in document order, i.e. attribute order) and ``S`` is ``U`` or
  ``translate(U, 'from', 'to')``.

Anything else (unions of paths, other functions, a pattern Python cannot compile) is not compiled, and the
caller keeps the XPath. ``re:test`` is lxml's EXSLT function, which is Python's ``re.search`` with
``re.IGNORECASE`` for the ``i`` flag, so the verdicts are the same function of the same string. Tested:
every compiled expression selects the same nodes as the XPath on real pages, before and after trafilatura's
tag conversion, plus the corner cases (attribute order in unions, empty and absent attributes, per-parent
``[1]``), and extraction output is identical (``tests/test_ingest_xpath_native.py``).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"""\s*(?:
    (?P<lit>'[^']*'|"[^"]*")
  | (?P<num>\d+(?![\w.]))
  | (?P<op>\.//|//|\(|\)|\[|\]|,|\||=|\*)
  | (?P<attr>@[A-Za-z_][\w.-]*)
  | (?P<self>self::[A-Za-z_][\w.-]*)
  | (?P<name>[A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?)
)""", re.VERBOSE)

CACHE_LIMIT = 1 << 16  # verdicts cached per pattern; cleared when full so a long run's memory stays bounded


class Unsupported(ValueError):
    """The expression is outside the compiled subset: the XPath stays."""


def _tokens(path: str) -> list[tuple[str, str]]:
    out, at, end = [], 0, len(path.rstrip())
    while at < end:
        m = _TOKEN.match(path, at)
        if not m or m.end() == at:
            raise Unsupported(f"cannot read {path[at:at + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def make_regex_test(pattern: str, flags: str):
    """lxml's ``re:test`` as a function of the string, plus the dict of its cached verdicts: compiled code looks
    a value up in the dict and calls the function only on a miss."""
    try:
        rx = re.compile(pattern, re.UNICODE | (re.IGNORECASE if "i" in flags else 0))
    except re.error as e:
        raise Unsupported(f"pattern {pattern!r}: {e}") from None
    search, cache = rx.search, {}

    def test(value: str) -> bool:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        hit = cache[value] = search(value) is not None
        return hit

    return test, cache


def first_attribute(element, names: tuple[str, ...]) -> str:
    """String value of the union ``@a|@b``: the first of the attributes present, in attribute order."""
    found = None
    for name in names:
        value = element.get(name)
        if value is not None:
            if found is not None:  # several present: XPath's document order is the element's attribute order
                for key in element.attrib:  # attribute order (iterating the element gives children)
                    if key in names:
                        return element.get(key)
            found = value
    return "" if found is None else found


def translate_table(src: str, dst: str) -> dict[int, int | None]:
    """XPath ``translate``: the first occurrence of a character in ``src`` wins; past ``dst``'s end, delete."""
    table: dict[int, int | None] = {}
    for i, ch in enumerate(src):
        table.setdefault(ord(ch), ord(dst[i]) if i < len(dst) else None)
    return table


class _Parser:
    """Recursive descent over the token list, emitting one Python expression per predicate over ``e`` (the
    element) and locals holding its attributes (see :meth:`prologue`); constants go to ``self.env``."""

    def __init__(self, path: str):
        self.toks = _tokens(path)
        self.at = 0
        self.env: dict[str, object] = {"_first": first_attribute}
        self.attrs: dict[str, str] = {}  # attribute name -> local variable, read once per element
        self.unions: dict[tuple[str, ...], str] = {}  # attribute union -> local variable with its string value

    def attr(self, name: str) -> str:
        return self.attrs.setdefault(name, f"a{len(self.attrs)}")

    def prologue(self) -> list[str]:
        """Lines run per element before the test: each attribute read once, each union's value."""
        lines = [f"{var} = g({name!r})" for name, var in self.attrs.items()]
        for names, var in self.unions.items():
            if len(names) == 2:
                x, y = (self.attrs[n] for n in names)
                lines.append(f"{var} = (({x} if {y} is None else {y}) or '') if ({x} is None or {y} is None) "
                             f"else _first(e, {names!r})")
            else:
                lines.append(f"{var} = _first(e, {names!r})")
        return lines

    # -- token helpers
    def peek(self, offset: int = 0):
        i = self.at + offset
        return self.toks[i] if i < len(self.toks) else (None, None)

    def take(self, kind: str | None = None, value: str | None = None) -> str:
        k, v = self.peek()
        if k is None or (kind and k != kind) or (value is not None and v != value):
            raise Unsupported(f"expected {value or kind}, got {v!r}")
        self.at += 1
        return v

    def accept(self, kind: str, value: str | None = None) -> bool:
        k, v = self.peek()
        if k == kind and (value is None or v == value):
            self.at += 1
            return True
        return False

    def const(self, value) -> str:
        name = f"_c{len(self.env)}"
        self.env[name] = value
        return name

    @staticmethod
    def literal(tok: str) -> str:
        return tok[1:-1]

    # -- grammar
    def parse(self) -> tuple[tuple[str, ...], str, list[str]]:
        """(tags: the element names to iterate, ('*',) for every element; mode: 'all', 'first' in document order
        or 'parent' = first child of each parent; the remaining predicates as Python expressions)."""
        first = False
        if self.accept("op", "("):
            first = True
        self.take("op", ".//")
        tags = ("*",) if self.accept("op", "*") else (self.take("name"),)
        if tags == ("*",) and self.peek() == ("op", "[") and (names := self.self_disjunction(1)):
            tags = names  # a leading [self::a or self::b ...] becomes lxml's C tag filter
            self.at += 2 * len(names)  # '[' and the tests with their 'or's; the ']' is taken next
            self.take("op", "]")
        preds, per_parent = [], False
        while self.accept("op", "["):
            if self.peek()[0] == "num":
                if self.take("num") != "1":
                    raise Unsupported("position other than [1]")
                self.take("op", "]")
                per_parent = True
                if self.peek()[0] is not None and not (first and self.peek() == ("op", ")")):
                    raise Unsupported("a predicate after [1]")
                continue
            preds.append(self.or_expr())
            self.take("op", "]")
        if first:
            self.take("op", ")")
            self.take("op", "[")
            if self.take("num") != "1":
                raise Unsupported("position other than [1]")
            self.take("op", "]")
            if per_parent:
                raise Unsupported("[1] inside and outside")
        if self.peek()[0] is not None:
            raise Unsupported(f"trailing {self.peek()[1]!r}")
        return tags, ("first" if first else "parent" if per_parent else "all"), preds

    def self_disjunction(self, offset: int) -> tuple[str, ...] | None:
        """The names of a predicate starting ``offset`` tokens ahead that is ``self::a or self::b ...`` and nothing
        else, or None. Consumes nothing."""
        names = []
        while True:
            kind, value = self.peek(offset)
            if kind != "self":
                return None
            names.append(value[len("self::"):])
            nxt = self.peek(offset + 1)
            if nxt == ("op", "]"):
                return tuple(names)
            if nxt != ("name", "or"):
                return None
            offset += 2

    def or_expr(self) -> str:
        parts = [self.and_expr()]
        while self.accept("name", "or"):
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def and_expr(self) -> str:
        parts = [self.primary()]
        while self.accept("name", "and"):
            parts.append(self.primary())
        return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"

    def primary(self) -> str:
        kind, value = self.peek()
        if kind == "op" and value == "(":
            self.at += 1
            inner = self.or_expr()
            self.take("op", ")")
            return inner
        if kind == "self":
            self.at += 1
            return f"(e.tag == {value[len('self::'):]!r})"
        if kind == "op" and value == ".//":
            self.at += 1
            name = self.take("name")
            return f"(next(e.iterdescendants({name!r}), None) is not None)"
        if kind == "attr":
            names = self.union()
            if self.accept("op", "="):
                if len(names) != 1:
                    raise Unsupported("comparison of a union")
                return f"({self.attr(names[0])} == {self.literal(self.take('lit'))!r})"
            if len(names) != 1:
                raise Unsupported("a union as a boolean")
            return f"({self.attr(names[0])} is not None)"
        if kind == "name":
            self.at += 1
            self.take("op", "(")
            if value == "not":
                inner = self.or_expr()
                self.take("op", ")")
                return f"(not {inner})"
            if value in ("contains", "starts-with"):
                s = self.string_expr()
                self.take("op", ",")
                lit = self.literal(self.take("lit"))
                self.take("op", ")")
                return f"({lit!r} in {s})" if value == "contains" else f"{s}.startswith({lit!r})"
            if value == "re:test":
                s = self.union_string(self.union())
                self.take("op", ",")
                pattern = self.literal(self.take("lit"))
                flags = self.literal(self.take("lit")) if self.accept("op", ",") else ""
                self.take("op", ")")
                test, cache = make_regex_test(pattern, flags)
                t, c = self.const(test), self.const(cache)
                return f"({c}[{s}] if {s} in {c} else {t}({s}))"
        raise Unsupported(f"unsupported {value!r}")

    def union(self) -> tuple[str, ...]:
        names = [self.take("attr")[1:]]
        while self.accept("op", "|"):
            names.append(self.take("attr")[1:])
        return tuple(names)

    def union_string(self, names: tuple[str, ...]) -> str:
        for name in names:
            self.attr(name)
        if len(names) == 1:
            return f"({self.attrs[names[0]]} or '')"
        return self.unions.setdefault(names, f"u{len(self.unions)}")

    def string_expr(self) -> str:
        if self.accept("name", "translate"):
            self.take("op", "(")
            s = self.union_string(self.union())
            self.take("op", ",")
            src = self.literal(self.take("lit"))
            self.take("op", ",")
            dst = self.literal(self.take("lit"))
            self.take("op", ")")
            return f"{s}.translate({self.const(translate_table(src, dst))})"
        return self.union_string(self.union())


class NativeXPath:
    """Callable like an lxml ``XPath`` on an element: the list of matching descendants in document order."""

    def __init__(self, xpath, select, source: str):
        self.xpath = xpath  # the original, used for anything but a plain element context
        self.path = xpath.path
        self._select = select
        self.source = source

    def __call__(self, context, **variables):
        if variables or not hasattr(context, "iterdescendants"):
            return self.xpath(context, **variables)
        return self._select(context)

    def __repr__(self) -> str:
        return f"NativeXPath({self.path.strip()[:60]!r}...)"


def compile_native(xpath) -> NativeXPath | None:
    """The compiled twin of an lxml ``XPath``, or None where the expression is outside the subset."""
    from lxml.etree import Element

    try:
        parser = _Parser(xpath.path)
        tags, mode, preds = parser.parse()
    except Unsupported:
        return None
    env = parser.env
    env["_tags"] = (Element,) if tags == ("*",) else tags
    cond = " and ".join(preds) or "True"
    body = {
        "all": "        if {c}:\n            out.append(e)\n",
        "first": "        if {c}:\n            return [e]\n",
        "parent": "        if {c}:\n            p = e.getparent()\n            if p not in seen:\n"
                  "                seen.add(p)\n                out.append(e)\n",
    }[mode].format(c=cond)
    prologue = "".join(f"        {line}\n" for line in parser.prologue())
    source = ("def select(ctx):\n    out = []\n" + ("    seen = set()\n" if mode == "parent" else "")
              + "    for e in ctx.iterdescendants(*_tags):\n        g = e.get\n" + prologue + body + "    return out\n")
    exec(compile(source, f"<xpath_native {xpath.path.strip()[:40]}>", "exec"), env)  # exec of our own generated code
    return NativeXPath(xpath, env["select"], source)
