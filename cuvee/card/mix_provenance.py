"""What a mix is made of, counted from its provenance: every shard document joined to its input row.

Why counted here and not estimated: the mix's per-document index (cuvee/mixer/docindex.py) names each shard
document's source, epoch and input row, and the row carries its language, scores and crawl; so tokens per source,
selection, language, quality bucket, crawl and epoch are exact sums of shard document lengths (EOS included,
every draw counted, repeats too). The removal waterfall follows a record from the crawl to the shards: the runs'
``stats.json`` (records read, each stage's drops) and the mixer's own counters (``where``, ``min_chars``,
rehydration drops), then what the blend drew. Spot checks trace seeded random tokens to their pages
(:mod:`cuvee.trace`).
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvee.trace.mixfolder import MixFolder
from cuvee.trace.rows import run_folder_of

ARC_CRAWL = "ARC archive (no crawl name)"
NOT_CRAWLED = "not a crawl record"
NO_SCORE = "no score"


@dataclass
class MixProvenance:
    mix: MixFolder
    runs: list[Path]  # the cuvee runs whose outputs the mix read, in the order of its input files
    tokens: dict[str, Counter] = field(default_factory=dict)  # dimension -> value -> tokens
    documents: dict[str, Counter] = field(default_factory=dict)  # dimension -> value -> shard documents
    quality_key: str | None = None
    waterfall: list[dict] = field(default_factory=list)
    spot_checks: list[dict] = field(default_factory=list)
    spot_seed: int = 0


def _attributes(files: list[str]) -> list[list[dict]]:
    """Per mix input file, per row: the metadata the breakdowns need (Parquet: the metadata struct only)."""
    from cuvee.pipeline.writers import metadata_from_row
    from cuvee.trace.rows import open_text

    out = []
    for f in files:
        rows: list[dict] = []
        if f.endswith(".parquet"):
            import pyarrow.parquet as pq

            names = pq.ParquetFile(f).schema_arrow.names
            cols = [c for c in ("metadata", "language") if c in names]
            for rec in pq.read_table(f, columns=cols).to_pylist() if cols else []:
                rows.append({**({"language": rec["language"]} if rec.get("language") else {}),
                             **metadata_from_row(rec.get("metadata"))})
        elif Path(f).is_file():
            with open_text(f) as fh:
                for line in fh:
                    if line.strip():
                        rec = json.loads(line)
                        meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
                        rows.append({**{k: v for k, v in rec.items() if k in ("language", "cc_snapshot")}, **meta})
        out.append(rows)
    return out


def quality_key(rows: list[list[dict]]) -> str | None:
    """The quality signal to bucket by: a ``*_bucket`` tag, else the most common ``*_score`` that is not
    language ID's."""
    seen: Counter = Counter()
    for rs in rows:
        for r in rs:
            seen.update(k for k, v in r.items() if (k.endswith("_bucket") or k.endswith("_score"))
                        and k != "language_score" and v is not None)
    buckets = [k for k in seen if k.endswith("_bucket")]
    pool = buckets or list(seen)
    return max(pool, key=lambda k: (seen[k], k)) if pool else None


def _bucket(value, key: str, edges: np.ndarray | None) -> str:
    if value is None:
        return NO_SCORE
    if key.endswith("_bucket") or isinstance(value, str) or edges is None:
        return str(value)
    k = int(np.clip(np.searchsorted(edges, float(value), side="right") - 1, 0, len(edges) - 2))
    return f"{edges[k]:.2f} to {edges[k + 1]:.2f}"


def _edges(values: list[float]) -> np.ndarray | None:
    """Fifths of [0, 1] for a probability-like score, else the drawn documents' quartiles."""
    if not values:
        return None
    v = np.asarray(values, dtype=float)
    if v.min() >= 0 and v.max() <= 1:
        return np.linspace(0, 1, 6)
    return np.unique(np.quantile(v, [0, 0.25, 0.5, 0.75, 1]))


def _crawl(meta: dict) -> str:
    if meta.get("cc_snapshot"):
        return str(meta["cc_snapshot"])
    if str(meta.get("warc_record_id", "")).startswith("arc:"):
        return ARC_CRAWL
    return NOT_CRAWLED if meta.get("source_file") is None else "unknown crawl"


