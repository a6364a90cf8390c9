"""What a WARC/ARC record carries: its HTTP response (status, headers, body) and Common Crawl's own metadata.

Parsed from bytes already framed (:mod:`cuvee.pipeline.readers.framing`); a block that is not an HTTP
response raises :class:`MalformedRecord`, which the archive reader counts as ``dropped_malformed_record``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib

# CC WET files name languages with ISO-639-3; downstream stages use ISO-639-1 (fastText / CLD2 codes).
_ISO3_TO_1 = {
    "eng": "en", "deu": "de", "fra": "fr", "spa": "es", "ita": "it", "por": "pt", "nld": "nl", "rus": "ru",
    "zho": "zh", "jpn": "ja", "kor": "ko", "ara": "ar", "tur": "tr", "pol": "pl", "ces": "cs", "swe": "sv",
    "dan": "da", "nor": "no", "nob": "nb", "fin": "fi", "hun": "hu", "ron": "ro", "ell": "el", "heb": "he",
    "hin": "hi", "ben": "bn", "tha": "th", "vie": "vi", "ind": "id", "msa": "ms", "ukr": "uk", "bul": "bg",
    "hrv": "hr", "srp": "sr", "slk": "sk", "slv": "sl", "lit": "lt", "lav": "lv", "est": "et", "cat": "ca",
    "eus": "eu", "glg": "gl", "fas": "fa", "urd": "ur", "tam": "ta", "tel": "te", "mar": "mr", "kat": "ka",
    "arg": "an", "lat": "la", "isl": "is", "gle": "ga", "cym": "cy", "afr": "af", "swa": "sw", "tgl": "tl",
}


class MalformedRecord(ValueError):
    """A record whose headers cannot be parsed; counted as ``dropped_malformed_record``."""


def parse_http_response(block: bytes) -> tuple[int, dict[str, str], bytes, bytes]:
    """Split an HTTP response block into (status, lower-cased headers, decoded body, payload as stored).

    The payload as stored is what WARC-Payload-Digest is taken over (the bytes after the HTTP header block).

    Tolerant on purpose: Common Crawl stores payloads already de-chunked and de-compressed but often
    keeps the original ``Transfer-Encoding``/``Content-Encoding`` headers, so the body is only
    de-chunked / decompressed when it actually looks chunked / compressed.
    """
    if not block.startswith(b"HTTP/"):
        raise MalformedRecord("no HTTP status line")
    end = block.find(b"\r\n\r\n")
    sep = 4
    lf_end = block.find(b"\n\n")
    if end == -1 or (lf_end != -1 and lf_end < end):
        end, sep = lf_end, 2
    if end == -1:  # headers only, no body
        end, sep = len(block), 0
    head = block[:end].decode("latin-1")
    body = payload = block[end + sep :]
    lines = head.splitlines()
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[1][:3].isdigit():
        raise MalformedRecord(f"bad HTTP status line {lines[0][:80]!r}")
    status = int(parts[1][:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, colon, v = line.partition(":")
        if colon:
            headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _maybe_dechunk(body)
    enc = headers.get("content-encoding", "").lower()
    if enc:
        body = _maybe_decompress(body, enc)
    return status, headers, body, payload


def payload_digest(payload: bytes) -> str:
    """``sha1:<base32>``, as WARC-Payload-Digest writes it: the digest of a record that carries none."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


def _maybe_dechunk(body: bytes) -> bytes:
    first = body.split(b"\r\n", 1)[0].split(b";", 1)[0].strip()
    if not first or len(first) > 8 or any(c not in b"0123456789abcdefABCDEF" for c in first):
        return body  # not actually chunked (already de-chunked by the crawler)
    out, pos = [], 0
    try:
        while pos < len(body):
            eol = body.index(b"\r\n", pos)
            size = int(body[pos:eol].split(b";", 1)[0], 16)
            if size == 0:
                break
            out.append(body[eol + 2 : eol + 2 + size])
            pos = eol + 2 + size + 2
    except ValueError:
        return b"".join(out) if out else body
    return b"".join(out)


def _maybe_decompress(body: bytes, encoding: str) -> bytes:
    try:
        if "gzip" in encoding and body[:2] == b"\x1f\x8b":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body)
        if "deflate" in encoding and body[:1] in (b"\x78",):
            return zlib.decompressobj().decompress(body)
        if "br" in encoding and body[:1] not in (b"<", b" ", b"\n", b"\r", b"\t", b"\xef"):
            try:
                import brotli  # optional
            except ImportError:
                return body
            return brotli.decompress(body)
    except Exception:  # noqa: BLE001 - corrupt compressed payload: keep bytes; response_check drops it as binary
        return body
    return body


def lang_code(code: str) -> str:
    code = code.strip().lower().split("-", 1)[0].split("_", 1)[0]
    return _ISO3_TO_1.get(code, code)


def parse_cc_metadata_block(block: bytes) -> dict[str, str]:
    """CC ``metadata`` record payload (WARC fields) -> {"cc_languages": "zh,en", "cc_charset": ...}."""
    out: dict[str, str] = {}
    for line in block.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "languages-cld2":
            try:
                langs = json.loads(value.strip()).get("languages", [])
                codes = [lang_code(x["code"]) for x in langs if x.get("code")]
                out["cc_languages"] = ",".join(c for c in codes if c and c != "un")
            except (ValueError, AttributeError, TypeError):
                pass
        elif key == "charset-detected":
            out["cc_charset"] = value.strip()
    return out


def arc_date(d: str) -> str:
    d = d.strip()
    if len(d) >= 14 and d[:14].isdigit():
        return f"{d[0:4]}-{d[4:6]}-{d[6:8]}T{d[8:10]}:{d[10:12]}:{d[12:14]}Z"
    return d

