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

    # ---- which mix source each document came from ---------------------------------------------
    @property
    def source_names(self) -> list[str]:
        """Names of the mix sources, in the order of :meth:`document_source`'s ids (``UNKNOWN_SOURCE`` last
        when some shard records no sources)."""
        return self._sources()[0]

    def document_source(self, i: int) -> int:
        """Index into :attr:`source_names` of the source global document i came from."""
        shard = int(np.searchsorted(self.doc_offsets, i, side="right")) - 1
        local, remap = self._sources()[1][shard]
        return int(remap[int(local[i - int(self.doc_offsets[shard])])])

    def source_ids(self) -> np.ndarray:
        """Source index of every global document (one int16 per document)."""
        return np.concatenate([remap[np.asarray(local, dtype=np.int64)] for local, remap in self._sources()[1]])

    def _sources(self):
        if getattr(self, "_source_table", None) is None:
            self._source_table = _source_table(self.datasets)
        return self._source_table


UNKNOWN_SOURCE = "(unknown)"


def _folder_manifest(folder: Path) -> dict:
    """The mixer manifest of a shard folder, or {} when it has none (or an unreadable one)."""
    mf = folder / "manifest.json"
    try:
        return json.loads(mf.read_text()) if mf.exists() else {}
    except (OSError, ValueError):
        return {}


def _source_table(datasets: list[IndexedDataset]):
    """(names, [(per-document local source ids, local -> global name index) per dataset]).

    The mixer records per shard only ``source_tokens``, not each document's source; none is needed: its greedy
    token-deficit rule picks every next source from the token counts so far alone, so the manifest's weights
    and the shards' document lengths give back each document's source exactly. The replay is checked against
    every shard's ``source_tokens``; a shard that fails the check (or has no mixer manifest) counts as
    ``UNKNOWN_SOURCE``.
    """
    names: list[str] = []
    manifests: dict[Path, dict] = {}
    replayed: dict[Path, dict[str, np.ndarray] | None] = {}
    out = []
    for ds in datasets:
        prefix = Path(ds.prefix)
        parent = prefix.parent.resolve()
        if parent not in manifests:
            manifests[parent] = _folder_manifest(parent)
            replayed[parent] = _replay_sources(parent, manifests[parent])
        local_names = [str(s.get("name")) for s in manifests[parent].get("sources") or []]
        local = (replayed[parent] or {}).get(prefix.name)
        if local is None or len(local) != len(ds):
            if local_names:
                log.warning("%s: the source of each document cannot be recovered; counted as %s", prefix, UNKNOWN_SOURCE)
            local_names, local = [], np.zeros(len(ds), dtype=np.uint16)
        remap = []
        for n in local_names or [UNKNOWN_SOURCE]:
            if n not in names:
                names.append(n)
            remap.append(names.index(n))
        out.append((local, np.asarray(remap, dtype=np.int16)))
    if UNKNOWN_SOURCE in names:  # keep it last
        u = names.index(UNKNOWN_SOURCE)
        order = [i for i in range(len(names)) if i != u] + [u]
        new_index = np.argsort(order).astype(np.int16)
        names = [names[i] for i in order]
        out = [(local, new_index[remap]) for local, remap in out]
    return names, out


def _replay_sources(directory: Path, manifest: dict) -> dict[str, np.ndarray] | None:
    """Per-document source ids of a sidecar-less mix, by replaying the greedy blend over document lengths."""
    shards, sources = manifest.get("shards") or [], manifest.get("sources") or []
    if not str(manifest.get("blend", "")).startswith("greedy token deficit"):
        return None
    weights = [s.get("weight") for s in sources]
    if not shards or not weights or any(not isinstance(w, (int, float)) or w < 0 for w in weights) or not sum(weights):
        return None
    total = sum(weights)
    w = [x / total for x in weights]  # the same arithmetic as cuvee.mixer.blend.greedy_blend
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))
    counts, emitted, result = [0] * len(w), 0, {}
    try:
        for entry in shards:
            lengths = IndexedDataset(directory / entry["prefix"]).sequence_lengths
            ids = np.empty(len(lengths), dtype=np.uint16)
            shard_tokens = [0] * len(w)
            for k, n in enumerate(lengths.tolist()):
                best, best_deficit = -1, None
                for i in order:
                    d = w[i] * emitted - counts[i]
                    if best_deficit is None or d > best_deficit:
                        best, best_deficit = i, d
                ids[k] = best
                counts[best] += n
                shard_tokens[best] += n
                emitted += n
            if list(entry.get("source_tokens") or []) != shard_tokens:  # unverifiable or not this rule
                return None
            result[entry["prefix"]] = ids
    except (OSError, ValueError, KeyError):
        return None
    return result


