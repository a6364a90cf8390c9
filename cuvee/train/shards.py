"""Open the token shards a training or eval run reads: mixer output dirs, shard prefixes, or mix YAMLs.

All shards of one run must share a tokenizer; its vocab size and EOS id come from ``manifest.json``
(see docs/ARCHITECTURE.md, "Mixer output"). Documents are addressed by one global index across shards.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvee.mixer.indexed import IndexedDataset

log = logging.getLogger(__name__)


@dataclass
class ShardSet:
    datasets: list[IndexedDataset]
    tokenizer: dict = field(default_factory=dict)  # manifest "tokenizer" entry (kind, name, vocab_size, eos_id)
    manifests: list[dict] = field(default_factory=list)

    def __post_init__(self):
        counts = np.array([len(d) for d in self.datasets], dtype=np.int64)
        self.doc_offsets = np.concatenate([[0], np.cumsum(counts)])
        if self.num_documents == 0:
            raise ValueError("the shards hold no documents")

    @property
    def num_documents(self) -> int:
        return int(self.doc_offsets[-1])

    @property
    def num_tokens(self) -> int:
        return sum(d.num_tokens for d in self.datasets)

    @property
    def eos_id(self) -> int | None:
        return self.tokenizer.get("eos_id")

    @property
    def vocab_size(self) -> int | None:
        return self.tokenizer.get("vocab_size")

    def document(self, i: int) -> np.ndarray:
        """Tokens of global document i (a memory-mapped view, no copy)."""
        shard = int(np.searchsorted(self.doc_offsets, i, side="right")) - 1
        return self.datasets[shard][i - int(self.doc_offsets[shard])]

    def document_length(self, i: int) -> int:
        shard = int(np.searchsorted(self.doc_offsets, i, side="right")) - 1
        return int(self.datasets[shard].sequence_lengths[i - int(self.doc_offsets[shard])])


def resolve_mix_yaml(path: Path) -> Path:
    """A ``mixes/*.yaml`` is materialised once by the mixer (into its ``output_dir``) and reused after."""
    try:
        from cuvee.mixer import run_mix
        from cuvee.mixer.config import load_mix_config
    except ImportError as e:
        raise RuntimeError(f"{path}: mix YAMLs need cuvee.mixer; pass a mixer output directory instead") from e
    cfg = load_mix_config(path)
    out = Path(cfg.output_dir or f"out/mix/{cfg.name}")
    if not (out / "manifest.json").exists():
        log.info("materialising mix %s into %s", path, out)
        run_mix(str(path), out_dir=str(out))
    return out


def _prefixes_in(directory: Path, manifest: dict | None) -> list[Path]:
    if manifest and manifest.get("shards"):
        return [directory / s["prefix"] for s in manifest["shards"]]
    return sorted(p.with_suffix("") for p in directory.glob("*.idx"))


def open_shards(paths: list[str] | str, tokenizer: dict | None = None) -> ShardSet:
    """Open every shard under ``paths`` (dirs with manifest.json, prefixes, ``.idx``/``.bin`` files, mix YAMLs)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    datasets, manifests, tok = [], [], dict(tokenizer or {})
    for raw in paths:
        p = Path(raw)
        if p.suffix in (".yaml", ".yml"):
            p = resolve_mix_yaml(p)
        if p.is_dir():
            manifest = None
            if (p / "manifest.json").exists():
                manifest = json.loads((p / "manifest.json").read_text())
                manifests.append(manifest)
                _merge_tokenizer(tok, manifest.get("tokenizer") or {}, p)
            prefixes = _prefixes_in(p, manifest)
            if not prefixes:
                raise FileNotFoundError(f"{p}: no .idx shards found")
        else:
            prefix = p.with_suffix("") if p.suffix in (".idx", ".bin") else p
            if not Path(f"{prefix}.idx").exists():
                raise FileNotFoundError(f"{raw}: neither a directory, a mix YAML nor a shard prefix with .idx")
            prefixes = [prefix]
            mf = prefix.parent / "manifest.json"
            if mf.exists():
                _merge_tokenizer(tok, json.loads(mf.read_text()).get("tokenizer") or {}, prefix.parent)
        datasets.extend(IndexedDataset(x) for x in prefixes)
    return ShardSet(datasets=datasets, tokenizer=tok, manifests=manifests)


def _merge_tokenizer(into: dict, new: dict, where: Path) -> None:
    for key in ("kind", "name", "vocab_size", "eos_id"):
        if key in new and key in into and into[key] != new[key]:
            raise ValueError(f"{where}: tokenizer {key}={new[key]!r} differs from other shards ({into[key]!r})")
    into.update(new)


def data_identity(shards: ShardSet) -> dict:
    """What a run's data *is*, independent of where it lives: per shard its name, sizes and sha256s.

    The sha256s come from the mixer's manifest (free; ``mix_sha256`` too when present). A shard without a
    manifest entry gets the sha256 of its small ``.idx`` (every document's length) and its ``.bin`` size,
    so a resume on other data stops even without a manifest. Paths are left out: moving a mix is fine.
    """
    manifests: dict[Path, dict] = {}
    out = []
    for ds in shards.datasets:
        prefix = Path(ds.prefix)
        parent = prefix.parent.resolve()
        if parent not in manifests:
            mf = parent / "manifest.json"
            try:
                manifests[parent] = json.loads(mf.read_text()) if mf.exists() else {}
            except (OSError, ValueError):
                manifests[parent] = {}
        listed = manifests[parent].get("shards") or []
        entry = next((s for s in listed if Path(s.get("prefix", "")).name == prefix.name), {})
        rec = {"shard": prefix.name, "documents": len(ds), "bin_bytes": Path(f"{prefix}.bin").stat().st_size}
        if entry.get("sha256_bin") and entry.get("sha256_idx"):
            rec.update(sha256_bin=entry["sha256_bin"], sha256_idx=entry["sha256_idx"])
        else:
            rec["sha256_idx"] = hashlib.sha256(Path(f"{prefix}.idx").read_bytes()).hexdigest()
        out.append(rec)
    mixes = sorted({m["mix_sha256"] for m in manifests.values() if m.get("mix_sha256")})
    return {"shards": out, "mix_sha256": mixes, "tokenizer": shards.tokenizer}
