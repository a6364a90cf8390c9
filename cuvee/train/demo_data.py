"""Small byte-level token shards from the in-repo WCXB texts, for tests, the CPU demo and the anneal demo.

Why bytes: a 257-token vocabulary (256 bytes + EOS) keeps tiny CPU models fast (the output layer of a
100k-token vocabulary would dominate), needs no tokenizer file, and makes bits-per-byte exact.
Shards and manifest.json follow the mixer's contract (docs/ARCHITECTURE.md), with tokenizer kind "bytes".

Three text variants of the same pages, for "clearly better vs clearly worse" ablations:
``clean`` (human-reviewed main content), ``shuffled`` (the same words in random order: same unigram
statistics, no syntax) and ``boilerplate`` (the page's navigation/boilerplate lines).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import numpy as np

from cuvee.mixer.indexed import IndexedDatasetWriter

REPO_ROOT = Path(__file__).resolve().parents[2]
WCXB = REPO_ROOT / "data/curated/wcxb_dev_main_content.jsonl.gz"
BYTE_TOKENIZER = {"kind": "bytes", "name": "utf8", "vocab_size": 257, "eos_id": 256}


def encode_bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def load_wcxb(path: Path = WCXB) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def split_heldout(rows: list[dict], heldout_frac: float = 0.1) -> tuple[list[dict], list[dict]]:
    """Stable split by hashed file id, so train and held-out pages never overlap."""
    def bucket(r):
        return int(hashlib.sha1((r.get("file_id") or r.get("url") or "").encode()).hexdigest()[:8], 16) / 2**32

    return [r for r in rows if bucket(r) >= heldout_frac], [r for r in rows if bucket(r) < heldout_frac]


def variant_text(row: dict, variant: str, rng: random.Random) -> str:
    if variant == "clean":
        return row["main_content"] or ""
    if variant == "shuffled":
        words = (row["main_content"] or "").split()
        rng.shuffle(words)
        return " ".join(words)
    if variant == "boilerplate":
        return "\n".join(row.get("without") or [])
    raise ValueError(f"unknown variant {variant!r}")


def write_shards(out_dir: str | Path, name: str, documents: list[np.ndarray], sources: list[dict] | None = None,
                 docs_per_shard: int = 10_000, tokenizer: dict = BYTE_TOKENIZER, seed: int = 0) -> dict:
    """Write ``<out>/<name>_NNNNN.bin/.idx`` + manifest.json (the mixer's layout) and return the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shards = []
    for start in range(0, max(len(documents), 1), docs_per_shard):
        prefix = f"{name}_{len(shards):05d}"
        with IndexedDatasetWriter(out / prefix, dtype=np.uint16) as w:
            for doc in documents[start : start + docs_per_shard]:
                w.add_document(doc)
        shards.append({"prefix": prefix, "documents": w.documents, "tokens": w.tokens,
                       "sha256_bin": _sha256(out / f"{prefix}.bin"), "sha256_idx": _sha256(out / f"{prefix}.idx")})
    total = sum(s["tokens"] for s in shards)
    manifest = {"name": name, "seed": seed, "target_tokens": total, "total_tokens": total, "dtype": "uint16",
                "tokenizer": dict(tokenizer), "sources": sources or [], "shards": shards, "config_sha256": None}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_variant_mix(out_dir: str | Path, name: str, rows: list[dict], weights: dict[str, float],
                      seed: int = 0, max_doc_bytes: int | None = None) -> dict:
    """A mix of text variants over disjoint page subsets, e.g. {"clean": 0.3, "shuffled": 0.7}.

    Each page is used once, by one variant, chosen with probability proportional to its weight, so
    the proportions hold in documents (and, in expectation, in tokens)."""
    rng = random.Random(seed)
    names, probs = list(weights), np.array(list(weights.values()), dtype=float)
    probs = probs / probs.sum()
    docs, per_source = [], {n: {"documents": 0, "tokens": 0} for n in names}
    for row in rows:
        variant = names[int(rng.choices(range(len(names)), probs)[0])]
        text = variant_text(row, variant, rng)
        if max_doc_bytes:
            text = text.encode()[:max_doc_bytes].decode("utf-8", "ignore")
        if not text.strip():
            continue
        toks = encode_bytes(text)
        docs.append(toks)
        per_source[variant]["documents"] += 1
        per_source[variant]["tokens"] += int(toks.size)
    rng.shuffle(docs)
    sources = [{"name": n, "weight": float(w), "realised_tokens": per_source[n]["tokens"],
                "documents": per_source[n]["documents"]} for n, w in zip(names, probs)]
    return write_shards(out_dir, name, docs, sources=sources, seed=seed)


def build_demo_data(out_root: str | Path, seed: int = 0, max_doc_bytes: int | None = 4000) -> dict[str, Path]:
    """Everything the CPU train + anneal demo needs, from data/curated only (no network, no /work/shared).

    * ``default``:    base-training mix, half clean pages, half word-shuffled pages;
    * ``candidate``:  anneal mix, 30 % clean + 70 % default-like (clean/shuffled 50/50) -> 65 % clean;
    * ``control``:    anneal mix, 30 % shuffled + 70 % default-like -> 35 % clean;
    * ``heldout_clean`` / ``heldout_shuffled``: pages never used for training, for evaluation.
    """
    out_root = Path(out_root)
    train, heldout = split_heldout(load_wcxb())
    rng = random.Random(seed)
    rng.shuffle(train)
    half = len(train) // 2
    base_rows, anneal_rows = train[:half], train[half:]
    paths = {k: out_root / k for k in ("default", "candidate", "control", "heldout_clean", "heldout_shuffled")}
    build_variant_mix(paths["default"], "default", base_rows, {"clean": 0.5, "shuffled": 0.5}, seed, max_doc_bytes)
    build_variant_mix(paths["candidate"], "candidate", anneal_rows, {"clean": 0.65, "shuffled": 0.35}, seed + 1, max_doc_bytes)
    build_variant_mix(paths["control"], "control", anneal_rows, {"clean": 0.35, "shuffled": 0.65}, seed + 1, max_doc_bytes)
    build_variant_mix(paths["heldout_clean"], "heldout_clean", heldout, {"clean": 1.0}, seed, max_doc_bytes)
    build_variant_mix(paths["heldout_shuffled"], "heldout_shuffled", heldout, {"shuffled": 1.0}, seed, max_doc_bytes)
    return paths


if __name__ == "__main__":  # python -m cuvee.train.demo_data runs/train_demo_data
    import sys

    for k, v in build_demo_data(sys.argv[1] if len(sys.argv) > 1 else "runs/train_demo_data").items():
        print(k, v)
