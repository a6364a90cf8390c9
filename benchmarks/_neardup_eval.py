"""Near-duplicate evaluation corpus from real pages, with controlled edits at exactly known Jaccard similarity.

Originals: non-overlapping ~150-300-word passages of real page texts (WCXB dev + test ground truth,
ScrapingHub ground truth) plus short documents of real sentences (lingua, 75 languages). Variants of a
sampled original get one or more controlled edits -- insertions of foreign text, deletions of spans,
boilerplate swapped in at the top/bottom (real boilerplate: WCXB's "without" snippets) -- and the exact
Jaccard similarity of their 5-word shingle sets with the original is computed from the sets themselves
(not estimated). Exact copies (J = 1) are added too. Every document carries its family (original) id.

Used by benchmarks/bench_minhash.py; `python benchmarks/_neardup_eval.py` prints the S-curve check.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvee.dedup.text import words

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]
BANDS = [(0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.75), (0.75, 0.8), (0.8, 0.85), (0.85, 0.9), (0.9, 0.95), (0.95, 1.0001)]


def shingle_set(text: str, n: int = 5) -> set:
    w = words(text)
    if len(w) < n:
        return {tuple(w)} if w else set()
    return set(zip(*(w[i:] for i in range(n))))


def jaccard(a: str, b: str, n: int = 5) -> float:
    sa, sb = shingle_set(a, n), shingle_set(b, n)
    return len(sa & sb) / max(1, len(sa | sb))


def real_page_texts() -> list[str]:
    texts = []
    wcxb_dev = SHARED / "extraction_wcxb" / "dev_ground_truth_main_content.jsonl.gz"
    if not wcxb_dev.exists():
        wcxb_dev = REPO / "data/curated/wcxb_dev_main_content.jsonl.gz"
    with gzip.open(wcxb_dev, "rt") as f:
        texts += [json.loads(line).get("main_content") or "" for line in f]
    for p in sorted((SHARED / "extraction_wcxb" / "test" / "ground-truth").glob("*.json")):
        texts.append(json.loads(p.read_text()).get("main_content") or "")
    gt = SHARED / "extraction_scrapinghub" / "ground-truth.json"
    if gt.exists():
        texts += [v.get("articleBody") or "" for v in json.loads(gt.read_text()).values()]
    return [t for t in dict.fromkeys(texts) if t]


def boilerplate_pool() -> list[str]:
    wcxb_dev = REPO / "data/curated/wcxb_dev_main_content.jsonl.gz"
    pool = []
    with gzip.open(wcxb_dev, "rt") as f:
        for line in f:
            pool += [s for s in json.loads(line).get("without") or [] if len(s.split()) >= 3]
    return list(dict.fromkeys(pool))


def lingua_sentences() -> list[str]:
    out = []
    for p in sorted((SHARED / "langid_lingua" / "sentences").glob("*.txt")):
        out += [s.strip() for s in p.read_text().splitlines() if s.strip()]
    return out


def passages(text: str, rng: random.Random) -> list[str]:
    """Cut a page into non-overlapping passages of 150-300 words, keeping line structure."""
    out, cur, n, target = [], [], 0, rng.randint(150, 300)
    for line in text.split("\n"):
        cur.append(line)
        n += len(line.split())
        if n >= target:
            out.append("\n".join(cur).strip())
            cur, n, target = [], 0, rng.randint(150, 300)
    if n >= 60:
        out.append("\n".join(cur).strip())
    return out


@dataclass
class Corpus:
    docs: list[dict]  # {"id", "text", "family"}
    pairs: list[dict] = field(default_factory=list)  # {"original", "variant", "jaccard", "edits"}


def edit(text: str, rng: random.Random, foreign: list[str], boiler: list[str]) -> tuple[str, list[str]]:
    w = text.split(" ")
    kinds = rng.sample(["insert", "delete", "boilerplate"], k=rng.choice([1, 1, 2, 3]))
    strength = rng.uniform(0.0, 0.45)
    for kind in kinds:
        if kind == "delete":
            for _ in range(rng.randint(1, 4)):
                k = int(len(w) * strength / 3)
                s = rng.randrange(0, max(1, len(w) - k))
                del w[s:s + k]
        elif kind == "insert":
            for _ in range(rng.randint(1, 4)):
                src = rng.choice(foreign).split(" ")
                k = max(1, int(len(w) * strength / 3))
                s = rng.randrange(0, max(1, len(src) - k))
                pos = rng.randrange(0, len(w) + 1)
                w[pos:pos] = src[s:s + k]
        else:
            head = "\n".join(rng.sample(boiler, rng.randint(1, 4)))
            tail = "\n".join(rng.sample(boiler, rng.randint(0, 4)))
            w = (head + "\n").split(" ") + w + ("\n" + tail).split(" ")
    return " ".join(w).strip(), kinds


def build_corpus(seed: int = 0, min_docs: int = 20000, variant_share: float = 0.14, copy_share: float = 0.05) -> Corpus:
    rng = random.Random(seed)
    originals = [p for t in real_page_texts() for p in passages(t, rng)]
    sents = lingua_sentences()
    rng.shuffle(sents)
    for i in range(0, len(sents) - 12, 12):
        originals.append(" ".join(sents[i:i + 12]))
        if len(originals) >= int(min_docs * (1 - variant_share - copy_share)) + 1:
            break
    originals = list(dict.fromkeys(originals))
    boiler = boilerplate_pool()
    docs = [{"id": f"o{i}", "text": t, "family": i} for i, t in enumerate(originals)]
    corpus = Corpus(docs)
    long_ones = [i for i, t in enumerate(originals) if len(t.split()) >= 120]
    for j in range(int(min_docs * variant_share)):
        i = rng.choice(long_ones)
        text, kinds = edit(originals[i], rng, originals, boiler)
        docs.append({"id": f"v{j}", "text": text, "family": i})
        corpus.pairs.append({"original": f"o{i}", "variant": f"v{j}", "jaccard": jaccard(originals[i], text),
                             "edits": kinds})
    for j in range(max(int(min_docs * copy_share), min_docs - len(docs))):
        i = rng.randrange(len(originals))
        docs.append({"id": f"c{j}", "text": originals[i], "family": i})
        corpus.pairs.append({"original": f"o{i}", "variant": f"c{j}", "jaccard": 1.0, "edits": ["copy"]})
    rng.shuffle(docs)
    return corpus


def write_jsonl(corpus: Corpus, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for d in corpus.docs:
            f.write(json.dumps({"text": d["text"], "id": d["id"], "metadata": {"family": d["family"]}}) + "\n")


def band_of(j: float) -> str:
    for lo, hi in BANDS:
        if lo <= j < hi:
            return f"[{lo:.2f},{min(hi, 1):.2f}{']' if hi > 1 else ')'}"
    return "?"


def quality(corpus: Corpus, kept_ids: set[str]) -> dict:
    """Recall per similarity band (pair detected = original or variant removed) and overall precision
    (a removal is correct when another member of the same family survives)."""
    fam = {d["id"]: d["family"] for d in corpus.docs}
    kept_fams = {fam[i] for i in kept_ids}
    removed = [d for d in corpus.docs if d["id"] not in kept_ids]
    correct = sum(1 for d in removed if d["family"] in kept_fams)
    by_band: dict[str, list[int]] = {}
    for p in corpus.pairs:
        hit = int(p["original"] not in kept_ids or p["variant"] not in kept_ids)
        by_band.setdefault(band_of(p["jaccard"]), []).append(hit)
    recall = {b: (float(np.mean(v)), len(v)) for b, v in sorted(by_band.items())}
    hi = [p for p in corpus.pairs if p["jaccard"] >= 0.8]
    return {"removed": len(removed), "precision": correct / max(1, len(removed)), "recall_by_band": recall,
            "recall_j_ge_0.8": float(np.mean([p["original"] not in kept_ids or p["variant"] not in kept_ids
                                              for p in hi])),
            "families_lost": len({d["family"] for d in corpus.docs} - kept_fams)}


def scurve_check(corpus: Corpus, bands: int = 14, rows: int = 8, backend: str = "numba", seed: int = 1) -> list[dict]:
    """Measured LSH candidate probability per similarity band vs 1-(1-s^r)^b averaged over the pairs."""
    from cuvee.dedup.minhash import MinHashConfig, MinHasher

    cfg = MinHashConfig(5, bands, rows, seed, backend)
    mh = MinHasher(cfg)
    text = {d["id"]: d["text"] for d in corpus.docs}
    pairs = [p for p in corpus.pairs if p["edits"] != ["copy"]]
    sa, _ = mh.signatures([text[p["original"]] for p in pairs])
    sb, _ = mh.signatures([text[p["variant"]] for p in pairs])
    cand = np.zeros(len(pairs), dtype=bool)
    for b in range(bands):
        cand |= mh.band_keys(sa, b) == mh.band_keys(sb, b)
    js = np.array([p["jaccard"] for p in pairs])
    rows_out = []
    for lo, hi in BANDS:
        m = (js >= lo) & (js < hi)
        if not m.any():
            continue
        p = cfg.detection_probability(js[m])
        expected, observed, n = float(p.mean()), float(cand[m].mean()), int(m.sum())
        sd = float(np.sqrt((p * (1 - p)).sum()) / n)
        rows_out.append({"band": band_of(lo), "pairs": n, "mean_j": float(js[m].mean()), "expected": expected,
                         "observed": observed, "sd": sd, "z": (observed - expected) / sd if sd > 0 else 0.0})
    return rows_out


def print_scurve(rows: list[dict], title: str) -> None:
    print(f"\n{title}\n| Jaccard band | pairs | mean J | expected 1-(1-s^r)^b | measured | sampling sd | z |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['band']} | {r['pairs']} | {r['mean_j']:.3f} | {r['expected']:.3f} | {r['observed']:.3f} | "
              f"{r['sd']:.3f} | {r['z']:+.2f} |")


if __name__ == "__main__":
    c = build_corpus()
    print(f"{len(c.docs)} documents, {len(c.pairs)} pairs")
    for be in ("numba", "rensa", "numpy"):
        print_scurve(scurve_check(c, backend=be), f"S-curve, 14 bands x 8 rows, backend={be}")
    print_scurve(scurve_check(c, bands=20, rows=5), "S-curve, 20 bands x 5 rows (steeper-threshold check), numba")
