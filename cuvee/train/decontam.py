"""Eval sets that cannot overlap training: exact and near-duplicate decontamination on token ids.

:func:`decontaminate` takes eval sets and training sources (anything :func:`cuvee.train.shards.open_shards`
opens: mixer output dirs, shard prefixes, ``.idx``/``.bin`` files, mix YAMLs, or an already opened
:class:`~cuvee.train.shards.ShardSet`) and returns, per eval set, the indices of the documents that are safe
to score, plus a report of what was removed and why. It is a pure function (no CLI, no files written) that
``cuvee anneal`` calls before any training; :func:`eval_subset` turns the kept indices into a ShardSet that
:func:`cuvee.train.evaluate.evaluate` reads as is.

What is checked, per eval set (its first ``max_docs`` documents by global index: the same pool as
``evaluate(max_docs=...)`` and ``AnnealConfig.eval_docs``):

1. within the set: a document that equals (exact) or near-duplicates (Jaccard >= ``threshold``) an *earlier
   kept* document of the same set is removed (greedy, first occurrence kept, so the result is deterministic
   and no two kept documents are near-duplicates);
2. against every document of every training source: exact duplicate (128-bit xxh3 of the token ids, then
   compared token for token) or near-duplicate (MinHash LSH over token n-gram shingles gives candidate
   pairs; every candidate is verified with the *exact* Jaccard of the two shingle sets, so LSH false
   positives are never counted). A document matching both ways counts as exact.

Tokens, not text: both sides must share a tokenizer (checked against the manifests when both record one). A
trailing EOS is ignored on both sides, so shards written with and without EOS compare equal.

Shingles are ``ngram``-token windows (default 13). 13 is the n-gram length of the standard contamination checks
(GPT-3, PaLM, Llama use 13-grams; ~10 words of BPE text): long enough that unrelated documents share almost no
shingles (a common phrase is a handful of 13-grams out of hundreds, Jaccard ~0), short enough that a few edited
tokens leave most shingles intact (k edits destroy at most 13k shingles: 5 edits in a 1,000-token document keep
Jaccard ~0.88). With a byte-level tokenizer 13 tokens is only ~2-3 words, which still separates documents
(similarity is over whole documents) but makes the Jaccard of lightly edited documents drop faster; a larger
``ngram`` (~50) is the byte-level equivalent. Documents shorter than ``ngram`` tokens have no shingle: they are
checked for exact duplicates only (counted as ``short_documents`` in the report).

LSH: ``num_perm`` MinHash values (cuvee.dedup.minhash's hash family: a_i x + b_i mod 2^64, top 32 bits), split
into b bands of r rows, with the largest r whose miss probability 1-(1-(1-t^r)^b) at the threshold t is <= 1e-3
(t = 0.8, 128 permutations: 25 bands x 5 rows, 99.995 % recall at Jaccard 0.8). Recall is traded for candidates
on purpose: candidates are cheap to verify because the eval side is small.

Memory: the *eval* side (small) is held in memory - its shingle sets, and per band a sorted array of its band
keys; the training side is streamed in chunks of ``chunk_tokens`` tokens (MinHash + band keys per chunk, looked
up in the eval band index with one ``searchsorted`` per band). Memory is O(eval tokens + one chunk) whatever the
size of the training data; the candidate relation is symmetric, so indexing the eval side finds exactly the
pairs an index of the training side would. Time is linear in training tokens (numba kernel, one core).

3. containment (:mod:`cuvee.dedup.ngram_match`, the matcher of the ``decontaminate`` stage, on token ids): an
   eval document is removed when the training source holds at least ``containment`` (default 0.3) of its
   distinct ``containment_ngram``-token n-grams, counted over the *union* of the source's documents. Jaccard
   misses what containment catches: an eval document embedded between two other documents, cut into several
   training documents, or only partly copied (its first half alone: ~0.5 of its n-grams, removed at 0.3; a
   third: ~0.33, removed; a quarter: kept). ``containment_ngram`` is 13 (GPT-3's test) for subword tokenizers
   and 50 for byte-level ones (vocab <= 512; ~the bytes of 13 words): byte 13-grams are 2-3 words, and on the
   WCXB pages 60 held-out pages shared a median 18 % (max 37 %) of their byte 13-grams with 1,320 unrelated
   training pages, against a median 0 % (max 11 %) of their byte 50-grams. The contained share is computed per
   source and over all sources together (an eval document split between the two arms is still caught).

Eval sets are not checked against each other (a document may appear in two eval sets).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from cuvee.dedup.minhash import MinHashConfig, MinHasher, ngram_hashes
from cuvee.dedup.minhash import token_shingles as shingles
from cuvee.dedup.minhash import token_signatures as signatures
from cuvee.dedup.ngram_match import DEFAULT_N, NgramIndex
from cuvee.train.shards import ShardSet, open_shards

MAX_MISS = 1e-3  # LSH miss probability allowed at exactly the threshold (verification removes false positives)
EXACT, NEAR, WITHIN = "exact_overlap", "near_overlap", "duplicate_within_eval"
CONTAINED = "contained_overlap"
BYTE_CONTAINMENT_NGRAM = 50  # byte-level tokenizers: ~the span of 13 words (module doc)
_PREFERENCE = {"exact": 0, "near": 1, "contained": 2}  # the kind a removed document is reported under


def default_containment_ngram(tokenizer: dict) -> int:
    """The containment n-gram length for ``tokenizer``: 50 byte-level, 13 otherwise (module doc: why)."""
    byte = tokenizer.get("kind") == "bytes" or (tokenizer.get("vocab_size") or 1 << 20) <= 512
    return BYTE_CONTAINMENT_NGRAM if byte else DEFAULT_N


# ---- parameters -------------------------------------------------------------------------------------------
def lsh_bands(num_perm: int, threshold: float, max_miss: float = MAX_MISS) -> tuple[int, int]:
    """(bands, rows): the largest rows-per-band whose miss probability at ``threshold`` is <= ``max_miss``."""
    for rows in range(num_perm, 0, -1):
        bands = num_perm // rows
        if (1.0 - threshold ** rows) ** bands <= max_miss:
            return bands, rows
    return num_perm, 1


def _hasher(ngram: int, threshold: float, num_perm: int, seed: int) -> MinHasher:
    bands, rows = lsh_bands(num_perm, threshold)
    return MinHasher(MinHashConfig(n_grams=ngram, num_bands=bands, rows_per_band=rows, seed=seed, backend="numpy"))


# ---- hashing (cuvee.dedup.minhash's token API: shingles, signatures) -----------------------------------
def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted unique shingle arrays."""
    if not a.size or not b.size:
        return 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def _exact_key(tokens: np.ndarray) -> int:
    return xxhash.xxh3_128_intdigest(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())


