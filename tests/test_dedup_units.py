"""Building blocks: normalisation, union-find, bounded-memory spill, MinHash estimates."""

import re

import numpy as np
import pytest

from cuvee.dedup import native, native_lines
from cuvee.dedup.line_dedup import distinct_per_document
from cuvee.dedup.minhash import MinHashConfig, MinHasher
from cuvee.dedup.spill import key_partitions
from cuvee.dedup.text import normalize_line, normalize_lines, normalize_text, normalize_url, words
from cuvee.dedup.unionfind import components
from tests._dedup_helpers import real_texts


@pytest.mark.parametrize("a,b", [
    ("https://www.Example.com/a/?utm_source=x&b=2&a=1#top", "http://example.com/a?a=1&b=2"),
    ("http://example.com:80/index.html", "https://example.com/"),
    ("http://example.com//x//y/", "http://example.com/x/y"),
])
def test_url_variants_normalise_equal(a, b):
    assert normalize_url(a) == normalize_url(b)


def test_url_normalisation_keeps_real_differences():
    assert normalize_url("http://example.com/a?id=1") != normalize_url("http://example.com/a?id=2")
    assert normalize_url("http://example.com/a") != normalize_url("http://example.org/a")
    assert normalize_url("http://example.com:8080/a") != normalize_url("http://example.com/a")


def test_text_and_line_normalisation():
    assert normalize_text("  Hello \n\t World ") == normalize_text("hello world")
    assert normalize_line("Copyright © 2021, ACME Inc.") == normalize_line("copyright 2023 acme inc")
    assert normalize_line("Café déjà-vu!") == "cafe deja vu"
    assert normalize_line(" ... ") == ""


def test_union_find_matches_reference():
    rng = np.random.default_rng(3)
    n = 500
    u, v = rng.integers(0, n, 400), rng.integers(0, n, 400)
    label = components(n, u, v)
    # reference: simple Python union-find
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(u, v):
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    ref = [find(x) for x in range(n)]
    assert label.tolist() == ref  # both label a component by its smallest member


def test_spill_partitions_group_equal_keys_within_budget(tmp_path):
    rng = np.random.default_rng(0)
    dt = np.dtype([("h", "<u8")])
    keys = rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2)
    recs = np.zeros(30000, dtype=dt)
    recs["h"] = keys[rng.integers(0, len(keys), len(recs))]

    def chunks():
        return (recs[i:i + 1000] for i in range(0, len(recs), 1000))

    seen = {}
    parts = list(key_partitions(chunks, dt, "h", len(recs), budget_bytes=60_000, tmp_dir=tmp_path,
                                stats=lambda k, v: seen.setdefault(k, v)))
    assert seen["spill_partitions"] >= 4 and len(parts) == seen["spill_partitions"]
    assert sum(len(p) for p in parts) == len(recs)
    owners = {}
    for i, p in enumerate(parts):
        for k in np.unique(p["h"]).tolist():
            assert owners.setdefault(k, i) == i  # a key never spans two partitions
    assert max(p.nbytes for p in parts) * 3 <= 60_000 * 2
    assert not list(tmp_path.iterdir())  # spill files cleaned up


