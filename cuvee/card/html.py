"""A self-contained HTML rendering of the card (one file: CSS inline, images as base64 data URIs).

Why self-contained: the HTML is for browsing a run on a cluster or mailing it around; a single file
cannot lose its pictures. Only the plots the card wrote are inlined, from the bytes it wrote (the caller
passes them): an ``<img src>`` is never taken as a file name to read, so no file outside those plots can
end up in the page. The finished page goes through :func:`cuvee.card.escape.check_html` before it is
returned.
"""

from __future__ import annotations

import base64
import html as _html
import re

from cuvee.card.escape import DATA_IMAGE, check_html

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;margin:24px auto;padding:0 24px;color:#1f2328;line-height:1.5}
h1{border-bottom:2px solid #3b7dd8;padding-bottom:6px} h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:12px 0;font-size:13px;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f6f8fa}
tr:nth-child(even) td{background:#fbfcfd}
td:not(:first-child){font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eaeef2;margin:8px 0}
pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px} code{font-size:90%}
blockquote{border-left:4px solid #e0795b;margin:12px 0;padding:4px 12px;background:#fff6f2}
details.meta{background:#f6f8fa;border:1px solid #d0d7de;padding:6px 10px;margin-bottom:12px}
"""


def split_front_matter(text: str) -> tuple[str, str]:
    """('yaml body', 'markdown body') of a card; ('', text) when it has no front matter."""
    m = re.match(r"^---\n(.*?)\n---\n?", text, re.DOTALL)
    return (m.group(1), text[m.end():]) if m else ("", text)


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _data_uri(png: bytes) -> str:
    if not png.startswith(PNG_MAGIC):
        raise ValueError("a card plot is not a PNG")
    return DATA_IMAGE + base64.b64encode(png).decode("ascii")


FUNNEL_HEADING = "Filter funnel"
FUNNEL_TABLE_ID = "filter-funnel"
TABLE_IDS = {f"<h2>{FUNNEL_HEADING}</h2>": FUNNEL_TABLE_ID,  # heading -> id of the first table under it
             "<h3>Removal waterfall</h3>": "removal-waterfall",
             "<h3>Spot checks: tokens traced to their pages</h3>": "spot-checks"}


def _tag_tables(html_body: str) -> str:
    """Give the funnel, waterfall and spot-check tables ids, so browsers (and the screenshot tests) can link to
    them: the first table after each heading, when no other heading comes first."""
    for heading, table_id in TABLE_IDS.items():
        h = html_body.find(heading)
        t = html_body.find("<table>", h) if h >= 0 else -1
        nxt = min((i for i in (html_body.find("<h2>", h + 1), html_body.find("<h3>", h + 1)) if i >= 0), default=-1) \
            if h >= 0 else -1
        if t < 0 or (0 <= nxt < t):
            continue
        html_body = html_body[:t] + f'<table id="{table_id}">' + html_body[t + len("<table>"):]
    return html_body


def render_html(card_md: str, images: dict[str, bytes], title: str) -> str:
    """Markdown (with front matter) -> one HTML page. ``images`` maps the card's own image references
    (``card_images/funnel.png``, exactly as the Markdown writes them) to the PNG bytes the card wrote; those
    are inlined, and any other image makes :func:`check_html` refuse the page."""
    import markdown

    front, body = split_front_matter(card_md)
    html_body = markdown.markdown(body, extensions=["tables", "fenced_code", "sane_lists", "md_in_html"], output_format="html")

    def inline(m: re.Match) -> str:
        png = images.get(m.group(2))
        return m.group(0) if png is None else f"{m.group(1)}{_data_uri(png)}{m.group(3)}"

    html_body = _tag_tables(html_body)
    html_body = re.sub(r'(<img[^>]*?\bsrc=")([^"]+)(")', inline, html_body)
    meta = (
        f'<details class="meta"><summary>Dataset card metadata (YAML front matter)</summary><pre>{_html.escape(front)}</pre></details>\n'
        if front
        else ""
    )
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_html.escape(title)}</title>"
        f"<style>{CSS}</style></head>\n<body>\n{meta}{html_body}\n</body></html>\n"
    )
    check_html(page)
    return page