def _strip_eos(tokens: np.ndarray, eos: int | None) -> np.ndarray:
    if eos is not None and len(tokens) and int(tokens[-1]) == eos:
        return tokens[:-1]
    return tokens


# ---- inputs -----------------------------------------------------------------------------------------------
def _open(spec) -> ShardSet:
    return spec if isinstance(spec, ShardSet) else open_shards(spec)


def _label(spec, i: int) -> str:
    if isinstance(spec, ShardSet):
        parents = sorted({str(Path(d.prefix).parent) for d in spec.datasets})
        return ",".join(parents) if parents else f"source {i}"
    if isinstance(spec, (list, tuple)):
        return ",".join(str(s) for s in spec)
    return str(spec)


def _check_tokenizers(a: dict, b: dict, what: str) -> None:
    for key in ("kind", "name", "vocab_size"):
        if key in a and key in b and a[key] != b[key]:
            raise ValueError(f"{what}: tokenizer {key} {b[key]!r} differs from the eval set's ({a[key]!r}); "
                             f"token ids cannot be compared")


# ---- the eval side ----------------------------------------------------------------------------------------
@dataclass
class _EvalDoc:
    set_name: str
    index: int  # global document index within its eval set
    tokens: np.ndarray  # EOS stripped
    shingles: np.ndarray
    key: int
    matches: dict = field(default_factory=dict)  # source index -> {"kind", "document", "jaccard"}