@pytest.mark.parametrize("backend", ["numba", "numpy", "rensa"])
def test_minhash_estimates_jaccard(backend):
    mh = MinHasher(MinHashConfig(num_bands=16, rows_per_band=16, backend=backend))
    text = " ".join(real_texts()[:3])
    w = text.split()
    for cut in (0.1, 0.3, 0.5):
        k = int(len(w) * cut)
        variant = " ".join(w[:len(w) // 2] + ["inserted"] * 3 + w[len(w) // 2 + k:])
        sa, sb = set(mh.shingles(text).tolist()), set(mh.shingles(variant).tolist())
        jac = len(sa & sb) / len(sa | sb)
        sig, has = mh.signatures([text, variant])
        est = float((sig[0] == sig[1]).mean())
        assert has.all()
        assert abs(est - jac) < 4 * np.sqrt(jac * (1 - jac) / 256) + 0.02, (cut, jac, est)


@pytest.mark.parametrize("backend", ["numba", "numpy", "rensa"])
def test_minhash_empty_and_short_texts(backend):
    mh = MinHasher(MinHashConfig(backend=backend))
    sig, has = mh.signatures(["", "two words", "!!!", "\ud800 lone surrogate"])
    assert has.tolist() == [False, True, False, True]
    assert (sig[0] == 0xFFFFFFFF).all() and (sig[1] != 0xFFFFFFFF).any()


TRICKY = ["Straße ΟΔΟΣ déjà-vu — «quoted» 1,234.5 snake_case x²", "日本語のテキスト、句読点。", "a\u0301b e\u0308", "", "!!!",
          "one", "two words", "İstanbul ǅ ﬁ", "tab\tsep\u00a0nbsp\u2028line"]

M64 = 2**64 - 1


def _mix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _reference_signature(text: str, mh: MinHasher) -> list[int] | None:
    """The numba kernel's definition, written out in plain Python integers."""
    hs = []
    for w in words(text):  # re.findall(r"\w+", text.lower())
        h = native.FNV_OFFSET
        for ch in w:
            h = ((h ^ ord(ch)) * native.FNV_PRIME) & M64
        hs.append(_mix(h))
    if not hs:
        return None
    n = min(mh.config.n_grams, len(hs))
    g = [int(x) for x in mh.gram_mult]
    shingles = [_mix((sum(hs[i + j] * g[j] for j in range(n)) + n) & M64) for i in range(len(hs) - n + 1)]
    return [min(((int(a) * x + int(b)) & M64) >> 32 for x in shingles) for a, b in zip(mh.a, mh.b)]


def test_numba_kernel_matches_plain_python_definition():
    mh = MinHasher(MinHashConfig(num_bands=4, rows_per_band=4, backend="numba"))
    texts = list(real_texts()[:3]) + TRICKY
    sig, has = mh.signatures(texts)
    for i, t in enumerate(texts):
        ref = _reference_signature(t, mh)
        assert has[i] == (ref is not None), t
        if ref is not None:
            assert sig[i].tolist() == ref, t


def test_numba_signatures_do_not_depend_on_batching(monkeypatch):
    mh = MinHasher(MinHashConfig(backend="numba"))
    texts = list(real_texts()[:40]) + TRICKY
    whole, has = mh.signatures(texts)
    one_by_one = np.concatenate([mh.signatures([t])[0] for t in texts])
    assert (whole == one_by_one).all()
    monkeypatch.setattr(native, "MAX_BATCH_CODE_POINTS", 3000)  # many kernel calls per batch
    split, split_has = mh.signatures(texts)
    assert (split == whole).all() and (split_has == has).all()
    # and the minimums equal numpy's over the same shingles (the two code paths share the definition)
    ref, ref_has = MinHasher(MinHashConfig(backend="numpy")).signatures_from_shingles([mh.shingles(t) for t in texts])
    assert (whole == ref).all() and (has == ref_has).all()


def test_word_table_is_pythons_regex():
    table = native.word_char_table()
    for cp in list(range(0, 0x3000)) + [0x4E00, 0x1F600, 0x10FFFF, 0xD800, 0x0301, 0x00B2, 0x2160]:
        assert bool(table[cp]) == bool(re.match(r"\w", chr(cp))), hex(cp)


def test_code_points_are_str_lower_exactly():
    """The kernels' input is lowered through str.lower's table; the two code points it does not lower one to one
    (U+0130 becomes two, U+03A3 depends on its neighbours: final sigma) send their texts through str.lower."""
    every = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    texts = [every[i:i + 50_000] for i in range(0, len(every), 50_000)]
    texts += ["ΟΔΟΣ ΣΟΦΙΑΣ.", "İstanbul", "plain ascii", "", "ΣΑ", "aΣ b"] + list(real_texts()[:20])
    cps, offsets = native.code_points(texts)
    for i, t in enumerate(texts):
        got = cps[offsets[i]:offsets[i + 1]].tobytes().decode("utf-32-le", "surrogatepass")
        assert got == t.lower(), i
    assert "ς" in native.code_points(["ΟΔΟΣ"])[0].tobytes().decode("utf-32-le")  # the final sigma, in context


def test_normalize_lines_equals_line_by_line():
    texts = list(real_texts()[:200]) + TRICKY + ["ΟΔΟΣ ΣΑΣ\nΟΔΟΣ\r\nCafé\n\n  x  \n"]
    for t in texts:
        assert normalize_lines(t) == [normalize_line(x) for x in t.split("\n")]


LINE_TRICKY = TRICKY + ["한국어 텍스트\n٣٤ ১২ x\x1cy\x0bz\r\n\ud800 ok", "\n\n", " _a_b_ ", "ﬀ Å Ǆ ẞ ᾈ",
                        "x\u0344y\u0f73z", "Ⅻ ½ ²\n\u3000full\u3000width\u3000"]


def test_compiled_line_hashes_equal_python_normalisation():
    texts = list(real_texts()[:300]) + LINE_TRICKY
    hashes, n_lines = native_lines.line_hashes_of(texts)
    assert n_lines.tolist() == [t.count("\n") + 1 for t in texts]
    ref = [native_lines.reference_line_hash(x) for t in texts for x in normalize_lines(t)]
    assert hashes.tolist() == ref
    # equal normalised lines, equal hashes; blank or punctuation-only lines are 0 (never removed)
    a, _ = native_lines.line_hashes_of(["Copyright © 2021, ACME Inc.\n ... \nCafé déjà-vu!"])
    b, _ = native_lines.line_hashes_of(["copyright 2023 acme inc\n\ncafe DEJA VU"])
    assert a.tolist() == b.tolist() and a[1] == 0 and a[0] != 0


def test_compiled_line_hashes_every_code_point():
    """Every code point, on its own line and between letters, hashes as the Python normalisation says."""
    every = np.arange(0x110000, dtype=np.uint32)
    s = every[every != 10].tobytes().decode("utf-32-le", "surrogatepass")
    lines = [s[i:i + 7] for i in range(0, len(s), 7)]
    text = "\n".join(lines + ["a" + x + "b" for x in lines])
    hashes, _ = native_lines.line_hashes_of([text])
    assert hashes.tolist() == [native_lines.reference_line_hash(x) for x in normalize_lines(text)]
    # the kernel treats every non-word character as a separator: valid because re's \s is str.isspace()
    assert {m.start() for m in re.finditer(r"\s", s)} == {i for i, c in enumerate(s) if c.isspace()}


def test_normalize_text_equals_regex_definition():
    """normalize_text uses str.split(): the same text as re.sub(r"\\s+", " ", ...).strip() on every whitespace."""
    spaces = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
    texts = list(real_texts()[:300]) + LINE_TRICKY + [spaces, "a" + spaces + "B", "x".join(spaces), ""]
    for t in texts:
        assert normalize_text(t) == re.sub(r"\s+", " ", t.lower()).strip()


def test_compiled_exact_normalisation_every_code_point():
    """Exact dedup's compiled lowering and folding give normalize_text's UTF-8 bytes: every code point alone,
    between letters and in whitespace runs; real texts; one text at a time and in one batch; the whitespace
    table is str.isspace everywhere."""
    from cuvee.dedup.native_exact import normalized_batch, space_table

    table = space_table()
    every = np.arange(0x110000, dtype=np.uint32)
    s = every.tobytes().decode("utf-32-le", "surrogatepass")
    assert np.flatnonzero(table).tolist() == [i for i, c in enumerate(s) if c.isspace()]
    chunks = [s[i:i + 5] for i in range(0, len(s), 5)]
    texts = ["a" + c + "B" for c in chunks[:4000]] + [" \t" + "\u3000\x85 ".join(chunks[i:i + 50]) + " \n"
                                                        for i in range(0, len(chunks), 50)]
    texts += list(real_texts()[:300]) + LINE_TRICKY + ["", " ", "\u2028\u2029", "İSTANBUL  ΣΊΣΥΦΟΣ\n\n"]
    # ASCII and other whitespace meeting at a run's start, middle and end (the ASCII path folds without a branch)
    texts += ["a \u3000 b", "\u3000a", "a\u3000", " \u3000 ", "\u3000 \u3000X y\u2028", "\tA\x1c", "é \t", " é",
              "\x85\x85 a\x85 \x85", "A\u00a0 \u00a0B"]
    want = [normalize_text(t).encode("utf-8", "surrogatepass") for t in texts]
    for t, w in zip(texts, want):
        assert bytes(normalized_batch([t])[0]) == w, repr(t[:40])
    # one batch: texts left to Python's lower (U+0130, U+03A3) interleaved with the rest, empty ones included
    rng = np.random.default_rng(0)
    mixed = [texts[i] for i in rng.permutation(len(texts))] + ["", "Σ", "xİ y", "ΑΣ, Ⱥ  B"]
    got = normalized_batch(mixed)
    assert len(got) == len(mixed) and sum(1 for t in mixed if "\u0130" in t or "\u03a3" in t) >= 5
    for t, g in zip(mixed, got):
        assert bytes(g) == normalize_text(t).encode("utf-8", "surrogatepass"), repr(t[:40])


def test_distinct_line_hashes_per_document():
    rng = np.random.default_rng(0)
    n_lines = rng.integers(0, 9, size=50).astype(np.uint32)
    hashes = rng.integers(0, 4, size=int(n_lines.sum())).astype(np.uint64)
    got, counts = distinct_per_document(hashes, n_lines)
    starts = np.concatenate([[0], np.cumsum(n_lines, dtype=np.int64)])
    want = [np.unique(h[h != 0]) for h in (hashes[starts[i]:starts[i + 1]] for i in range(len(n_lines)))]
    assert counts.tolist() == [len(w) for w in want]
    assert got.tolist() == np.concatenate(want).tolist()
    # real hashes use all 64 bits (sorted as unsigned), repeat inside a document, and batches hold no lines
    big = rng.integers(0, 2**64 - 1, size=40, dtype=np.uint64, endpoint=True)
    docs = [big[:30], np.concatenate([big[30:40], big[30:35], np.zeros(2, dtype=np.uint64)]), big[:0], np.concatenate([big[:10], big[5:15]])]
    got, counts = distinct_per_document(np.concatenate(docs).astype(np.uint64),
                                        np.array([len(d) for d in docs], dtype=np.uint32))
    assert counts.tolist() == [30, 10, 0, 15] and (big >= 2**63).any()
    assert got.tolist() == sorted(big[:30].tolist()) + sorted(big[30:40].tolist()) + sorted(big[:15].tolist())
    got, counts = distinct_per_document(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint32))
    assert len(got) == 0 and len(counts) == 0


def _reference_clusters(edges, lengths_by_rank, earlier_sizes):
    """Keep rule and cluster records written out plainly. Nodes: run documents (gid) and earlier clusters
    (("E", name)). Per connected component: if it holds earlier clusters, every run document is dropped and the
    largest earlier cluster (ties: the smallest name) is the keeper; else the longest text is kept, ties to the
    smallest (rank, position). Size: run documents + the earlier clusters' sizes. Returns (drops per rank,
    {(rank, pos): (size, keeper)}) with a run keeper named "rank:pos"."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
    comps = {}
    for x in list(parent):
        comps.setdefault(find(x), []).append(x)
    drops = [set() for _ in lengths_by_rank]
    records = {}
    for members in comps.values():
        docs = [m for m in members if not isinstance(m, tuple)]
        old = sorted((m[1] for m in members if isinstance(m, tuple)), key=lambda e: (-earlier_sizes[e], e))
        size = len(docs) + sum(earlier_sizes[e] for e in old)
        if old:
            keep, keeper = None, old[0]
        else:
            keep = min(docs, key=lambda g: (-int(lengths_by_rank[g >> 40][g & (2**40 - 1)]), g))
            keeper = f"{keep >> 40}:{keep & (2**40 - 1)}"
        for g in docs:
            records[(g >> 40, g & (2**40 - 1))] = (size, keeper)
            if g != keep:
                drops[g >> 40].add(g & (2**40 - 1))
    return drops, records


@pytest.mark.parametrize("with_index", [False, True])
def test_cluster_phase_streams_edges_and_applies_keep_rule(tmp_path, with_index):
    """Drop lists, every member's cluster record (size, keeper) and the index written for later runs, against
    the plain union-find above; an earlier run's index holds three clusters of known sizes."""
    from cuvee.dedup.clusters import CLUSTER_RECORD, EARLIER, StringTable, StringTableWriter, id_table_prefix
    from cuvee.dedup.files import load_array, save_array
    from cuvee.dedup.minhash_dedup import DOC_META, MinhashClusters
    from cuvee.dedup.minhash_index import EARLIER_REF

    rng = np.random.default_rng(7)
    cfg = MinHashConfig(num_bands=3, rows_per_band=2)
    sizes = [700, 0, 500]  # a rank that holds no documents too
    lengths = []
    for r, n in enumerate(sizes):
        meta = np.zeros(n, dtype=DOC_META)
        meta["len"] = rng.integers(1, 6, n)  # few distinct lengths: many ties
        meta["has"] = 1
        save_array(tmp_path / "sigs" / f"{r:05d}.meta", meta)
        lengths.append(meta["len"])
        ids = StringTableWriter(id_table_prefix(tmp_path, r))
        ids.write([f"{r}:{p}" for p in range(n)])  # a document's id names its rank and position
        ids.close()
    earlier = tmp_path / "earlier_index"  # string number -> (cluster size, keeper): strings 0..2 keep 3 clusters
    earlier_sizes = {"old-a": 4, "old-b": 7, "old-c": 4}
    save_array(earlier / "size.u64", np.array(list(earlier_sizes.values()), dtype=np.uint64))
    table = StringTableWriter(earlier / "ids")
    table.write(list(earlier_sizes))
    table.close()
    gids = np.array([(r << 40) | p for r, n in enumerate(sizes) for p in range(n)], dtype=np.uint64)
    all_edges = []
    for b in range(cfg.num_bands):
        e = rng.choice(gids, size=(300, 2))
        e = e[e[:, 0] != e[:, 1]]
        save_array(tmp_path / "edges" / f"band{b:03d}.u64", e)
        all_edges += [(int(x), int(y)) for x, y in e]
        hits = np.zeros((0, 2), dtype=np.uint64)
        if with_index and b == 1:  # documents matching an earlier run's clusters, some of them alone
            string = rng.integers(0, 3, 20).astype(np.uint64)
            hits = np.stack([rng.choice(gids, 20), EARLIER_REF | string], axis=1)
            all_edges += [(int(x), ("E", list(earlier_sizes)[int(s)])) for x, s in zip(hits[:, 0], string)]
        save_array(tmp_path / "edges" / f"earlier{b:03d}.u64", hits)
    step = MinhashClusters(tmp_path, cfg, len(sizes), memory_budget_mb=1, reuse_index=[str(earlier)],
                           index_dir=str(tmp_path / "index"))
    step.budget = 4096  # chunks of ~1k records: many edge and document chunks
    list(step.run())
    ref_drops, ref_records = _reference_clusters(all_edges, lengths, earlier_sizes)
    got_records = {}
    for r in range(len(sizes)):
        got = load_array(tmp_path / "drops" / f"{r:05d}.u64", np.uint64).tolist()
        assert got == sorted(ref_drops[r])
        for rec in load_array(tmp_path / "clusters" / f"{r:05d}.bin", CLUSTER_RECORD):
            keeper = (StringTable(tmp_path / "clusters" / "earlier")[int(rec["kpos"])] if rec["krank"] == EARLIER
                      else f"{rec['krank']}:{rec['kpos']}")
            got_records[(r, int(rec["pos"]))] = (int(rec["size"]), keeper)
    assert got_records == ref_records
    assert sum(len(d) for d in ref_drops) > 100
    assert with_index == any(k.startswith("old") for _, k in ref_records.values())
    # the index a later run reads: each document's keeper (its own id when alone) and cluster size
    names, cluster = StringTable(tmp_path / "index" / "ids"), load_array(tmp_path / "index" / "cluster.u64", np.uint64)
    size = load_array(tmp_path / "index" / "size.u64", np.uint64)
    dense = [(r, p) for r, n in enumerate(sizes) for p in range(n)]
    assert [(int(size[i]), names[int(cluster[i])]) for i in range(len(dense))] == [
        ref_records.get(d, (1, f"{d[0]}:{d[1]}")) for d in dense]


def test_batched_doc_stats_equal_per_document_updates():
    from datatrove.data import Document
    from datatrove.pipeline.filters.base_filter import BaseFilter

    from cuvee.dedup.steps import add_doc_stats

    class Keep(BaseFilter):
        def filter(self, doc):
            return True

    one, batched = Keep(), Keep()
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(real_texts()[:50])]
    for d in docs:
        one.update_doc_stats(d)
    for lo in range(0, 50, 16):
        add_doc_stats(batched, docs[lo:lo + 16])
    a, b = one.stats["doc_len"], batched.stats["doc_len"]
    assert (a.total, a.n, a.min, a.max) == (b.total, b.n, b.min, b.max)
    assert b.mean == pytest.approx(a.mean, rel=1e-12) and b.variance == pytest.approx(a.variance, rel=1e-9)
    tokens = Keep()
    add_doc_stats(tokens, [Document(text="ab", id="t", metadata={"token_count": 3})])
    assert tokens.stats["doc_len_tokens"].total == 3  # documents with token counts keep datatrove's own update


