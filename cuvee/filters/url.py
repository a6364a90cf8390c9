"""URL filter (FineWeb's first filter): blocklisted domains / URLs and banned words in the URL.

Built on datatrove's ``URLFilter``: its word lists, its Aho-Corasick sub-word automaton and, with
``use_datatrove_blocklist``, the UT1 snapshot (4.5M domains) that ships *inside* the datatrove wheel,
extracted locally by datatrove - nothing is downloaded. We add the UT1 categories copied into
``cuvee/assets`` (adult URLs, mixed_adult, gambling, dating, phishing, malware) and the user's files, and
change the matching where datatrove's is too narrow:

* UT1 ``urls`` entries have no scheme (``host/path``); datatrove compares them with the full URL, so
  they never match. We compare ``host/path`` and each of its parent paths (squidGuard semantics).
* a blocklisted domain also blocks its subdomains at any depth (datatrove: registered domain or exact
  host only).
* the public-suffix list is tldextract's bundled snapshot (datatrove's default tries the network).

Drop reasons: ``missing_url``, ``domain`` (registered domain listed), ``subdomain`` (a longer host suffix
listed), ``url``, ``hard_blacklisted`` (banned word), ``soft_blacklisted`` (>= N soft words),
``blacklisted_subword`` - datatrove's names, so counts compare with FineWeb's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from datatrove.pipeline.filters.url_filter import URLFilter, normalize, normalizer
from datatrove.utils.logging import logger
from pydantic import Field, field_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "url_lists"
UT1_DIR = ASSETS / "ut1_blacklists_partial" / "blacklists"
FINEWEB_WORDS_DIR = ASSETS / "datatrove_fineweb_assets"
UT1_CATEGORIES = ("adult", "mixed_adult", "gambling", "dating", "phishing", "malware")


def read_list(path: str | Path) -> list[str]:
    """Non-empty, non-comment lines of a list file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"URL filter list {path} does not exist")
    return [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def url_key(url: str) -> tuple[str, str]:
    """(host, "host/path") in UT1's form: lower-cased host without ``www.`` or port, no scheme/query."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = (parts.hostname or "").rstrip(".")
    host = host.removeprefix("www.")
    path = parts.path.rstrip("/")
    return host, host + path


def _strip_www(entry: str) -> str:
    entry = entry.lower().rstrip("/")
    return entry.removeprefix("www.")


class CuveeURLFilter(URLFilter):
    """datatrove's URLFilter with offline public-suffix data, UT1 ``host/path`` URLs and subdomain matching."""

    name = "😈 URL filter (cuvee)"

    def __init__(self, domains: Iterable[str] = (), urls: Iterable[str] = (), banned_words: Iterable[str] = (),
                 banned_subwords: Iterable[str] = (), soft_banned_words: Iterable[str] = (),
                 soft_word_threshold: int = 2, use_datatrove_blocklist: bool = True,
                 keep_missing_url: bool = False, exclusion_writer=None):
        super().__init__(soft_word_threshold=soft_word_threshold, extra_domains=None, extra_urls=None,
                         banned_words=list(banned_words) or None, banned_subwords=list(banned_subwords) or None,
                         soft_banned_words=list(soft_banned_words) or None,
                         use_integrated_lists=use_datatrove_blocklist, exclusion_writer=exclusion_writer)
        from tldextract import TLDExtract

        self.tldextractor = TLDExtract(suffix_list_urls=(), cache_dir=None)  # bundled snapshot, no network
        self.block_listed_domains = {_strip_www(d) for d in domains}
        self.block_listed_url = {_strip_www(u) for u in urls}
        self.keep_missing_url = keep_missing_url

    def download_data(self):
        # datatrove extracts its bundled tarball (no network) and unions it into our sets; its URL entries are
        # scheme-less like UT1's, we normalise both the same way
        if self._downloaded or not self.use_integrated_lists:
            return
        # As datatrove's download_data, except that its 4.5M domains (already lower-case without "www.") come
        # from cuvee's memory-mapped sorted cache, built once per machine (in the parent, before the tasks:
        # see build_url_filter_step), instead of a fresh Python set per task: same membership answers,
        # milliseconds instead of seconds, no 0.8 GB per process (cuvee/filters/domain_set.py).
        from datatrove.pipeline.filters.url_filter import ASSETS_PATH, get_list

        from cuvee.filters.domain_set import UnionDomainSet, datatrove_blocklist

        domains, urls_dir = datatrove_blocklist()
        self.block_listed_domains = UnionDomainSet(domains, set(self.block_listed_domains))
        self.block_listed_url = {_strip_www(u) for u in get_list(str(urls_dir), "urls", self.block_listed_url,
                                                                  do_normalize=False)}
        self.banned_words = get_list(ASSETS_PATH, "banned_words.txt", self.banned_words)
        self.banned_subwords = get_list(ASSETS_PATH, "banned_subwords.txt", self.banned_subwords)
        self.soft_banned_words = get_list(ASSETS_PATH, "soft_banned_words.txt", self.soft_banned_words)
        for word in self.banned_subwords:
            self.banned_subwords_automaton.add_word(word, len(self.banned_subwords_automaton))
        self.banned_subwords_automaton.make_automaton()
        self._downloaded = True

    def filter(self, document) -> bool | tuple[bool, str]:
        self.download_data()
        url = document.metadata.get("url")
        if not url:
            if self.keep_missing_url:
                self.stat_update("missing_url_kept")
                return True
            return False, "missing_url"
        url = str(url)
        host, host_path = url_key(url)
        if host:
            info = self.tldextractor(host)
            registered = info.top_domain_under_public_suffix if hasattr(info, "top_domain_under_public_suffix") else info.registered_domain
            if registered and registered in self.block_listed_domains:
                return False, "domain"
            labels = host.split(".")
            for i in range(len(labels) - 1):  # a listed parent domain blocks every subdomain
                suffix = ".".join(labels[i:])
                if suffix != registered and suffix in self.block_listed_domains:
                    return False, "subdomain"
        if self.block_listed_url:
            probe = host_path
            while True:
                if probe in self.block_listed_url:
                    return False, "url"
                cut = probe.rfind("/")
                if cut <= len(host) - 1 or cut < 0:
                    break
                probe = probe[:cut]
        url_words = set(normalizer.split(url.lower()))
        if any(word in url_words for word in self.banned_words):
            return False, "hard_blacklisted"
        if sum(word in url_words for word in self.soft_banned_words) >= self.soft_word_threshold:
            return False, "soft_blacklisted"
        if self.banned_subwords and next(self.banned_subwords_automaton.iter(normalize(url)), False):
            return False, "blacklisted_subword"
        return True


class URLFilterParams(StageParams):
    categories: list[str] = Field(default_factory=lambda: ["adult", "mixed_adult"],
                                  description=f"UT1 categories from cuvee/assets: {', '.join(UT1_CATEGORIES)}")
    use_datatrove_blocklist: bool = Field(True, description="also the 4.5M-domain UT1 snapshot bundled in datatrove (FineWeb); "
                                                 "cached once per machine (~1.5 s CPU), then memory-mapped by every task")
    use_fineweb_words: bool = Field(True, description="FineWeb's banned / sub- / soft-banned URL words")
    soft_word_threshold: int = Field(2, ge=1, description="drop when the URL has at least this many soft-banned words")
    extra_domains: list[str] = Field(default_factory=list, description="domains to block (subdomains included)")
    extra_domain_files: list[str] = Field(default_factory=list, description="files with one domain per line")
    extra_url_files: list[str] = Field(default_factory=list, description="files with one host/path per line")
    extra_banned_words: list[str] = Field(default_factory=list, description="whole words banned in URLs")
    extra_banned_subwords: list[str] = Field(default_factory=list, description="substrings banned in URLs")
    keep_missing_url: bool = Field(False, description="keep documents without metadata['url'] (counted) instead of dropping")

    @field_validator("categories")
    @classmethod
    def _known(cls, v):
        bad = [c for c in v if c not in UT1_CATEGORIES]
        if bad:
            raise ValueError(f"unknown UT1 categories {bad}; available: {', '.join(UT1_CATEGORIES)}")
        return v

    @field_validator("extra_domain_files", "extra_url_files")
    @classmethod
    def _exists(cls, v):
        missing = [f for f in v if not Path(f).is_file()]
        if missing:
            raise ValueError(f"list files do not exist: {missing}")
        return v


def build_url_filter_step(p: URLFilterParams, exclusion_writer=None) -> CuveeURLFilter:
    domains: list[str] = list(p.extra_domains)
    urls: list[str] = []
    for cat in p.categories:
        if (UT1_DIR / cat / "domains").is_file():
            domains += read_list(UT1_DIR / cat / "domains")
        if (UT1_DIR / cat / "urls").is_file():
            urls += read_list(UT1_DIR / cat / "urls")
    for f in p.extra_domain_files:
        domains += read_list(f)
    for f in p.extra_url_files:
        urls += read_list(f)
    words = read_list(FINEWEB_WORDS_DIR / "banned_words.txt") if p.use_fineweb_words else []
    subwords = read_list(FINEWEB_WORDS_DIR / "banned_subwords.txt") if p.use_fineweb_words else []
    soft = read_list(FINEWEB_WORDS_DIR / "soft_banned_words.txt") if p.use_fineweb_words else []
    if not (domains or urls or words or subwords or p.extra_banned_words or p.extra_banned_subwords
            or p.use_datatrove_blocklist):
        logger.warning("url_filter has no lists configured: every document with a URL will be kept")
    return CuveeURLFilter(domains=domains, urls=urls, banned_words=words + p.extra_banned_words,
                          banned_subwords=subwords + p.extra_banned_subwords, soft_banned_words=soft,
                          soft_word_threshold=p.soft_word_threshold,
                          use_datatrove_blocklist=p.use_datatrove_blocklist, keep_missing_url=p.keep_missing_url,
                          exclusion_writer=exclusion_writer)


@register_stage("url_filter", URLFilterParams)
def build_url_filter(p: URLFilterParams, ctx: BuildContext):
    """FineWeb URL filter: UT1 blocklisted domains/URLs plus banned, sub- and soft-banned words in the URL."""
    if p.use_datatrove_blocklist:
        from cuvee.filters.domain_set import blocklist_cached, datatrove_blocklist
        from cuvee.pipeline.first_use import before_run

        # built in the parent before the tasks start, said on the console: the tasks only memory-map it
        before_run(ctx.stage_name, "building the URL blocklist cache (4.5M domains)", lambda: not blocklist_cached(),
                   datatrove_blocklist)
    return [build_url_filter_step(p, ctx.exclusion_writer())]
