"""Open the token shards a training or eval run reads: mixer output dirs, shard prefixes, or mix YAMLs (already
built by ``cuvee mix``: opening reads, it never builds).

All shards of one run must share a tokenizer; its vocab size and EOS id come from ``manifest.json``
(see docs/ARCHITECTURE.md, "Mixer output"). Documents are addressed by one global index across shards; each
document's source comes from its mix's per-document index (cuvee.mixer.docindex).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvee.kernel.errors import UserError
from cuvee.mixer.docindex import KEY, MixIndex, refuse_indexless
from cuvee.mixer.indexed import IndexedDataset


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


class MixNotBuiltError(UserError, FileNotFoundError):
    """A mix YAML named as data whose mix has not been built: reading never builds data."""


def _folder_manifest(folder: Path) -> dict:
    """The mixer manifest of a shard folder, or {} when it has none (or an unreadable one)."""
    mf = folder / "manifest.json"
    try:
        return json.loads(mf.read_text()) if mf.exists() else {}
    except (OSError, ValueError):
        return {}


def _source_table(datasets: list[IndexedDataset]):
    """(names, [(per-document local source ids, local -> global name index) per dataset]).

    Each document's source is read from its mix's per-document index (cuvee.mixer.docindex). Shards without one
    (no mixer manifest: plain Megatron shards, cuvee's byte-level demo data) count as ``UNKNOWN_SOURCE``; a mix
    built before the index is refused when it is opened (:func:`open_shards`)."""
    names: list[str] = []
    indexes: dict[Path, MixIndex | None] = {}
    out = []
    for ds in datasets:
        prefix = Path(ds.prefix)
        parent = prefix.parent.resolve()
        if parent not in indexes:
            manifest = _folder_manifest(parent)
            refuse_indexless(parent, manifest)
            indexes[parent] = MixIndex(parent, manifest) if KEY in manifest else None
        index = indexes[parent]
        if index is not None:
            local, local_names = index.records(prefix.name)["source"], index.sources
        else:
            local, local_names = np.zeros(len(ds), dtype=np.uint16), []
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


def resolve_mix_yaml(path: Path) -> Path:
    """The output folder of a ``mixes/*.yaml``, built earlier by ``cuvee mix`` from this very YAML and these source
    files (an edited YAML or a changed source file is refused); a mix not built yet is refused in one line naming
    the command that builds it: reading data never writes it."""
    try:
        from cuvee.mixer.config import load_mix_config
        from cuvee.mixer.mix import check_built
    except ImportError as e:
        raise RuntimeError(f"{path}: mix YAMLs need cuvee.mixer; pass a mixer output directory instead") from e
    cfg = load_mix_config(path)
    out = Path(cfg.output_dir or f"out/mix/{cfg.name}")
    if not (out / "manifest.json").exists():
        raise MixNotBuiltError(f"{path}: its mix is not built ({out} holds no manifest.json); build it first: "
                               f"cuvee mix {path}")
    check_built(path, out)
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
                refuse_indexless(p, manifest)
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
                manifest = json.loads(mf.read_text())
                refuse_indexless(prefix.parent, manifest)
                _merge_tokenizer(tok, manifest.get("tokenizer") or {}, prefix.parent)
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
