"""The calibrated defaults of ``llama3_ngram_lines`` and ``token_distribution_outlier`` (benchmarks/calibrate_heuristics.py)
drop clearly bad pages and keep normal prose. Corpus: real page texts shipped in the repo (WCXB DEV main content)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from datatrove.data import Document

from cuvee.filters.llama3 import (
    NgramLineFilter,
    NgramLinesParams,
    TokenDistributionOutlierParams,
    TokenKLFilter,
    _encoding,
    save_distribution,
    tokenize,
)

REPO = Path(__file__).resolve().parent.parent
CURATED = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"


def _prose(n: int = 300) -> list[str]:
    out = []
    with gzip.open(CURATED, "rt", encoding="utf-8") as f:
        for line in f:
            if t := json.loads(line).get("main_content"):
                out.append(t)
            if len(out) >= n:
                break
    return out


def _bad_pages() -> dict[str, str]:
    rng = random.Random(0)
    log = "\n".join(f"2024-03-{1 + i % 28:02d} 12:{i % 60:02d}:{(7 * i) % 60:02d} ERROR worker {i} failed to connect to "
                    f"database host db{i % 3}.internal: connection refused, retrying in {i % 5 + 1} seconds" for i in range(60))
    repeated = "Server status page\nThe following messages were logged during the last run.\n" + log
    # a list of random vocabulary tokens (random *character* strings are not KL outliers: their many distinct
    # tokens give the document a high entropy, which offsets their rarity)
    enc = _encoding(TokenDistributionOutlierParams().encoding)
    toks: list[str] = []
    while len(toks) < 300:
        try:
            tok = enc.decode([rng.randrange(1000, 100_000)]).strip()
        except KeyError:  # ids without a token
            continue
        if tok and tok.isprintable():
            toks.append(tok)
    random_tokens = " ".join(toks)
    keywords = ["cheap", "hotels", "paris", "best", "deals", "booking", "discount", "hotel"]
    stuffed = "Cheap hotels Paris\n" + "\n".join(" ".join(rng.choice(keywords) for _ in range(12)) for _ in range(40))
    return {"repeated_log_lines": repeated, "random_tokens": random_tokens, "keyword_stuffed": stuffed}


NORMAL = (
    "The river has shaped the town for centuries. Early settlers built mills along its banks, and the water powered "
    "looms that made the region known for its wool. When the railway arrived in the 1850s, the mills declined, but "
    "the station brought visitors who came to walk the valley paths and fish in the quiet pools below the weir.\n"
    "Today the old mill buildings hold a museum, a bakery and a small theatre. The museum tells the story of the "
    "families who worked there, with letters, photographs and the tools they used every day. Volunteers run guided "
    "walks on weekends, and the local school brings pupils to learn how the water wheel turned the machines."
)


@pytest.fixture(scope="module")
def kl_setup(tmp_path_factory):
    """The stage's default mode: the corpus distribution is the run's own documents (prose + planted pages)."""
    p = TokenDistributionOutlierParams()
    prose = _prose()
    bad = _bad_pages()
    enc = p.encoding
    counts = np.zeros(_encoding(enc).n_vocab, dtype=np.int64)
    for t in [*prose, *bad.values(), NORMAL]:
        counts += np.bincount(tokenize(t, enc), minlength=len(counts))
    path = tmp_path_factory.mktemp("kl") / "distribution.npy"
    save_distribution(counts, path, enc)
    return TokenKLFilter(str(path), p.max_kl, p.min_tokens, p.smoothing), prose, bad


def _kept(step, text: str) -> bool:
    if isinstance(step, NgramLineFilter):
        return any(True for _ in step.run(iter([Document(text=text, id="x")])))
    res = step.filter(Document(text=text, id="x"))
    return res[0] if isinstance(res, tuple) else bool(res)


def _ngram() -> NgramLineFilter:
    p = NgramLinesParams()
    return NgramLineFilter(p.n, p.max_coverage, p.min_words, p.max_removed_fraction)


def test_defaults_are_the_calibrated_ones():
    assert TokenDistributionOutlierParams().max_kl == pytest.approx(4.87)
    assert NgramLinesParams().max_removed_fraction == pytest.approx(0.28)


def test_ngram_lines_default_drops_a_page_of_repeated_lines():
    bad = _bad_pages()
    flt = _ngram()
    assert not _kept(flt, bad["repeated_log_lines"])
    assert flt.stats["dropped_repetitive_lines"].total == 1
    # a page with one repeated template line among prose is cleaned, not dropped
    page = NORMAL + "\n" + "\n".join(["Share this article on Facebook Twitter and LinkedIn today"] * 2)
    out = list(flt.run(iter([Document(text=page, id="y")])))
    assert len(out) == 1 and out[0].text.count("Share this article") == 1


def test_ngram_lines_default_keeps_normal_prose():
    flt = _ngram()
    prose = _prose()
    kept = sum(_kept(flt, t) for t in prose)
    assert _kept(flt, NORMAL)
    assert kept >= 0.97 * len(prose), f"{kept}/{len(prose)}"


def test_token_kl_default_drops_outliers(kl_setup):
    flt, _, bad = kl_setup
    assert not _kept(flt, bad["random_tokens"])
    assert not _kept(flt, bad["keyword_stuffed"])


def test_token_kl_default_keeps_normal_prose(kl_setup):
    flt, prose, _ = kl_setup
    assert _kept(flt, NORMAL)
    kept = sum(_kept(flt, t) for t in prose)
    assert kept >= 0.97 * len(prose), f"{kept}/{len(prose)}"
