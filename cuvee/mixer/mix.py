"""``run_mix``: mix config -> per-source token caches -> epoch plan -> blended Megatron shards + manifest.

Determinism: documents are read in sorted file order, each source is shuffled by a seeded LCG bijection per
epoch, sources are interleaved by the greedy token-deficit rule, and shards close at fixed token counts, so the
same config, inputs and tokenizer give byte-identical shards (the manifest records every content hash).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.mixer.blend import greedy_blend
from cuvee.mixer.config import MixConfig, MixConfigError, load_mix_config
from cuvee.mixer.indexed import IndexedDataset, IndexedDatasetWriter, dtype_for_vocab
from cuvee.mixer.shuffle import epoch_stream
from cuvee.mixer.sources import estimate_source, resolve_files, tokenize_source
from cuvee.mixer.tokenizers import TokenizerMismatchError, load_tokenizer, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


class EpochBudgetError(MixConfigError):
    """A weight cannot be met without repeating a source more than its ``max_epochs``."""


@dataclass
class SourcePlan:
    name: str
    weight: float
    target_tokens: int
    available_tokens: int
    max_epochs: float

    @property
    def epochs(self) -> float:
        return self.target_tokens / self.available_tokens if self.available_tokens else math.inf


def plan_sources(cfg: MixConfig, available: list[int]) -> list[SourcePlan]:
    """Token targets per source; raises :class:`EpochBudgetError` listing every source that is too small."""
    plans = [
        SourcePlan(s.name, w, int(round(w * cfg.target_tokens)), a, s.max_epochs)
        for s, w, a in zip(cfg.sources, cfg.weights, available)
    ]
    short = [p for p in plans if p.epochs > p.max_epochs]
    if short:
        lines = [
            f"  source '{p.name}': weight {p.weight:.4g} x {cfg.target_tokens:,} = {p.target_tokens:,} tokens needs "
            f"{p.epochs:.3g} epochs of its {p.available_tokens:,} available tokens, above max_epochs {p.max_epochs:g} "
            f"(at most {int(p.available_tokens * p.max_epochs):,} tokens)"
            for p in short
        ]
        raise EpochBudgetError(
            f"mix '{cfg.name}': weights cannot be met within max_epochs:\n" + "\n".join(lines)
            + "\nlower the weight or target_tokens, raise max_epochs, or add data"
        )
    return plans


def _check_existing(out: Path, name: str, tokenizer, overwrite: bool) -> None:
    """Refuse to mix shards of two vocabularies in one folder (a trainer would read garbage); then clear the
    previous mix's manifest and shards so a failed rerun cannot leave a manifest pointing at stale shards."""
    path = out / MANIFEST
    if path.exists():
        old = json.loads(path.read_text())
        old_tok = old.get("tokenizer", {})
        if old_tok.get("fingerprint") != tokenizer.fingerprint and not overwrite:
            raise TokenizerMismatchError(
                f"{out} already holds mix '{old.get('name')}' tokenized with {old_tok.get('name')} "
                f"(vocab {old_tok.get('vocab_size')}), not {tokenizer.name} (vocab {tokenizer.vocab_size}); "
                "use another output folder or overwrite=True (--overwrite)"
            )
        path.unlink()
        for shard in old.get("shards", []):
            for ext in (".bin", ".idx"):
                (out / f"{shard['prefix']}{ext}").unlink(missing_ok=True)
    for stale in out.glob(f"{name}_[0-9][0-9][0-9][0-9][0-9].*"):
        if stale.suffix in (".bin", ".idx"):
            stale.unlink()


def check_manifest_tokenizer(manifest: dict, tokenizer) -> None:
    """For consumers (trainer, cards): fail when shards were written with a different vocabulary."""
    tok = manifest.get("tokenizer", {})
    if tok.get("fingerprint") and tok["fingerprint"] != tokenizer.fingerprint:
        raise TokenizerMismatchError(
            f"shards of mix '{manifest.get('name')}' were tokenized with {tok.get('name')} "
            f"(fingerprint {tok['fingerprint'][:12]}), not {tokenizer.name} ({tokenizer.fingerprint[:12]})"
        )
    if tok.get("vocab_size") is not None and tok["vocab_size"] != tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"shards of mix '{manifest.get('name')}' have vocab_size {tok['vocab_size']}, tokenizer has {tokenizer.vocab_size}"
        )


