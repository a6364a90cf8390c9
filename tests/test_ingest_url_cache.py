"""The URL filter's cached domain set answers exactly like datatrove's Python set, and its cache follows the source."""

from __future__ import annotations

import os
import random
import string

from datatrove.pipeline.filters.url_filter import get_list

from cuvee.filters.domain_set import UnionDomainSet, load_domain_set


def _domains(rng: random.Random, n: int) -> list[str]:
    tlds = ["com", "org", "de", "co.uk", "xn--p1ai", "fr"]
    out = []
    for _ in range(n):
        name = "".join(rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(rng.randint(1, 20)))
        out.append(f"{name}.{rng.choice(tlds)}")
    return out + ["bücher.de", "a.b.c.example.net", "x"]


def test_membership_identical_to_datatrove_set(tmp_path):
    rng = random.Random(7)
    doms = _domains(rng, 5000)
    src = tmp_path / "domains"
    # comments, blank-ish lines and surrounding spaces, as datatrove's parser sees them
    src.write_text("# header\n" + "\n".join(f"  {d} " if i % 97 == 0 else d for i, d in enumerate(doms)) + "\n \n", encoding="utf-8")
    reference = get_list(str(tmp_path), "domains", set(), do_normalize=False)
    cache = tmp_path / "cache"
    first = load_domain_set(src, cache)
    assert sorted(os.listdir(cache / "url_domains"))  # the cache was written
    second = load_domain_set(src, cache)  # memory-mapped from the cache
    probes = list(reference) + [d + "x" for d in doms[:2000]] + ["z" + d for d in doms[:2000]] + [d[:-1] for d in doms[:500]] + ["", "# header"]
    for s in (first, second):
        assert len(s) == len(reference)
        assert set(s) == reference
        assert [p for p in probes if (p in s) != (p in reference)] == []
    assert 42 not in second and None not in second


def test_cache_is_rebuilt_when_the_source_changes(tmp_path):
    src = tmp_path / "domains"
    src.write_text("alpha.com\nbeta.org\n")
    cache = tmp_path / "cache"
    assert "beta.org" in load_domain_set(src, cache)
    src.write_text("alpha.com\ngamma.net\n")
    os.utime(src, ns=(1, 1))  # a different mtime even on coarse file systems
    s = load_domain_set(src, cache)
    assert "gamma.net" in s and "beta.org" not in s and len(s) == 2


def test_union_with_recipe_lists(tmp_path):
    src = tmp_path / "domains"
    src.write_text("alpha.com\nbeta.org\n")
    u = UnionDomainSet(load_domain_set(src, tmp_path / "c"), {"beta.org", "mine.example"})
    assert "alpha.com" in u and "mine.example" in u and "other.com" not in u
    assert len(u) == 3 and sorted(u) == ["alpha.com", "beta.org", "mine.example"]
