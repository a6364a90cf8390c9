"""A stored row's metadata read as the recipe's decisions: per stage, what it scored and what it decided.

The scheme is docs/ARCHITECTURE.md's ("Provenance"): a stage's decision record is the metadata keys it declares
(``metadata_fields()``; with two stages declaring one key, the later one's value is the one kept); a document in
the output passed every stage; an exclusion record names the stage that dropped it (``filter_stage``, ``NN.name``)
and datatrove's ``filter_reason``; dedup stages write ``<kind>_cluster_size`` (and, on a dropped copy,
``<kind>_duplicate_of``: the keeper's id, which is the cluster's id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cuvee.trace.mixfolder import TraceError

DEDUP_KINDS = ("exact", "url", "minhash", "line")
IDENTITY_KEYS = ("source_file", "source_offset", "source_length", "source_skip", "warc_record_id", "payload_digest",
                 "input_file", "input_row")


@dataclass(frozen=True)
class RunRecipe:
    """A run folder's recipe as it ran (``recipe.resolved.json``), with each stage's label and declared keys."""

    folder: Path
    recipe: object  # cuvee.pipeline.recipe.Recipe
    labels: tuple[str, ...]  # "NN.name", as exclusion folders and filter_stage name them
    keys: tuple[tuple[str, ...], ...]  # metadata keys each stage declares

    @property
    def name(self) -> str:
        return str(self.recipe.name)

    def index_of(self, label: str) -> int | None:
        return self.labels.index(label) if label in self.labels else None


def open_run(folder: Path) -> RunRecipe:
    """The recipe of run ``folder``, validated by the stage registry (one line when it no longer validates); read
    once per version of its ``recipe.resolved.json``."""
    path = folder / "recipe.resolved.json"
    try:
        version = path.stat().st_mtime_ns
    except OSError as e:
        raise TraceError(f"{path}: unreadable ({e.strerror or e}); the run folder is incomplete") from None
    return _open_run(folder, version)


@cache
def _open_run(folder: Path, version: int) -> RunRecipe:
    from cuvee.pipeline.recipe import parse_recipe

    path = folder / "recipe.resolved.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: unreadable ({e}); the run folder is incomplete") from None
    recipe = parse_recipe(raw, str(path))
    entries = recipe.stage_entries
    return RunRecipe(folder, recipe, tuple(f"{i:02d}.{e.name}" for i, e in enumerate(entries)),
                     tuple(tuple(e.params.metadata_fields()) for e in entries))


def stage_decisions(run: RunRecipe, meta: dict, dropped_at: int | None = None, reason: str | None = None) -> list[dict]:
    """Per stage up to the one that dropped the document (all of them for a kept one): its label, its decision
    (``kept``, or ``dropped`` with the reason) and the values of the keys it declares."""
    last = {k: i for i, keys in enumerate(run.keys) for k in keys}  # a key's value is its last declarer's
    out = []
    for i, label in enumerate(run.labels):
        scores = {k: meta[k] for k in run.keys[i] if last[k] == i and meta.get(k) is not None}
        entry = {"stage": label, "decision": "kept", "scores": scores}
        if i == dropped_at:
            entry.update(decision="dropped", reason=reason)
            out.append(entry)
            break
        out.append(entry)
    return out


def clusters(meta: dict, doc_id: str) -> list[dict]:
    """The dedup clusters the document belongs to, one per dedup kind that recorded one: the cluster's size and
    id (its keeper's document id: this document's own when it was kept for the cluster)."""
    out = []
    for kind in DEDUP_KINDS:
        size = meta.get(f"{kind}_cluster_size")
        of = meta.get(f"{kind}_duplicate_of")
        if size is None and of is None:
            continue
        c = {"kind": kind, "size": size}
        if kind == "line":  # line clusters have no keeper: every copy loses the line
            c["lines_removed"] = meta.get("line_lines_removed")
        else:
            c["cluster_id"] = of if of is not None else doc_id
            c["keeper"] = of is None
        out.append(c)
    return out


def identity(meta: dict) -> dict:
    """The record's identity at the source (reader keys), and the page it was: URL, date, crawl."""
    ident = {k: meta[k] for k in IDENTITY_KEYS if meta.get(k) is not None}
    for k in ("url", "date", "cc_snapshot", "warc_type", "content_type"):
        if meta.get(k) is not None:
            ident[k] = meta[k]
    return ident
