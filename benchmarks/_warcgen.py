"""Wrap HTML pages into WARC files, so benchmarks and tests exercise cuvee's path from raw WARC bytes.

Each page becomes a WARC ``request`` + ``response`` pair (like Common Crawl) with real HTTP headers;
optionally a CC-style ``metadata`` record carrying a ``languages-cld2`` line.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


@dataclass
class Page:
    url: str
    body: bytes
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    cld2_languages: list[str] | None = None  # e.g. ["en"] -> a CC-style metadata record
    payload_type: str | None = "auto"  # CC's WARC-Identified-Payload-Type; "auto": the Content-Type's MIME, None: omitted


def write_warc(path: str, pages: Iterable[Page], gzip: bool = True, with_requests: bool = True, snapshot: str | None = "CC-MAIN-2099-01") -> int:
    """Write ``pages`` to ``path``; returns the number of WARC records written."""
    n = 0
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=gzip)
        if snapshot:
            info = w.create_warcinfo_record("bench.warc.gz", {"isPartOf": snapshot, "publisher": "cuvee benchmark"})
            w.write_record(info)
            n += 1
        for p in pages:
            if with_requests:
                req = StatusAndHeaders("GET / HTTP/1.1", [("Host", p.url.split("/")[2] if "://" in p.url else "x")], is_http_request=True)
                w.write_record(w.create_warc_record(p.url, "request", http_headers=req))
                n += 1
            headers = [("Content-Type", p.content_type), ("Content-Length", str(len(p.body)))] + list(p.extra_headers)
            http = StatusAndHeaders(f"{p.status} {'OK' if p.status == 200 else 'X'}", headers, protocol="HTTP/1.1")
            ptype = p.content_type.split(";")[0].strip() if p.payload_type == "auto" else p.payload_type
            warc_headers = {"WARC-Identified-Payload-Type": ptype} if ptype else None
            rec = w.create_warc_record(p.url, "response", payload=io.BytesIO(p.body), http_headers=http, warc_headers_dict=warc_headers)
            w.write_record(rec)
            n += 1
            if p.cld2_languages is not None:
                langs = {"reliable": True, "languages": [{"code": c, "text-covered": 0.9} for c in p.cld2_languages]}
                block = f"fetchTimeMs: 1\r\nlanguages-cld2: {json.dumps(langs)}\r\n\r\n".encode()
                meta = w.create_warc_record(p.url, "metadata", payload=io.BytesIO(block), warc_content_type="application/warc-fields",
                                            warc_headers_dict={"WARC-Concurrent-To": rec.rec_headers.get_header("WARC-Record-ID")})
                w.write_record(meta)
                n += 1
    return n
