"""``response_check``: keep successful HTML responses and decode their bytes to text, robustly.

The reader (cuvee.pipeline.readers) hands over HTTP payloads undecoded in ``doc.media`` (id
``RAW_PAYLOAD_ID``) with ``doc.text == ""``, because only here, with headers and bytes side by side,
can the charset be chosen well. Order of evidence (as browsers do, HTML5 "encoding sniffing"):

1. a byte-order mark;
2. the HTTP ``Content-Type: ...; charset=`` header, if the bytes actually decode with it;
3. ``<meta charset>`` / ``<meta http-equiv="Content-Type" content="...charset=...">`` in the first 4 KiB,
   if the bytes decode with it;
4. strict UTF-8, then byte-level detection (uchardet via resiliparse), decoding with replacement.

Labels are mapped to WHATWG/Python codecs (``iso-8859-1`` -> ``cp1252``, ``gb2312`` -> ``gbk``). The step
writes ``doc.text`` (the HTML), ``metadata["charset"]`` and ``metadata["charset_source"]`` and removes the
raw payload from ``doc.media`` so that nothing transient reaches a writer.

Drop reasons: ``http_status``, ``content_type``, ``binary`` (NULs / known binary magic numbers),
``empty`` (no payload). WET ``conversion`` records and documents that already carry text (e.g. read
from JSONL) pass through unchanged.
"""

from __future__ import annotations

import codecs
import re

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field

from cuvee.pipeline.readers import RAW_PAYLOAD_ID
from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

HTML_TYPES = ("text/html", "application/xhtml+xml")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_BINARY_MAGIC = (b"%PDF", b"PK\x03\x04", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"\x1f\x8b", b"Rar!", b"7z\xbc\xaf",
                 b"OggS", b"ID3", b"\x00\x00\x01\x00", b"RIFF", b"wOFF", b"wOF2", b"\xd0\xcf\x11\xe0", b"MZ")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.I)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.I)


def _codec(label: str | None) -> str | None:
    """WHATWG label -> Python codec name, or None when unknown."""
    if not label:
        return None
    from resiliparse.parse.encoding import map_encoding_to_html5

    name = map_encoding_to_html5(label.strip().strip("\"'"), fallback_utf8=False)
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _try(payload: bytes, enc: str | None) -> str | None:
    if not enc:
        return None
    try:
        return payload.decode(enc)
    except (UnicodeDecodeError, LookupError):
        return None


def decode_html(payload: bytes, content_type: str = "") -> tuple[str, str, str]:
    """Bytes -> (text, codec name, source) with source one of bom, header, meta, utf8, detected."""
    for bom, enc in _BOMS:
        if payload.startswith(bom):
            return payload.decode(enc, "replace"), enc, "bom"
    m = _HEADER_CHARSET.search(content_type or "")
    header_enc = _codec(m.group(1)) if m else None
    text = _try(payload, header_enc)
    if text is not None:
        return text, header_enc, "header"
    m = _META_CHARSET.search(payload[:4096])
    meta_enc = _codec(m.group(1).decode("ascii", "ignore")) if m else None
    if meta_enc in ("utf-16", "utf-16-le", "utf-16-be"):  # a meta tag readable as ASCII cannot be UTF-16
        meta_enc = "utf-8"
    text = _try(payload, meta_enc)
    if text is not None:
        return text, meta_enc, "meta"
    text = _try(payload, "utf-8")
    if text is not None:
        return text, "utf-8", "utf8"
    from resiliparse.parse.encoding import detect_encoding

    enc = _codec(detect_encoding(payload)) or "utf-8"
    return payload.decode(enc, "replace"), enc, "detected"


def is_binary(payload: bytes) -> bool:
    """Known binary formats or NUL bytes near the start (UTF-16 with a BOM is handled before)."""
    head = payload[:1024]
    if head.startswith(_BINARY_MAGIC):
        return True
    return b"\x00" in head and not payload.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def looks_like_html(payload: bytes) -> bool:
    head = payload[:2048].lstrip().lower()
    return head.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"<body", b"<meta", b"<!--", b"<title")) or b"<html" in head


def pop_raw_payload(doc: Document) -> bytes | None:
    """Remove and return the reader's raw payload (None when the document has none)."""
    for i, m in enumerate(doc.media):
        if m.id == RAW_PAYLOAD_ID:
            del doc.media[i]
            return m.media_bytes or b""
    return None


class ResponseCheck(BaseFilter):
    """Keeps allowed HTTP statuses and HTML-ish content types; decodes the payload to ``doc.text``."""

    name = "🔎 response check + charset"
    type = "🔻 - FILTER"

    def __init__(self, statuses: tuple[int, ...] = (200,), content_types: tuple[str, ...] = HTML_TYPES,
                 exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.statuses = set(statuses)
        self.content_types = tuple(c.lower() for c in content_types)

    def _verdict(self, doc: Document) -> str | None:
        """Returns a drop reason, or None when kept (text decoded in place)."""
        md = doc.metadata
        if md.get("warc_type") == "conversion":
            return None if doc.text.strip() else "empty"
        payload = pop_raw_payload(doc)
        if payload is None:
            return None if doc.text.strip() else "empty"
        status = md.get("http_status")
        if status is not None and status not in self.statuses:
            return "http_status"
        if not payload.strip():
            return "empty"
        ctype = (md.get("content_type") or "").split(";", 1)[0].strip().lower()
        detected = (md.get("payload_type") or "").strip().lower()
        # CC's own payload detection wins over server headers (servers often lie, e.g. text/plain for HTML)
        mime = detected or ctype
        if mime and mime not in self.content_types:
            return "content_type"
        if not mime and not looks_like_html(payload):
            return "content_type"
        if is_binary(payload):
            return "binary"
        text, enc, source = decode_html(payload, md.get("content_type") or "")
        if not text.strip():
            return "empty"
        doc.text = text
        md["charset"] = enc
        md["charset_source"] = source
        return None

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        reason = self._verdict(doc)
        return (False, reason) if reason else True


class ResponseCheckParams(StageParams):
    statuses: list[int] = Field(default_factory=lambda: [200], min_length=1, description="HTTP statuses to keep")
    content_types: list[str] = Field(default_factory=lambda: list(HTML_TYPES), min_length=1, description="MIME types to keep")


@register_stage("response_check", ResponseCheckParams)
def build_response_check(p: ResponseCheckParams, ctx: BuildContext):
    """Keep HTTP 200 HTML responses and decode them (BOM > HTTP header > <meta> > UTF-8 > byte detection)."""
    return [ResponseCheck(statuses=tuple(p.statuses), content_types=tuple(p.content_types),
                          exclusion_writer=ctx.exclusion_writer())]