def breakdowns(prov: MixProvenance) -> None:
    """Tokens and documents per source, selection, language, quality bucket, crawl and epoch, over every shard
    document (each draw counted)."""
    mix = prov.mix
    table = mix.index.table
    files = table.files
    rows = _attributes(files)
    prov.quality_key = key = quality_key(rows)
    entries = table.entries
    scores = [r.get(key) for rs in rows for r in rs] if key else []
    edges = _edges([float(s) for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]) \
        if key and not key.endswith("_bucket") else None
    dims = ("source", "selection", "language", "quality", "crawl", "epoch")
    prov.tokens = {d: Counter() for d in dims}
    prov.documents = {d: Counter() for d in dims}
    names = [str(s.get("name")) for s in mix.manifest.get("sources") or []]
    for shard in mix.shards:
        rec = mix.index.records(shard)
        lengths = np.asarray(mix.dataset(shard).sequence_lengths, dtype=np.int64)
        for src, epoch, entry, n in zip(rec["source"].tolist(), rec["epoch"].tolist(), rec["entry"].tolist(),
                                        lengths.tolist()):
            e = entries[entry]
            f, r = int(e["file"]), int(e["row"])
            meta = rows[f][r] if r < len(rows[f]) else {}
            entry_src = mix.source_entry(src)
            values = {"source": str(entry_src.get("source") or names[src]),
                      "selection": names[src] if entry_src.get("selection") else "(whole source)",
                      "language": str(meta.get("language") or "unknown"),
                      "quality": _bucket(meta.get(key), key, edges) if key else NO_SCORE,
                      "crawl": _crawl(meta), "epoch": str(epoch)}
            for d, v in values.items():
                prov.tokens[d][v] += n
                prov.documents[d][v] += 1


def _run_stats(run: Path) -> dict:
    try:
        return json.loads((run / "stats.json").read_text())
    except (OSError, ValueError):
        return {}


def waterfall(prov: MixProvenance) -> None:
    """Rows ``{label, docs_in, docs_out, dropped, reasons}``: each run's reader and stages, then each mix source's
    selection and the blend's draws."""
    rows = []
    for run in prov.runs:
        stats = _run_stats(run)
        for s in stats.get("stages") or []:
            if s.get("docs_in") is None:
                continue
            label = f"{run.name}: {s.get('label') or s.get('name')}"
            rows.append({"label": label, "docs_in": s["docs_in"], "docs_out": s.get("docs_out"),
                         "dropped": sum((s.get("dropped") or {}).values()), "reasons": dict(s.get("dropped") or {})})
    names = [str(s.get("name")) for s in prov.mix.manifest.get("sources") or []]
    for src in prov.mix.manifest.get("sources") or []:
        c = src.get("counters") or {}
        if c.get("read") is None:
            continue
        name = str(src.get("name"))
        dropped = {str(k): int(v) for k, v in (c.get("dropped") or {}).items()}
        rows.append({"label": f"mix {name}: selection", "docs_in": int(c["read"]), "docs_out": int(c.get("kept", 0)),
                     "dropped": sum(dropped.values()), "reasons": dropped})
        kept = int(src.get("documents") or c.get("kept", 0))
        distinct, draws = _drawn(prov.mix, names.index(name))
        rows.append({"label": f"mix {name}: drawn", "docs_in": kept, "docs_out": distinct, "dropped": kept - distinct,
                     "reasons": {"not drawn": kept - distinct} if kept > distinct else {}, "draws": draws,
                     "tokens": int(src.get("realised_tokens") or 0)})
    prov.waterfall = rows


def _drawn(mix: MixFolder, k: int) -> tuple[int, int]:
    """(distinct documents, draws) of mix source ``k`` over every shard."""
    entries: set[int] = set()
    draws = 0
    for shard in mix.shards:
        rec = mix.index.records(shard)
        mine = rec["entry"][rec["source"] == k]
        draws += len(mine)
        entries.update(mine.tolist())
    return len(entries), draws


def spot_checks(prov: MixProvenance, n: int, seed: int, verify: bool) -> None:
    """``n`` tokens drawn uniformly (seeded) over the mix, each traced to its page (and verified)."""
    from cuvee.trace.mixfolder import TraceError
    from cuvee.trace.trace import Tracer

    rng = random.Random(seed)
    prov.spot_seed = seed
    tracer = Tracer(prov.mix, verify=verify)
    try:
        for _ in range(n):
            pos = prov.mix.at_token(rng.randrange(prov.mix.total_tokens))
            try:
                prov.spot_checks.append(tracer.position(pos))
            except TraceError as e:  # an archive unreachable from here: the card says so for that token
                prov.spot_checks.append({"position": {"token": pos.token, "shard": pos.shard}, "error": str(e)})
    finally:
        tracer.close()


def mix_provenance(folder: str | Path, spot: int = 5, seed: int = 0, verify: bool = True) -> MixProvenance:
    """The provenance of mix folder ``folder``: breakdowns, waterfall and ``spot`` traced tokens."""
    mix = MixFolder(folder)
    runs: list[Path] = []
    for f in mix.index.table.files:
        run = run_folder_of(f)
        if run is not None and run not in runs:
            runs.append(run)
    prov = MixProvenance(mix, runs)
    breakdowns(prov)
    waterfall(prov)
    if spot:
        spot_checks(prov, spot, seed, verify)
    return prov


def runs_of(folder: str | Path) -> list[Path]:
    """The run folders a mix folder's inputs came from (cheap: the index's file list only)."""
    mix = MixFolder(folder)
    out: dict[Path, None] = defaultdict(lambda: None)
    for f in mix.index.table.files:
        run = run_folder_of(f)
        if run is not None:
            out[run] = None
    return list(out)
