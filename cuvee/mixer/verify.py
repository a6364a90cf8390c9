"""``cuvee mix --verify``: a mix folder re-checked against its manifest, shards and per-document index alike."""

from __future__ import annotations

import json
from pathlib import Path

from cuvee.mixer.docindex import KEY, DocumentIndexError, MixIndex
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.tokenizers import sha256_file


def read_manifest(out_dir: str | Path) -> dict:
    return json.loads((Path(out_dir) / "manifest.json").read_text())


def verify_mix(out_dir: str | Path) -> dict:
    """Re-check a mix folder against its manifest (hashes, document and token counts, the per-document index);
    raises on any mismatch.

    Why: shards travel (object stores, cluster scratch); a trainer should refuse a truncated or mixed-up copy.
    """
    out = Path(out_dir)
    manifest = read_manifest(out)
    block = manifest.get(KEY) or {}
    files = [(block.get("documents"), block.get("sha256_documents")), (block.get("ids"), block.get("sha256_ids"))]
    problems = [] if block else ["no per-document index (built before cuvee mix wrote one): rebuild the mix"]
    tokens = docs = 0
    for s in manifest["shards"]:
        prefix = out / s["prefix"]
        for ext, key in ((".bin", "sha256_bin"), (".idx", "sha256_idx")):
            path = Path(f"{prefix}{ext}")
            if not path.exists():
                problems.append(f"{path.name}: missing")
            elif sha256_file(path) != s[key]:
                problems.append(f"{path.name}: sha256 differs from the manifest")
        files += [(s["docs"], s["sha256_docs"])] if block else []
        if not problems:
            ds = IndexedDataset(prefix)
            if len(ds) != s["documents"] or ds.num_tokens != s["tokens"]:
                problems.append(f"{s['prefix']}: {len(ds)} documents / {ds.num_tokens} tokens, manifest says "
                                f"{s['documents']} / {s['tokens']}")
            tokens += ds.num_tokens
            docs += len(ds)
    for name, digest in files if block else []:
        if not (out / name).exists():
            problems.append(f"{name}: missing")
        elif sha256_file(out / name) != digest:
            problems.append(f"{name}: sha256 differs from the manifest")
    if not problems and tokens != manifest["total_tokens"]:
        problems.append(f"shards hold {tokens} tokens, manifest total_tokens is {manifest['total_tokens']}")
    if not problems:
        problems += _check_index(out, manifest)
    if problems:
        raise ValueError(f"mix {out} does not match its manifest:\n  " + "\n  ".join(problems))
    return {"shards": len(manifest["shards"]), "documents": docs, "tokens": tokens, "mix_sha256": manifest["mix_sha256"]}


def _check_index(out: Path, manifest: dict) -> list[str]:
    """Every shard has one record per document, naming a listed source and an existing table entry."""
    try:
        index = MixIndex(out, manifest)
        entries, sources = len(index.table), len(index.sources)
        for s in manifest["shards"]:
            rec = index.records(s["prefix"])
            if len(rec) and (int(rec["entry"].max()) >= entries or int(rec["source"].max()) >= sources):
                return [f"{s['docs']}: names a table entry or source that does not exist"]
    except DocumentIndexError as e:
        return [str(e)]
    return []
