"""Values from data and configs shown in the card as text, never as markup.

Why: the card's Markdown is rendered as HTML twice (``card.html`` here, the README on the Hugging Face Hub),
and every Markdown renderer passes raw HTML through. A document URL, a host, a drop reason, a recipe name or
a manifest field is attacker-controlled (a crafted WARC is enough), so each one goes through :func:`text` or
:func:`code` before it reaches the Markdown: HTML-significant characters and the Markdown characters that make
links, images, code spans and table cells become character references, which both renderers show as the
character itself. :func:`check_html` is the tripwire behind it: the rendered page may hold only the elements
and attributes the card itself writes.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from cuvee.kernel.errors import UserError

MAX_VALUE_CHARS = 300  # one value in the card (a host, a reason, a name); longer ones are cut with "…"

_REFS = str.maketrans({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;", "[": "&#91;",
    "]": "&#93;", "*": "&#42;", "\\": "&#92;", "|": "&#124;", "$": "&#36;", "~": "&#126;", "_": "&#95;",
})
_CODE_SAFE = re.compile(r"[\w .,:;/=+@%#()!?{}~'-]+")  # shown as a `code span` as is: no character needs care


class Md(str):
    """A string that is already card Markdown (built by this module or by the card itself): not escaped again."""


def _one_line(value: object, limit: int) -> str:
    s = " ".join(str(value).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def text(value: object, limit: int = MAX_VALUE_CHARS) -> Md:
    """``value`` as Markdown text showing exactly its characters: one line, cut at ``limit``, markup escaped.

    Underscores stay as they are inside words (``exact_dedup``), where they never mean emphasis; anywhere
    else they are escaped like the rest."""
    s = _one_line(value, limit)
    out = s.translate(_REFS)
    # an underscore between two word characters is plain in both renderers; keep it readable there
    out = re.sub(r"(?<=[0-9A-Za-z])&#95;(?=[0-9A-Za-z])", "_", out)
    return Md(out)


def code(value: object, limit: int = MAX_VALUE_CHARS) -> Md:
    """``value`` in code style: a `code span` when it holds only harmless characters, else ``<code>`` with
    its characters escaped (a backtick in the value would otherwise end the span and let markup through)."""
    s = _one_line(value, limit)
    if s and _CODE_SAFE.fullmatch(s):
        return Md(f"`{s}`")
    return Md(f"<code>{text(s, limit)}</code>")


def cell(value: object) -> str:
    """A table cell: card Markdown as is, anything else escaped as text."""
    return value if isinstance(value, Md) else text(value)


# -- the tripwire ---------------------------------------------------------------------------------

ALLOWED: dict[str, set[str]] = {
    "html": {"lang"}, "head": set(), "meta": {"charset", "name", "content"}, "title": set(), "style": set(),
    "body": set(), "details": {"class"}, "summary": set(), "pre": set(), "code": {"class"}, "p": set(),
    "h1": set(), "h2": set(), "h3": set(), "h4": set(), "table": {"id"}, "thead": set(), "tbody": set(),
    "tr": set(), "th": set(), "td": set(), "img": {"src", "alt"}, "ul": set(), "ol": set(), "li": set(),
    "blockquote": set(), "strong": set(), "em": set(), "br": set(), "hr": set(),
}
DATA_IMAGE = "data:image/png;base64,"


class CardMarkupError(UserError, RuntimeError):
    """The rendered card holds markup the card does not write itself: a value escaped nowhere. Never published."""


class _Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []

    def handle_starttag(self, tag, attrs):
        allowed = ALLOWED.get(tag)
        if allowed is None:
            self.bad.append(f"<{tag}>")
            return
        for k, v in attrs:
            if k not in allowed:
                self.bad.append(f"<{tag} {k}>")
            elif tag == "img" and k == "src" and not (v or "").startswith(DATA_IMAGE):
                self.bad.append(f"<img src={_one_line(v, 60)!r}>")

    handle_startendtag = handle_starttag

    def unknown_decl(self, data):
        self.bad.append(f"<!{_one_line(data, 40)}>")


def check_html(page: str) -> None:
    """Raise :class:`CardMarkupError` if ``page`` holds an element or attribute outside :data:`ALLOWED`, or an
    image that is not an inlined PNG."""
    checker = _Checker()
    checker.feed(page)
    checker.close()
    if checker.bad:
        shown = ", ".join(sorted(set(checker.bad))[:5])
        raise CardMarkupError(f"the card would contain markup it does not write itself ({shown}); "
                              f"refusing to write it (please report this as a cuvee bug)")
