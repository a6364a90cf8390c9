"""Normalisations shared by the dedup methods, so that trivial variants count as the same thing."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

WORD_RE = re.compile(r"\w+")
_SPACE_RE = re.compile(r"\s+")
_PUNCT_RE = re.compile(r"[^\w\s]|_")
_DIGIT_RE = re.compile(r"\d")

# query parameters that only track a visit and never change the page
TRACKING_PARAMS = frozenset(
    {"utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "gclid", "fbclid", "mc_cid", "mc_eid",
     "sessionid", "phpsessid", "sid", "jsessionid", "ref", "ref_src"}
)


def words(text: str) -> list[str]:
    """Lower-cased ``\\w+`` words: a fast regex splitter (spaCy is ~10x slower and not needed for shingles)."""
    return WORD_RE.findall(text.lower())


def normalize_text(text: str) -> str:
    """For exact dedup: case, whitespace runs and surrounding space do not make a document different.

    The definition exact dedup's key follows; the stage itself uses the compiled equivalent
    (:func:`cuvee.dedup.native_exact.normalized_batch`, tested equal on every code point). ``str.split()``
    splits on exactly the characters the regex ``\\s`` matches (both use ``str.isspace``)."""
    return " ".join(text.lower().split())


def _strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if not unicodedata.combining(c))


def normalize_line(line: str) -> str:
    """ccNet line normalisation: lower case, no accents, digits -> 0, no punctuation, single spaces."""
    s = line.lower()
    if not s.isascii():
        s = _strip_accents(s)
    s = _DIGIT_RE.sub("0", s)
    s = _PUNCT_RE.sub(" ", s)
    return _SPACE_RE.sub(" ", s).strip()


_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")


def normalize_lines(text: str) -> list[str]:
    """``[normalize_line(x) for x in text.split("\n")]``, with the regex work done once per document
    instead of once per line. Accents are stripped run by run of non-ASCII characters (NFD and the
    removal of combining marks never look past such a run), and none of the steps creates or removes a
    newline, so the lines stay aligned."""
    s = text.lower()
    if not s.isascii():
        s = _NON_ASCII_RE.sub(lambda m: _strip_accents(m.group()), s)
    s = _PUNCT_RE.sub(" ", _DIGIT_RE.sub("0", s))
    return [" ".join(line.split()) for line in s.split("\n")]


def normalize_url(url: str) -> str:
    """Canonical form of a URL: scheme and ``www.`` ignored, host lower-cased, default port, fragment and
    tracking parameters dropped, remaining parameters sorted, trailing slash and index pages unified.
    Unparseable input is returned stripped, so it still dedups against itself."""
    url = (url or "").strip()
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port
    except ValueError:
        return url
    if not host:
        return url
    if host.startswith("www."):
        host = host[4:]
    if port and port not in (80, 443):
        host = f"{host}:{port}"
    path = re.sub(r"/{2,}", "/", parts.path or "/")
    path = re.sub(r"/(index|default)\.(html?|php|aspx?)$", "/", path, flags=re.I)
    if len(path) > 1:
        path = path.rstrip("/")
    query = sorted((k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() not in TRACKING_PARAMS)
    return urlunsplit(("", host, path, urlencode(query), ""))[2:]