class _ShardWriter:
    """Closes a shard once it holds ``shard_tokens`` tokens; documents never straddle shards."""

    def __init__(self, out: Path, name: str, dtype, shard_tokens: int, n_sources: int):
        self.out, self.name, self.dtype, self.shard_tokens, self.n_sources = out, name, dtype, shard_tokens, n_sources
        self.shards: list[dict] = []
        self._w: IndexedDatasetWriter | None = None
        self._source_tokens = [0] * n_sources

    def add(self, source: int, tokens: np.ndarray) -> None:
        if self._w is None:
            prefix = self.out / f"{self.name}_{len(self.shards):05d}"
            self._w = IndexedDatasetWriter(prefix, dtype=self.dtype)
            self._source_tokens = [0] * self.n_sources
        self._w.add_document(tokens)
        self._source_tokens[source] += int(tokens.size)
        if self._w.tokens >= self.shard_tokens:
            self._close()

    def _close(self) -> None:
        w, self._w = self._w, None
        w.close()
        self.shards.append(
            {
                "prefix": w.prefix.name,
                "documents": w.documents,
                "tokens": w.tokens,
                "source_tokens": list(self._source_tokens),
                "sha256_bin": sha256_file(Path(f"{w.prefix}.bin")),
                "sha256_idx": sha256_file(Path(f"{w.prefix}.idx")),
            }
        )

    def finish(self) -> list[dict]:
        if self._w is not None:
            self._close()
        return self.shards


def _source_entry(src, plan: SourcePlan, scan, realised: int | None, docs_used: int | None, estimated: bool) -> dict:
    avail = plan.available_tokens
    entry = {
        "name": src.name,
        "paths": list(src.paths),
        "where": src.where,
        "text_key": src.text_key,
        "weight": plan.weight,
        "target_tokens": plan.target_tokens,
        "realised_tokens": realised,
        "documents": scan.kept,
        "documents_used": docs_used,
        "available_tokens": avail,
        "available_tokens_estimated": estimated,
        "epochs": round((realised if realised is not None else plan.target_tokens) / avail, 6) if avail else None,
        "max_epochs": src.max_epochs,
        "counters": scan.as_dict(),
        "files": scan.files,
    }
    return entry