def _dedup_eval_set(name: str, shards: ShardSet, n: int, hasher: MinHasher, threshold: float,
                    use_numba: bool) -> tuple[list[_EvalDoc], dict, dict[int, dict]]:
    """Kept documents (first occurrence wins), counts, and per removed index why."""
    eos = shards.eos_id
    tokens = [np.asarray(_strip_eos(np.asarray(shards.document(i)), eos)) for i in range(n)]
    sigs, has = signatures(tokens, hasher, use_numba)
    bands = hasher.config.num_bands
    keys = np.stack([hasher.band_keys(sigs, b) for b in range(bands)], axis=1) if n else np.empty((0, bands))
    by_key: dict[int, int] = {}
    buckets: list[dict[int, list[int]]] = [{} for _ in range(bands)]  # band key -> positions in `kept`
    kept: list[_EvalDoc] = []
    removed: dict[int, dict] = {}
    short = 0
    for i in range(n):
        t = tokens[i]
        key = _exact_key(t)
        if key in by_key and np.array_equal(kept[by_key[key]].tokens, t):
            removed[i] = {"reason": WITHIN, "kind": "exact", "of": kept[by_key[key]].index}
            continue
        sh = shingles(t, hasher) if has[i] else np.empty(0, dtype=np.uint64)
        if not has[i]:
            short += 1
        else:
            cands = sorted({p for b in range(bands) for p in buckets[b].get(int(keys[i, b]), ())})
            best = max(((jaccard(sh, kept[p].shingles), p) for p in cands), default=(0.0, -1))
            if best[0] >= threshold:
                removed[i] = {"reason": WITHIN, "kind": "near", "of": kept[best[1]].index,
                              "jaccard": round(best[0], 4)}
                continue
            for b in range(bands):
                buckets[b].setdefault(int(keys[i, b]), []).append(len(kept))
        by_key.setdefault(key, len(kept))
        kept.append(_EvalDoc(name, i, t, sh, key))
    exact_within = sum(1 for r in removed.values() if r["kind"] == "exact")
    counts = {"documents": n, "duplicates_within_eval": len(removed), "exact_within_eval": exact_within,
              "near_within_eval": len(removed) - exact_within, "short_documents": short}
    return kept, counts, removed


class _EvalIndex:
    """Band-key index and exact-hash table over every kept eval document (of all eval sets)."""

    def __init__(self, docs: list[_EvalDoc], hasher: MinHasher, use_numba: bool):
        self.docs, self.hasher = docs, hasher
        self.by_key: dict[int, list[int]] = {}
        for j, d in enumerate(docs):
            self.by_key.setdefault(d.key, []).append(j)
        self.lengths = np.unique(np.fromiter((d.tokens.size for d in docs), dtype=np.int64, count=len(docs)))
        sigs, has = signatures([d.tokens for d in docs], hasher, use_numba)
        owners = np.flatnonzero(has)
        self.bands = []  # per band: (sorted keys, eval doc ids in that order)
        for b in range(hasher.config.num_bands):
            k = hasher.band_keys(sigs[owners], b) if owners.size else np.empty(0, dtype=np.uint64)
            order = np.argsort(k, kind="stable")
            self.bands.append((k[order], owners[order]))

    def candidates(self, sigs: np.ndarray, has: np.ndarray) -> dict[int, set[int]]:
        """chunk document -> eval doc ids sharing at least one band key with it."""
        out: dict[int, set[int]] = {}
        rows = np.flatnonzero(has)
        if not rows.size:
            return out
        for b, (keys, owners) in enumerate(self.bands):
            if not keys.size:
                continue
            q = self.hasher.band_keys(sigs[rows], b)
            lo = np.searchsorted(keys, q, side="left")
            hi = np.searchsorted(keys, q, side="right")
            for r in np.flatnonzero(hi > lo):
                out.setdefault(int(rows[r]), set()).update(owners[lo[r]:hi[r]].tolist())
        return out