def resolve_mix_yaml(path: Path) -> Path:
    """A ``mixes/*.yaml`` is materialised once by the mixer (into its ``output_dir``) and reused after, but only
    while the folder's recorded plan is this YAML's: an edited YAML or changed source files are refused."""
    try:
        from cuvee.mixer import run_mix
        from cuvee.mixer.config import load_mix_config
        from cuvee.mixer.mix import check_built
    except ImportError as e:
        raise RuntimeError(f"{path}: mix YAMLs need cuvee.mixer; pass a mixer output directory instead") from e
    cfg = load_mix_config(path)
    out = Path(cfg.output_dir or f"out/mix/{cfg.name}")
    if (out / "manifest.json").exists():
        check_built(path, out)
    else:
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
    """What a run's data *is*, independent of where it lives: per shard its name, sizes and hashes.

    The sha256s come from the mixer's manifest (free; ``mix_sha256`` too when present). A shard without a
    manifest entry gets the sha256 of its small ``.idx`` (every document's length) and its ``.bin`` size,
    so a resume on other data stops even without a manifest. The manifest names what the shards should be,
    not what they are now, so each ``.bin``/``.idx`` is also stamped by content (:func:`shard_inputs`, the
    kernel's changed-input check): a shard rewritten in place at the same size stops the resume too. Paths and
    modification times are left out: a moved or copied mix still resumes. A shard whose size disagrees with
    its manifest entry is refused here, before any folder is bound.
    """
    manifests: dict[Path, dict] = {}
    out = []
    for ds in shards.datasets:
        prefix = Path(ds.prefix)
        parent = prefix.parent.resolve()
        if parent not in manifests:
            manifests[parent] = _folder_manifest(parent)
        listed = manifests[parent].get("shards") or []
        entry = next((s for s in listed if Path(s.get("prefix", "")).name == prefix.name), {})
        bin_bytes = Path(f"{prefix}.bin").stat().st_size
        _check_against_manifest(prefix, ds, entry, bin_bytes)
        rec = {"shard": prefix.name, "documents": len(ds), "bin_bytes": bin_bytes}
        if entry.get("sha256_bin") and entry.get("sha256_idx"):
            rec.update(sha256_bin=entry["sha256_bin"], sha256_idx=entry["sha256_idx"])
        else:
            rec["sha256_idx"] = hashlib.sha256(Path(f"{prefix}.idx").read_bytes()).hexdigest()
        out.append(rec)
    mixes = sorted({m["mix_sha256"] for m in manifests.values() if m.get("mix_sha256")})
    return {"shards": out, "mix_sha256": mixes, "tokenizer": shards.tokenizer}


def shard_inputs(shards: ShardSet) -> dict[str, dict]:
    """``{path: content stamp}`` of every ``.bin``/``.idx``: what the kernel compares on resume (content only, so a
    copy of the mix elsewhere still resumes, and a shard rewritten in place is named in one line)."""
    from cuvee.kernel.stamps import stamp

    return {str(Path(f"{ds.prefix}.{ext}").resolve()): stamp(f"{ds.prefix}.{ext}", content_only=True)
            for ds in shards.datasets for ext in ("bin", "idx")}


def _check_against_manifest(prefix: Path, ds: IndexedDataset, entry: dict, bin_bytes: int) -> None:
    tokens, docs = entry.get("tokens"), entry.get("documents")
    if isinstance(docs, int) and docs != len(ds):
        raise ValueError(f"{prefix}.idx: {len(ds):,} documents, but its manifest.json lists {docs:,}; the shard "
                         f"changed since the mix was written (rebuild the mix, or check it with cuvee mix --verify)")
    if isinstance(tokens, int) and tokens * ds.dtype.itemsize != bin_bytes:
        raise ValueError(f"{prefix}.bin: {bin_bytes:,} bytes, but its manifest.json lists {tokens:,} tokens "
                         f"({tokens * ds.dtype.itemsize:,} bytes); the shard changed since the mix was written "
                         f"(rebuild the mix, or check it with cuvee mix --verify)")
