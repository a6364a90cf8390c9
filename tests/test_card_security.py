"""A card built from a crafted WARC shows hostile values as text and holds no file but its own plots.

The WARC is written by hand: target URIs whose hosts are markup (``<svg onload>``, ``<script>``, an
``<img src>`` whose entity-encoded path names a secret file), a Common Crawl metadata record whose CLD2
language code breaks out of a Markdown code span, and page titles with scripts. The recipe name and the
recipe file hold a code fence and a script, and the input folder's name holds markup too. The run and the
card go through the real CLI; card.html and README.md (rendered by a second, CommonMark renderer, as the Hub
would) must contain only the card's own elements, and no byte of the secret file.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECRET = "cuvee-test-secret-7f3a9c1e5b2d4086"

# the elements and attributes a card writes itself (python-markdown and markdown-it output for its Markdown)
ALLOWED = {
    "html": {"lang"}, "head": set(), "meta": {"charset", "name", "content"}, "title": set(), "style": set(),
    "body": set(), "details": {"class", "markdown"}, "summary": set(), "pre": set(), "code": {"class"}, "p": set(),
    "h1": set(), "h2": set(), "h3": set(), "table": {"id"}, "thead": set(), "tbody": set(), "tr": set(),
    "th": set(), "td": set(), "img": {"src", "alt"}, "ul": set(), "ol": set(), "li": set(),
    "blockquote": set(), "strong": set(), "em": set(), "br": set(), "hr": set(),
}


class Elements(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.foreign: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED:
            self.foreign.append(f"<{tag}>")
        for k, v in attrs:
            if k not in ALLOWED.get(tag, set()):
                self.foreign.append(f"<{tag} {k}={v!r}>")
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def elements(html: str) -> Elements:
    p = Elements()
    p.feed(html)
    p.close()
    return p


def warc_record(rtype: str, payload: bytes, rid: str, url: str = "", extra: dict | None = None) -> bytes:
    lines = [b"WARC/1.0", b"WARC-Type: " + rtype.encode(), b"WARC-Date: 2024-05-20T10:00:00Z",
             b"WARC-Record-ID: " + rid.encode()]
    if url:
        lines.append(b"WARC-Target-URI: " + url.encode())
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}".encode())
    lines.append(b"Content-Length: " + str(len(payload)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload + b"\r\n\r\n"


def page(i: int, title: str) -> bytes:
    paras = "".join(
        f"<p>Paragraph {k} of page {i} explains how the river valley farms rotate their crops between wheat, "
        f"barley and clover over several seasons so that the soil keeps its strength for the next harvest.</p>"
        for k in range(6))
    html = f"<html><head><title>{title}</title></head><body><article><h1>Page {i}</h1>{paras}</article></body></html>"
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + html.encode()


def crafted_warc(secret: Path) -> bytes:
    secret_ref = str(secret).replace("/", "&sol;")  # no '/' in a host; the old inliner HTML-unescaped src
    assert secret_ref == secret_ref.lower(), "hosts are lowercased: the secret's path must be lower case"
    hosts = [
        f'<img src="{secret_ref}">',
        "<svg onload=alert(1)>",
        "<script>alert(2)",
        'x"><iframe srcdoc=x>',
        '<img src="x">',
        "[x](javascript:alert(7))",
        "plain.example.com",
    ]
    langs = ["x`<img src=x onerror=alert(3)>"] + ["en"] * (len(hosts) - 1)
    recs = [warc_record("warcinfo", b"isPartOf: CC-MAIN-2024-22\r\n", "<urn:uuid:info>",
                        extra={"Content-Type": "application/warc-fields"})]
    for i, (host, lang) in enumerate(zip(hosts, langs)):
        url = f"http://{host}/page{i}"
        recs.append(warc_record("response", page(i, f"<script>alert('title{i}')</script>"), f"<urn:uuid:r{i}>", url,
                                extra={"Content-Type": "application/http; msgtype=response"}))
        meta = "languages-cld2: " + json.dumps({"languages": [{"code": lang, "text-covered": 0.99}]}) + "\r\n"
        recs.append(warc_record("metadata", meta.encode(), f"<urn:uuid:m{i}>", url,
                                extra={"Content-Type": "application/warc-fields", "WARC-Concurrent-To": f"<urn:uuid:r{i}>"}))
    return b"".join(recs)


RECIPE = '''name: "card `<img src=x onerror=alert(5)>`
```
<script>alert(4)</script>
x"
run_dir: {run}
input:
  paths: [{inputs}]
stages:
  - stage: response_check
  - stage: extract
executor: {{kind: local, tasks: 1}}
'''


def cuvee(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuvee.cli", *args], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cardsec")
    secret = tmp / "secret.txt"
    secret.write_text(SECRET + "\n")
    inputs = tmp / "in `<img src=x onerror=alert(6)>`"
    inputs.mkdir()
    (inputs / "crafted.warc").write_bytes(crafted_warc(secret))
    recipe = tmp / "recipe.yaml"
    recipe.write_text(RECIPE.format(run=json.dumps(str(tmp / "run")), inputs=json.dumps(str(inputs))))
    r = cuvee("run", str(recipe), cwd=tmp)
    assert r.returncode == 0, r.stderr
    stats = json.loads((tmp / "run" / "stats.json").read_text())
    assert stats["output"]["documents"] == 7, "every crafted page must reach the card"
    r = cuvee("card", str(tmp / "run"), cwd=tmp)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = tmp / "run" / "output"
    return {"html": (out / "card.html").read_text(), "readme": (out / "README.md").read_text(), "secret": secret}


def test_card_html_has_only_its_own_elements(card):
    found = elements(card["html"])
    assert not found.foreign, found.foreign
    assert found.images and all(src.startswith("data:image/png;base64,") for src in found.images)


def test_card_html_shows_the_hostile_values_as_text(card):
    text = "".join(elements(card["html"]).text)
    assert "(unparseable URL)" in text  # http://[x](javascript:...)/ is counted under a host, not fatal
    for shown in ("<svg onload=alert(1)>", "<script>alert(2)", 'x"><iframe srcdoc=x>',
                  "x`<img src=x onerror=alert(3)>", "<script>alert(4)</script>", "`<img src=x onerror=alert(5)>`",
                  "in `<img src=x onerror=alert(6)>`", '<img src="x">'):
        assert shown in text, shown


def test_card_embeds_no_foreign_file(card):
    html, readme = card["html"], card["readme"]
    secret_bytes = card["secret"].read_bytes()
    assert SECRET not in html and SECRET not in readme
    assert base64.b64encode(secret_bytes).decode()[:20] not in html
    for src in elements(html).images:
        png = base64.b64decode(src.split(",", 1)[1])
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and SECRET.encode() not in png


@pytest.mark.parametrize("renderer", ["python-markdown", "markdown-it"])
def test_readme_renders_without_markup_from_data(card, renderer):
    body = re.sub(r"\A---\n.*?\n---\n", "", card["readme"], flags=re.DOTALL)
    if renderer == "python-markdown":
        import markdown

        html = markdown.markdown(body, extensions=["tables", "fenced_code", "md_in_html"])
    else:
        from markdown_it import MarkdownIt

        html = MarkdownIt("commonmark", {"html": True}).enable("table").render(body)
    found = elements(html)
    assert not found.foreign, found.foreign
    assert all(src.startswith("card_images/") and src.endswith(".png") for src in found.images)
