"""One splitmix64 and one public MinHash API: the numpy, compiled and plain-integer hashes agree, and the
training-set decontamination uses dedup's MinHash through public names only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np

CUVEE = Path(__file__).resolve().parents[1] / "cuvee"


def test_splitmix64_is_defined_once():
    """Its multipliers appear in exactly one module: every other hash reaches it through that module."""
    holders = sorted(p.relative_to(CUVEE).as_posix() for p in CUVEE.rglob("*.py")
                     if re.search(r"0x[bB][fF]58476[dD]1[cC][eE]4[eE]5[bB]9", p.read_text()))
    assert holders == ["dedup/splitmix.py"]


def test_splitmix64_numpy_njit_and_int_agree():
    from cuvee.dedup.native import mix
    from cuvee.dedup.splitmix import mix64, mix64_int

    # the reference sequence: splitmix64 seeded with 0 yields finalise(0x9E3779B97F4A7C15) first
    assert mix64_int(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    xs = np.random.default_rng(7).integers(0, 2**63, size=200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    xs = np.concatenate([xs, np.array([0, 1, 2**64 - 1], dtype=np.uint64)])
    vec = mix64(xs)
    assert [int(v) for v in vec] == [mix64_int(int(x)) for x in xs]
    assert [int(mix(x)) for x in xs] == [int(v) for v in vec]


def test_decontam_uses_only_public_dedup_names():
    tree = ast.parse((CUVEE / "train" / "decontam.py").read_text())
    private = [f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and (n.module or "").startswith("cuvee.dedup") for a in n.names if a.name.startswith("_")]
    assert private == []
    assert not any(isinstance(n, ast.FunctionDef) and n.name.startswith("_token_minhash") for n in ast.walk(tree))


def test_token_minhash_api_numba_numpy_agree_and_match_word_shingles():
    from cuvee.dedup.minhash import (
        MinHashConfig,
        MinHasher,
        ngram_hashes,
        token_shingles,
        token_signatures,
    )

    h = MinHasher(MinHashConfig(n_grams=3, num_bands=4, rows_per_band=2, seed=5, backend="numpy"))
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50_000, size=n) for n in (0, 2, 3, 40, 400)]
    s1, has1 = token_signatures(docs, h, use_numba=True)
    s2, has2 = token_signatures(docs, h, use_numba=False)
    assert has1.tolist() == has2.tolist() == [False, False, True, True, True]
    assert np.array_equal(s1, s2)
    # the same n-gram combination the text path uses for word hashes
    w = np.arange(10, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    assert np.array_equal(np.unique(ngram_hashes(w, h.gram_mult)), token_shingles(w, h))
    assert token_shingles(np.arange(2), h).size == 0