def run_mix(
    config_path_or_obj,
    out_dir: str | Path | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
    keep_cache: bool = False,
) -> dict:
    """Build the mix; returns the manifest (for ``dry_run``, the plan with estimated tokens, nothing written)."""
    t0 = time.time()
    cfg = load_mix_config(config_path_or_obj)
    tokenizer = load_tokenizer(cfg.tokenizer, num_threads=cfg.threads)
    files = [resolve_files(s) for s in cfg.sources]  # all missing sources fail before any work
    out = Path(out_dir or cfg.output_dir or f"out/mix/{cfg.name}")
    dtype = dtype_for_vocab(tokenizer.vocab_size)
    base = {
        "name": cfg.name,
        "seed": cfg.seed,
        "target_tokens": cfg.target_tokens,
        "shard_tokens": cfg.shard_tokens,
        "dtype": np.dtype(dtype).name,
        "tokenizer": tokenizer.describe(),
        "blend": "greedy token deficit argmax(w_i*T - c_i) (Megatron rule, in tokens)",
        "shuffle": "per-source, per-epoch LCG bijection over document indices",
        "config_sha256": cfg.sha256(),
        "config": cfg.model_dump(mode="json"),
    }

    if dry_run:
        scans, ratios = zip(*(estimate_source(s, f, tokenizer) for s, f in zip(cfg.sources, files)))
        plans = plan_sources(cfg, [sc.tokens for sc in scans])
        sources = [_source_entry(s, p, sc, None, None, True) for s, p, sc in zip(cfg.sources, plans, scans)]
        for entry, r in zip(sources, ratios):
            entry["chars_per_token"] = round(r, 4)
        return {**base, "dry_run": True, "output_dir": str(out), "sources": sources}

    out.mkdir(parents=True, exist_ok=True)
    _check_existing(out, cfg.name, tokenizer, overwrite)
    cache_dir = out / ".cache"
    cache_dir.mkdir(exist_ok=True)
    scans = []
    for src, fs in zip(cfg.sources, files):
        scans.append(tokenize_source(src, fs, tokenizer, cache_dir / src.name, dtype, cfg.batch_size))
    plans = plan_sources(cfg, [sc.tokens for sc in scans])
    t_tok = time.time() - t0

    caches = [IndexedDataset(cache_dir / s.name) for s in cfg.sources]
    streams = [epoch_stream(len(c), cfg.seed, s.name) for c, s in zip(caches, cfg.sources)]
    writer = _ShardWriter(out, cfg.name, dtype, cfg.shard_tokens, len(cfg.sources))
    docs_used = [0] * len(cfg.sources)

    def next_document(i: int) -> int | None:
        _, doc = next(streams[i])
        tokens = caches[i][doc]
        writer.add(i, tokens)
        docs_used[i] += 1
        return int(tokens.size)

    realised = [0] * len(cfg.sources)
    for i, n in greedy_blend(cfg.weights, cfg.target_tokens, next_document):
        realised[i] += n
    shards = writer.finish()
    del caches
    if not keep_cache:
        shutil.rmtree(cache_dir, ignore_errors=True)

    sources = [
        _source_entry(s, p, sc, r, d, False) for s, p, sc, r, d in zip(cfg.sources, plans, scans, realised, docs_used)
    ]
    mix_hash = hashlib.sha256("".join(s["sha256_bin"] + s["sha256_idx"] for s in shards).encode()).hexdigest()
    manifest = {
        **base,
        "total_tokens": int(sum(realised)),
        "documents": int(sum(docs_used)),
        "sources": sources,
        "shards": shards,
        "mix_sha256": mix_hash,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # no timestamps: reruns give the same file
    manifest["timing_s"] = {"tokenize": round(t_tok, 3), "total": round(time.time() - t0, 3)}
    log.info("mix %s: %d tokens in %d shards -> %s", cfg.name, manifest["total_tokens"], len(shards), out)
    return manifest


def read_manifest(out_dir: str | Path) -> dict:
    return json.loads((Path(out_dir) / MANIFEST).read_text())


def verify_mix(out_dir: str | Path) -> dict:
    """Re-check a mix folder against its manifest (hashes, document and token counts); raises on any mismatch.

    Why: shards travel (object stores, cluster scratch); a trainer should refuse a truncated or mixed-up copy.
    """
    out = Path(out_dir)
    manifest = read_manifest(out)
    problems = []
    tokens = docs = 0
    for s in manifest["shards"]:
        prefix = out / s["prefix"]
        for ext, key in ((".bin", "sha256_bin"), (".idx", "sha256_idx")):
            path = Path(f"{prefix}{ext}")
            if not path.exists():
                problems.append(f"{path.name}: missing")
            elif sha256_file(path) != s[key]:
                problems.append(f"{path.name}: sha256 differs from the manifest")
        if not problems:
            ds = IndexedDataset(prefix)
            if len(ds) != s["documents"] or ds.num_tokens != s["tokens"]:
                problems.append(f"{s['prefix']}: {len(ds)} documents / {ds.num_tokens} tokens, manifest says "
                                f"{s['documents']} / {s['tokens']}")
            tokens += ds.num_tokens
            docs += len(ds)
    if not problems and tokens != manifest["total_tokens"]:
        problems.append(f"shards hold {tokens} tokens, manifest total_tokens is {manifest['total_tokens']}")
    if problems:
        raise ValueError(f"mix {out} does not match its manifest:\n  " + "\n  ".join(problems))
    return {"shards": len(manifest["shards"]), "documents": docs, "tokens": tokens, "mix_sha256": manifest["mix_sha256"]}
