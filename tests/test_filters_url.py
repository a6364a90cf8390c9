"""URL filter: UT1 lists copied into cuvee, FineWeb's URL words, datatrove's bundled blocklist offline."""

import gzip
import json
from pathlib import Path

import pytest
from datatrove.data import Document

from cuvee.filters.url import UT1_DIR, URLFilterParams, build_url_filter_step, read_list, url_key

REPO = Path(__file__).resolve().parents[1]


def decide(step, url):
    r = step.filter(Document(text="x", id="d", metadata={"url": url} if url is not None else {}))
    return r if isinstance(r, tuple) else (r, None)


@pytest.fixture(scope="module")
def step():
    return build_url_filter_step(URLFilterParams(categories=["adult", "mixed_adult", "gambling"], use_datatrove_blocklist=False))


def test_url_key_normalises_like_ut1():
    assert url_key("HTTPS://www.Example.com:8080/a/b/?q=1") == ("example.com", "example.com/a/b")
    assert url_key("example.com") == ("example.com", "example.com")


def test_ut1_lists_block_domains_subdomains_and_url_paths(step):
    gambling = read_list(UT1_DIR / "gambling" / "domains")[100]
    adult_url = read_list(UT1_DIR / "adult" / "urls")[5]
    assert decide(step, f"https://{gambling}/index.html")[0] is False
    assert decide(step, f"http://deep.sub.{gambling}/")[0] is False
    assert decide(step, f"http://{adult_url}")[1] == "url"
    assert decide(step, f"https://www.{adult_url}/more/below?x=1")[1] == "url"  # parent path listed


def test_fineweb_url_words(step):
    assert decide(step, "https://example.com/free-xxx-videos")[1] == "hard_blacklisted"
    assert decide(step, "https://www.pornhub.com/")[1] == "blacklisted_subword"


def test_clean_real_urls_are_kept(step):
    with gzip.open(REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz", "rt") as f:
        urls = [json.loads(line)["url"] for line in f][:300]
    kept = sum(decide(step, u)[0] for u in urls)
    assert kept / len(urls) >= 0.98


def test_missing_url_is_counted_or_kept():
    step = build_url_filter_step(URLFilterParams(use_datatrove_blocklist=False))
    kept = list(step.run(iter([Document(text="x", id="a"), Document(text="x", id="b", metadata={"url": "https://bbc.co.uk/"})])))
    assert [d.id for d in kept] == ["b"] and step.stats.stats["dropped_missing_url"].total == 1
    lenient = build_url_filter_step(URLFilterParams(use_datatrove_blocklist=False, keep_missing_url=True))
    assert decide(lenient, None) == (True, None)


def test_extra_lists_and_categories(tmp_path):
    f = tmp_path / "domains.txt"
    f.write_text("# my list\nblocked-example.org\n")
    step = build_url_filter_step(URLFilterParams(categories=[], use_datatrove_blocklist=False, use_fineweb_words=False,
                                                 extra_domain_files=[str(f)], extra_banned_words=["casino"]))
    assert decide(step, "https://news.blocked-example.org/a")[0] is False
    assert decide(step, "https://example.com/best-casino-games")[1] == "hard_blacklisted"
    assert decide(step, "https://example.com/free-xxx-videos")[0] is True  # FineWeb words switched off
    with pytest.raises(ValueError, match="unknown UT1 categories"):
        URLFilterParams(categories=["violence"])
    with pytest.raises(ValueError, match="do not exist"):
        URLFilterParams(extra_domain_files=[str(tmp_path / "nope.txt")])


def test_datatrove_bundled_blocklist_loads_offline():
    """The 4.5M-domain UT1 snapshot inside the datatrove wheel (slow: ~10-20 s, ~0.8 GB)."""
    step = build_url_filter_step(URLFilterParams(categories=[], use_datatrove_blocklist=True))
    step.download_data()
    assert len(step.block_listed_domains) > 1_000_000
    ours = set(read_list(UT1_DIR / "mixed_adult" / "domains"))
    only_datatrove = next(d for d in step.block_listed_domains if d not in ours and "." in d)
    assert decide(step, f"https://{only_datatrove}/page")[0] is False
    assert decide(step, "https://www.bbc.co.uk/news")[0] is True
