"""The card's provenance sections (a mix or training folder's card): removal waterfall, tokens by source,
selection, language, quality bucket, crawl and epoch, rehydration and epochs, and traced spot checks.

Every value from data (ids, URLs, paths, names, reasons) reaches the Markdown through ``cuvee.card.escape``
(:func:`table` escapes its cells; ``text``/``code`` elsewhere), as in the rest of the card.
"""

from __future__ import annotations

from typing import Any

from cuvee.card.escape import Md, code, text
from cuvee.card.mix_provenance import MixProvenance
from cuvee.card.sections import n, pct, table

WATERFALL_HEADING = "Removal waterfall"
SPOT_HEADING = "Spot checks: tokens traced to their pages"
DIMENSIONS = (("source", "source"), ("selection", "selection"), ("language", "language"),
              ("quality", "quality bucket"), ("crawl", "crawl"), ("epoch", "epoch"))


def _reasons(reasons: dict) -> str:
    return ", ".join(f"{k}: {n(v)}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))) or "–"


def waterfall(prov: MixProvenance, img: str) -> str:
    lines = [f"### {WATERFALL_HEADING}\n",
             "From the crawl to the shards, one row per step that removes documents: each pipeline run's reader "
             "and stages (`stats.json`), then for each mix source the mixer's selection (`where`, `min_chars`, "
             "rehydration drops) and the documents the blend drew (distinct documents; draws count repeats).\n"]
    if img:
        lines.append(img)
    rows = [[r["label"], n(r["docs_in"]), n(r["dropped"]), pct(r["dropped"], r["docs_in"]), n(r["docs_out"]),
             _reasons(r["reasons"]) + (f"; {n(r['draws'])} draws, {n(r['tokens'])} tokens" if "draws" in r else "")]
            for r in prov.waterfall]
    lines.append(table(["step", "documents in", "removed", "removed (% of its input)", "documents out",
                        "reasons"], rows) if rows else "No run statistics or mixer counters were found.")
    if not prov.runs:
        lines.append("\nNo mix input was written by a cuvee run folder found beside it, so the pipeline's stages are "
                     "not in this waterfall.")
    return "\n".join(lines) + "\n"


def breakdowns(prov: MixProvenance) -> str:
    total = prov.mix.total_tokens
    lines = ["### Tokens by source, selection, language, quality bucket, crawl and epoch\n",
             f"Exact counts over the {n(total)} tokens of the shards (EOS included, every draw counted: a document "
             f"drawn in two epochs counts twice), each shard document joined through the mix's per-document index "
             f"to its input row's metadata."]
    if prov.quality_key:
        lines[-1] += (f" Quality buckets are of {code(prov.quality_key)}"
                      + ("." if prov.quality_key.endswith("_bucket") else
                         " (fifths of [0, 1] for a probability, else quartiles of the drawn documents)."))
    else:
        lines[-1] += " No document carries a quality score, so there is no quality breakdown."
    for dim, title in DIMENSIONS:
        counts = prov.tokens.get(dim) or {}
        if not counts or (dim == "selection" and set(counts) == {"(whole source)"}):
            continue
        if dim == "quality" and not prov.quality_key:
            continue
        docs = prov.documents[dim]
        rows = [[k, n(v), pct(v, total), n(docs[k])] for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines.append(f"\nBy {title}:\n")
        lines.append(table([title, "tokens", "share", "documents"], rows))
    return "\n".join(lines) + "\n"


def epochs(prov: MixProvenance) -> str:
    lines = ["### Rehydration and epochs\n"]
    rows = []
    for s in prov.mix.manifest.get("sources") or []:
        r = s.get("rehydration") or {}
        how = (f"{code(r.get('rule'))} on {code(r.get('key'))}: {n(r.get('tokens_before'))} -> "
               f"{n(r.get('tokens_after'))} weighted tokens") if r else "none"
        rows.append([code(s.get("name")), _num(s.get("epochs")), _num(s.get("max_epochs")), n(s.get("documents_used")),
                     Md(how)])
    lines.append(table(["source", "epochs (passes over its documents)", "max epochs", "documents drawn", "rehydration"],
                       rows))
    for s in prov.mix.manifest.get("sources") or []:
        per = (s.get("rehydration") or {}).get("per_range") or {}
        if per:
            lines.append(f"\nRehydration of {code(s.get('name'))} by cluster size:\n")
            lines.append(table(["cluster size", "weight", "documents", "tokens", "weighted tokens"],
                               [[k, _num(v.get("weight")), n(v.get("documents")), n(v.get("tokens")),
                                 n(v.get("weighted_tokens"))] for k, v in per.items() if isinstance(v, dict)]))
    return "\n".join(lines) + "\n"


def _num(v: Any) -> str:
    return f"{v:,.3f}".rstrip("0").rstrip(".") if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def _span(origin: dict) -> str:
    if origin.get("source_file") is None:
        return "–"
    off, length = origin.get("source_offset"), origin.get("source_length")
    span = f"bytes {n(off)}-{n(off + length - 1)}" if length is not None else f"from byte {n(off)}"
    return f"{origin['source_file']} {span}" + (f" (+{n(origin['source_skip'])} decompressed)"
                                                if origin.get("source_skip") else "")


def spot_checks(prov: MixProvenance) -> str:
    lines = [f"### {SPOT_HEADING}\n",
             f"{len(prov.spot_checks)} token positions drawn uniformly over the mix (seed {prov.spot_seed}), each traced "
             f"with `cuvee trace` through the shard's index to its input row and, for crawled pages, to the "
             f"archive's byte range."]
    verified = [t for t in prov.spot_checks if "verify" in t]
    if verified:
        lines[-1] += (" Each was verified: the range re-read and parsed by the run's reader, the recorded stages "
                      "replayed on it, and the shard's tokens compared with the text (`cuvee trace --verify`).")
    lines.append("")
    rows = []
    for t in prov.spot_checks:
        p = t["position"]
        if "error" in t:
            rows.append([n(p["token"]), p.get("shard", "–"), "–", "–", "–", "–", "–", f"not traced: {t['error']}"])
            continue
        d, page = t["document"], t.get("page") or {}
        v = t.get("verify")
        result = "–" if v is None else ("OK: " if v["ok"] else "MISMATCH: ") + "; ".join(
            f"{c['check']} {'ok' if c['ok'] else 'failed'}" for c in v["checks"])
        rows.append([n(p["token"]), f"{p['shard']} doc {n(p['document'])}", d["source"], str(d["epoch"]),
                     text(d["id"], 120), text(page.get("url", "–"), 120), _span(t.get("origin") or {}), result])
    lines.append(table(["token", "shard document", "source", "epoch", "document id", "page", "archive", "check"], rows))
    if verified:
        ok = sum(t["verify"]["ok"] for t in verified)
        lines.append(f"\n{ok} of {len(verified)} traced tokens match their sources.")
    return "\n".join(lines) + "\n"


def provenance(prov: MixProvenance, img: str = "") -> str:
    """The whole provenance part of the card."""
    return "\n".join([
        "## Provenance\n",
        f"Every token of mix {code(prov.mix.name)} is traceable: the shards' per-document index names each "
        f"document's source, epoch and input row, and each row carries the archive, byte range, record id and "
        f"every stage's decision. {code(f'cuvee trace {prov.mix.folder} --token N --verify')} traces any token.\n",
        waterfall(prov, img), breakdowns(prov), epochs(prov), spot_checks(prov)])


def training(info: dict) -> str:
    """A training folder's card: what the trainer read of the mix."""
    rows = [[k, v] for k, v in info.items()]
    return "## Training run\n\n" + table(["field", "value"], rows) + "\n"