def test_exact_key_records_from_arrays_equal_the_tuple_path(tmp_path):
    """KeyRecorder writes the same KEY_RECORDs (key halves, rank, position; empty texts left out and counted)
    from TextKeyer's arrays as from its per-document tuples; the halves are the 128-bit digest's."""
    import xxhash
    from datatrove.data import Document

    from cuvee.dedup.exact_dedup import TextKeyer, text_digests
    from cuvee.dedup.keyed import KEY_RECORD, KeyRecorder

    texts = list(real_texts()[:200])
    texts = texts + texts[:30] + ["", "  \n ", "Σ İ mixed"] + [t.upper() for t in texts[:5]]
    docs = [Document(text=t, id=f"d{i}") for i, t in enumerate(texts)]

    class TuplesOnly:  # the generic path: no key_arrays
        def __call__(self, batch):
            return TextKeyer()(batch)

    out = {}
    for name, keyer in (("arrays", TextKeyer()), ("tuples", TuplesOnly())):
        rec = KeyRecorder(tmp_path / name, 3, keyer)
        assert list(rec.run(iter(docs), rank=2)) == docs
        out[name] = [(tmp_path / name / "keys" / f"{p:05d}" / "00002.bin").read_bytes() for p in range(3)]
        assert rec.stats.stats["no_key"].total == 2
    assert out["arrays"] == out["tuples"]
    recs = np.concatenate([np.frombuffer(b, dtype=KEY_RECORD) for b in out["arrays"]])
    recs = recs[np.argsort(recs["pos"])]
    want = [(i, h) for i, h in enumerate(text_digests(texts)) if h is not None]
    assert recs["pos"].tolist() == [i for i, _ in want] and set(recs["rank"].tolist()) == {2}
    assert [(int(a) << 64) | int(b) for a, b in zip(recs["khi"], recs["klo"])] == [h for _, h in want]
    assert xxhash.xxh3_128_intdigest(b"x") == int.from_bytes(xxhash.xxh3_128_digest(b"x"), "big")
