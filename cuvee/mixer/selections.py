"""The manifest's view of ``selections:``: which blend sources are selections of which source, their realised
shares, and what each selected source left out.

The blend itself knows nothing of selections (``MixConfig.blend_config`` makes each one a source of its own);
this only labels the manifest entries and sums them per source, so a reader sees "bucket 15-19: 80 % of the
tokens, 4 epochs; 1,234 documents of the source in no selection" without recomputing anything.
"""

from __future__ import annotations


def selection_summary(entries: list[dict], origins: list[tuple[str, str] | None], total_tokens: int | None) -> dict:
    """Adds ``realised_share`` to every manifest source entry (None before blending) and ``source`` /
    ``selection`` to the entries of selections; returns ``{"selections": {source: summary}}`` when the mix
    has selections, else ``{}``.

    A source's documents are counted once per selection (each selection reads the source); as selections are
    disjoint, ``documents_selected`` (their sum) never exceeds ``documents_read``, and the rest are
    ``documents_left_out`` (in no selection, or without text / shorter than ``min_chars``).
    """
    out: dict[str, dict] = {}
    for entry, origin in zip(entries, origins, strict=True):
        realised = entry.get("realised_tokens")
        entry["realised_share"] = round(realised / total_tokens, 6) if total_tokens and realised is not None else None
        if origin is None:
            continue
        source, selection = origin
        entry["source"], entry["selection"] = source, selection
        read = entry["counters"]["read"]
        group = out.setdefault(source, {"documents_read": read, "documents_selected": 0, "selections": []})
        if group["documents_read"] != read:
            raise RuntimeError(f"source '{source}': selections read {group['documents_read']} and {read} documents "
                               f"from the same files")
        group["documents_selected"] += entry["documents"]
        group["selections"].append({
            "name": selection, "where": entry["where"], "weight": entry["weight"], "max_epochs": entry["max_epochs"],
            "documents": entry["documents"], "available_tokens": entry["available_tokens"],
            "target_tokens": entry["target_tokens"], "realised_tokens": realised,
            "realised_share": entry["realised_share"], "epochs": entry["epochs"],
        })
    for source, group in out.items():
        if group["documents_selected"] > group["documents_read"]:
            raise RuntimeError(f"source '{source}': its selections took {group['documents_selected']} documents of "
                               f"{group['documents_read']}; selections must not overlap")
        group["documents_left_out"] = group["documents_read"] - group["documents_selected"]
    return {"selections": out} if out else {}