class _Containment:
    """Token n-gram index (cuvee.dedup.ngram_match.NgramIndex) over the kept eval documents. A scan marks the
    indexed n-grams a training source holds, so an eval document's contained share is over the union of the
    source's documents: one cut into pieces, or embedded in a longer document, is caught as a whole."""

    def __init__(self, docs: list[_EvalDoc], n: int):
        self.index, self.n = NgramIndex.build([d.tokens for d in docs], n=n), n

    def new_source(self) -> tuple[np.ndarray, np.ndarray]:
        """(hit per indexed n-gram, first training document holding an n-gram of each eval document)."""
        return (np.zeros(len(self.index.hashes), dtype=bool),
                np.full(len(self.index.item_grams), np.iinfo(np.int64).max, dtype=np.int64))

    def _owners(self, hp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(eval documents holding each indexed n-gram ``hp``, position in ``hp`` of each)."""
        ix = self.index
        lo, hi = ix.offsets[hp].astype(np.int64), ix.offsets[hp + 1].astype(np.int64)
        reps = hi - lo
        idx = np.repeat(lo - np.cumsum(reps) + reps, reps) + np.arange(int(reps.sum()))
        return ix.owners[idx].astype(np.int64), np.repeat(np.arange(len(hp)), reps)

    def scan(self, chunk: list[np.ndarray], first: int, hit: np.ndarray, first_doc: np.ndarray) -> None:
        ix = self.index
        lens = np.fromiter((c.size for c in chunk), dtype=np.int64, count=len(chunk))
        if not len(ix.hashes) or not lens.size or lens.max() < self.n:
            return
        grams = ngram_hashes(np.concatenate(chunk).astype(np.uint64), ix.mult)
        doc = np.repeat(np.arange(len(chunk)), lens)
        win = np.flatnonzero(doc[:len(grams)] == doc[self.n - 1:])  # windows inside one document
        pos = np.searchsorted(ix.hashes, grams[win])
        pos[pos >= len(ix.hashes)] = 0
        found = ix.hashes[pos] == grams[win]
        hp = pos[found]
        if hp.size:
            hit[hp] = True
            items, k = self._owners(hp)
            np.minimum.at(first_doc, items, doc[win[found]][k] + first)

    def shares(self, hit: np.ndarray) -> np.ndarray:
        """Per eval document: the share of its distinct n-grams marked in ``hit`` (0 when it has none)."""
        hp = np.flatnonzero(hit)
        counts = np.bincount(self._owners(hp)[0], minlength=len(self.index.item_grams))
        return counts / np.maximum(self.index.item_grams, 1)


# ---- the training side ------------------------------------------------------------------------------------
def _chunks(shards: ShardSet, chunk_tokens: int):
    """(global index of first doc, [EOS-stripped token arrays]) over every document, ~chunk_tokens at a time."""
    eos = shards.eos_id
    for ds, base in zip(shards.datasets, shards.doc_offsets[:-1].tolist()):
        cum = np.zeros(len(ds) + 1, dtype=np.int64)
        np.cumsum(ds.sequence_lengths, out=cum[1:])
        start = 0
        while start < len(ds):
            stop = int(np.searchsorted(cum, cum[start] + chunk_tokens, side="right")) - 1
            stop = min(len(ds), max(stop, start + 1))
            yield base + start, [_strip_eos(ds[i], eos) for i in range(start, stop)]
            start = stop


def _scan_source(si: int, shards: ShardSet, index: _EvalIndex, hasher: MinHasher, threshold: float,
                 chunk_tokens: int, use_numba: bool, cont: _Containment | None) -> tuple[dict, tuple | None]:
    """Exact and near matches (recorded on the eval documents), the counts, and for containment (hit per
    indexed n-gram, first training document per eval document)."""
    marks = cont.new_source() if cont is not None else None
    stats = {"documents": shards.num_documents, "tokens": shards.num_tokens, "exact_matches": 0,
             "near_matches": 0, "lsh_candidates": 0, "verified_below_threshold": 0}
    docs = index.docs
    for first, chunk in _chunks(shards, chunk_tokens):
        if cont is not None:
            cont.scan(chunk, first, *marks)
        # exact: hash only documents whose length some eval document has
        lens = np.fromiter((c.size for c in chunk), dtype=np.int64, count=len(chunk))
        for r in np.flatnonzero(np.isin(lens, index.lengths)):
            t = chunk[r]
            for j in index.by_key.get(_exact_key(t), ()):
                if si not in docs[j].matches and np.array_equal(docs[j].tokens, t):
                    docs[j].matches[si] = {"kind": "exact", "document": first + int(r)}
                    stats["exact_matches"] += 1
        # near: MinHash LSH candidates, verified by exact Jaccard
        sigs, has = signatures(chunk, hasher, use_numba)
        for r, owners in index.candidates(sigs, has).items():
            todo = [j for j in owners if si not in docs[j].matches]
            if not todo:
                continue
            sh = shingles(chunk[r], hasher)
            for j in todo:
                stats["lsh_candidates"] += 1
                s = jaccard(docs[j].shingles, sh)
                if s >= threshold:
                    docs[j].matches[si] = {"kind": "near", "document": first + int(r), "jaccard": round(s, 4)}
                    stats["near_matches"] += 1
                else:
                    stats["verified_below_threshold"] += 1
    stats["matches"] = stats["exact_matches"] + stats["near_matches"]
    return stats, marks


def _contained(docs: list[_EvalDoc], cont: _Containment, marks: list[tuple], containment: float) -> np.ndarray:
    """Record containment matches on ``docs``: per source where that source alone holds >= ``containment`` of
    a document's n-grams; for a document only the union of all sources holds that much, every source holding
    any of its n-grams. Returns the union share per document."""
    union = np.zeros(len(cont.index.hashes), dtype=bool)
    per_source = []
    for si, (hit, first_doc) in enumerate(marks):
        union |= hit
        share = cont.shares(hit)
        per_source.append(share)
        for j in np.flatnonzero(share >= containment).tolist():
            docs[j].matches.setdefault(si, {"kind": "contained", "document": int(first_doc[j]),
                                            "containment": round(float(share[j]), 4)})
    total = cont.shares(union)
    for j in np.flatnonzero(total >= containment).tolist():
        if not docs[j].matches:
            for si, share in enumerate(per_source):
                if share[j] > 0:
                    docs[j].matches[si] = {"kind": "contained", "document": int(marks[si][1][j]),
                                           "containment": round(float(share[j]), 4)}
    return total


# ---- the API ----------------------------------------------------------------------------------------------
def decontaminate(eval_sets: dict, train_sources: list, *, max_docs: int | None = None, ngram: int = 13,
                  threshold: float = 0.8, num_perm: int = 128, seed: int = 1, chunk_tokens: int = 1 << 22,
                  use_numba: bool = True, containment: float | None = 0.3,
                  containment_ngram: int | None = None) -> tuple[dict[str, list[int]], dict]:
    """Kept document indices per eval set, and the report.

    ``eval_sets``: name -> shards (str, list of str, or ShardSet); ``train_sources``: list of the same. Only the
    first ``max_docs`` documents of each eval set are considered (all when None); kept indices are global
    document indices of that eval set, ascending. Report::

        {"eval_sets": {name: {documents, duplicates_within_eval, exact_within_eval, near_within_eval,
                              exact_overlap, near_overlap, contained_overlap, kept, short_documents,
                              too_short_for_containment,
                              removed: [{index, reason, kind, source, source_index, sources, document, ...}]}},
         "train_sources": [{source, documents, tokens, matches, exact_matches, near_matches,
                            contained_matches, lsh_candidates, verified_below_threshold}],
         "parameters": {...}, "seconds": float}

    Per source, ``matches`` counts eval documents (after the within-set dedup) that the source contains
    exactly, near-duplicated or by containment (an eval document may match several sources); per eval set, a
    document matched exactly by any source counts in ``exact_overlap``, else near in ``near_overlap``, else in
    ``contained_overlap``. A removed entry names the source it is reported under (``source``,
    ``source_index``: exact first, then the highest Jaccard, then the highest contained share) and every
    source that matched (``sources``: indices into ``train_sources``); ``contained_share`` is the share of its
    n-grams all sources together hold. ``containment`` None turns the containment test off;
    ``containment_ngram`` None picks it from the tokenizer (:func:`default_containment_ngram`).
    """
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    if max_docs is not None and max_docs < 0:
        raise ValueError(f"max_docs must be >= 0, got {max_docs}")
    if containment is not None and not 0 < containment <= 1:
        raise ValueError(f"containment must be in (0, 1] or None, got {containment}")
    if containment_ngram is not None and containment_ngram < 1:
        raise ValueError(f"containment_ngram must be >= 1, got {containment_ngram}")
    t0 = time.perf_counter()
    hasher = _hasher(ngram, threshold, num_perm, seed)
    cfg = hasher.config

    opened = {name: _open(spec) for name, spec in eval_sets.items()}
    per_set, all_docs, removed_by_set = {}, [], {}
    tokenizer: dict = {}
    for name, shards in opened.items():
        _check_tokenizers(tokenizer, shards.tokenizer, f"eval set {name!r}")
        tokenizer = {**shards.tokenizer, **tokenizer}
        n = shards.num_documents if max_docs is None else min(max_docs, shards.num_documents)
        kept, counts, removed = _dedup_eval_set(name, shards, n, hasher, threshold, use_numba)
        per_set[name], removed_by_set[name] = counts, removed
        all_docs.extend(kept)

    index = _EvalIndex(all_docs, hasher, use_numba)
    if containment_ngram is None:
        containment_ngram = default_containment_ngram(tokenizer)
    cont = _Containment(all_docs, containment_ngram) if containment is not None else None
    sources, marks = [], []
    for si, spec in enumerate(train_sources):
        shards = _open(spec)
        _check_tokenizers(tokenizer, shards.tokenizer, f"training source {_label(spec, si)!r}")
        stats, mark = _scan_source(si, shards, index, hasher, threshold, chunk_tokens, use_numba, cont)
        sources.append({"source": _label(spec, si), **stats})
        marks.append(mark)
    share = _contained(all_docs, cont, marks, containment) if cont is not None else None
    for si, src in enumerate(sources):
        src["contained_matches"] = sum(d.matches.get(si, {}).get("kind") == "contained" for d in all_docs)
        src["matches"] += src["contained_matches"]

    keep: dict[str, list[int]] = {name: [] for name in opened}
    for name in opened:
        per_set[name].update(exact_overlap=0, near_overlap=0, contained_overlap=0, too_short_for_containment=0)
    for j, d in enumerate(all_docs):
        if cont is not None and cont.index.too_short[j]:
            per_set[d.set_name]["too_short_for_containment"] += 1
        if not d.matches:
            keep[d.set_name].append(d.index)
            continue
        kind = min((m["kind"] for m in d.matches.values()), key=_PREFERENCE.get)
        of_kind = [s for s in sorted(d.matches) if d.matches[s]["kind"] == kind]
        si = of_kind[0] if kind == "exact" else max(of_kind, key=lambda s: d.matches[s].get("jaccard",
                                                                                              d.matches[s].get("containment")))
        reason = {"exact": EXACT, "near": NEAR, "contained": CONTAINED}[kind]
        per_set[d.set_name][reason] += 1
        entry = {"reason": reason, "source": sources[si]["source"], "source_index": si, **d.matches[si],
                 "sources_matched": len(d.matches), "sources": sorted(d.matches)}
        if share is not None:
            entry["contained_share"] = round(float(share[j]), 4)
        removed_by_set[d.set_name][d.index] = entry
    for name in opened:
        per_set[name]["kept"] = len(keep[name])
        per_set[name]["removed"] = [{"index": i, **removed_by_set[name][i]} for i in sorted(removed_by_set[name])]
    report = {
        "eval_sets": per_set,
        "train_sources": sources,
        "parameters": {
            "max_docs": max_docs, "ngram": ngram, "threshold": threshold, "num_perm": num_perm,
            "permutations_used": cfg.num_perm, "bands": cfg.num_bands, "rows_per_band": cfg.rows_per_band,
            "recall_at_threshold": float(cfg.detection_probability(threshold)), "seed": seed,
            "containment": containment, "containment_ngram": containment_ngram if cont is not None else None,
            "method": (f"exact: xxh3-128 of the token ids (trailing EOS ignored), confirmed token for token; near: "
                       f"MinHash LSH over {ngram}-token shingles ({cfg.num_bands} bands x {cfg.rows_per_band} rows), "
                       f"candidates verified by exact Jaccard >= {threshold}; "
                       + (f"contained: >= {containment} of the document's distinct {containment_ngram}-token "
                          f"n-grams held by a source's documents together (or by all sources together); "
                          if cont is not None else "no containment test; ")
                       + f"documents shorter than {ngram} tokens: exact match only; within each eval set the first "
                         f"occurrence is kept"),
        },
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return keep, report


# ---- evaluating only the kept documents --------------------------------------------------------------------
class ShardSubset(ShardSet):
    """The documents ``indices`` of ``base``, renumbered 0..len-1: a ShardSet that PackedLoader and
    :func:`cuvee.train.evaluate.evaluate` read unchanged (``evaluate(model, eval_subset(shards, kept), ...)``
    scores exactly the kept documents, per-document arrays in the order of ``indices``)."""

    def __init__(self, base: ShardSet, indices):
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= base.num_documents):
            raise IndexError(f"document indices must lie in [0, {base.num_documents})")
        self.base, self.indices = base, idx
        super().__init__(datasets=base.datasets, tokenizer=base.tokenizer, manifests=base.manifests)

    @property
    def num_documents(self) -> int:
        return int(self.indices.size)

    @property
    def num_tokens(self) -> int:
        return sum(self.base.document_length(int(i)) for i in self.indices)

    def document(self, i: int) -> np.ndarray:
        return self.base.document(int(self.indices[i]))

    def document_length(self, i: int) -> int:
        return self.base.document_length(int(self.indices[i]))

    def document_source(self, i: int) -> int:
        return self.base.document_source(int(self.indices[i]))

    @property
    def source_names(self) -> list[str]:
        return self.base.source_names

    def source_ids(self) -> np.ndarray:
        return self.base.source_ids()[self.indices]


def eval_subset(shards: ShardSet, indices) -> ShardSubset:
    """A view of ``shards`` holding only ``indices`` (e.g. :func:`decontaminate`'s kept indices)."""
    return ShardSubset(shards, indices)
