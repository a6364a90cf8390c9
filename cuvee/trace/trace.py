"""The trace of a mix position, a training row or a run's document id, as one JSON-able mapping.

A :class:`Tracer` keeps what is costly to open (run recipes, built stages for ``--verify``) across the traces of
one command, so a hundred positions open each run folder and build its stages once.
"""

from __future__ import annotations

import json
from pathlib import Path

from cuvee.trace.decisions import RunRecipe, clusters, identity, open_run, stage_decisions
from cuvee.trace.mixfolder import MixFolder, Position, TraceError
from cuvee.trace.rows import Row, find_id, read_row, run_folder_of, run_outputs


class Tracer:
    """Traces against one mix folder (or none, for a run's document ids); ``verify`` adds the checks of
    :mod:`cuvee.trace.verify`."""

    def __init__(self, mix: MixFolder | None = None, verify: bool = False):
        self.mix, self.verify = mix, verify
        self._replays: dict[Path, object] = {}
        self._mixes: dict[Path, MixFolder] = {}

    # ---- a token of the mix ---------------------------------------------------------------------------------
    def position(self, pos: Position, mix: MixFolder | None = None) -> dict:
        mix = mix or self.mix
        doc = mix.describe(pos)
        tokens = mix.tokens(pos)
        eos = mix.eos_id
        row = read_row(doc["file"], doc["row"])
        run = self._run_of(doc["file"])
        src = mix.source_entry(doc["source_index"])
        out = {
            "mix": {"folder": str(mix.folder), "name": mix.name},
            "position": {"token": pos.token, "shard": pos.shard, "document": pos.document, "offset": pos.offset,
                         "document_tokens": len(tokens),
                         "eos": bool(eos is not None and pos.offset == len(tokens) - 1 and int(tokens[-1]) == eos),
                         "token_id": int(tokens[pos.offset])},
            "document": {"id": doc["id"], "source": doc["source"], "selection": doc["selection"],
                         "source_index": doc["source_index"], "epoch": doc["epoch"], "entry": doc["entry"]},
            **self._row_part(row, run),
        }
        if self.verify:
            from cuvee.trace.verify import tokens_check

            key = str(src.get("text_key") or "text")
            checks = [tokens_check(tokens, row.field(key), mix.tokenizer, eos, key)]
            checks += self._source_checks(row, run)
            out["verify"] = {"ok": all(c["ok"] for c in checks), "checks": checks}
        return out

    # ---- a row of a training step -----------------------------------------------------------------------------
    def training(self, folder: str | Path, step: int, row: int, at: int = 0) -> dict:
        """Token ``at`` of row ``row`` of step ``step`` of a training run, traced in the mix it was read from."""
        from cuvee.trace.training import training_row

        tr = training_row(folder, step, row, at)
        mix = self._mixes.get(tr.prefix.parent)
        if mix is None:
            mix = self._mixes[tr.prefix.parent] = MixFolder(tr.prefix.parent)
        return {"training": tr.info, **self.position(mix.document_position(tr.prefix.name, tr.local, tr.offset), mix)}

    # ---- a document id of a run ------------------------------------------------------------------------------
    def document_id(self, run_folder: Path, doc_id: str) -> dict:
        """A document of run ``run_folder`` by id: its output row (kept) or its exclusion record (dropped)."""
        run = open_run(Path(run_folder).resolve())
        row = find_id(run_outputs(run.folder), doc_id)
        if row is not None:
            out = {"run": str(run.folder), "document": {"id": row.id, "kept": True}, **self._row_part(row, run)}
            if self.verify:
                checks = self._source_checks(row, run)
                out["verify"] = {"ok": all(c["ok"] for c in checks), "checks": checks}
            return out
        excluded = run.folder / "excluded"
        files = sorted(str(p) for p in excluded.glob("*/*.jsonl*")) if excluded.is_dir() else []
        if not files:
            raise TraceError(f"document {doc_id!r} is not in the output of run {run.folder}, and the run kept no "
                             f"exclusion records (output.exclusions: false), so which stage dropped it was not "
                             f"recorded; rerun the recipe with output.exclusions: true to record every drop")
        row = find_id(files, doc_id)
        if row is None:
            raise TraceError(f"document {doc_id!r} is neither in the output of run {run.folder} nor in its exclusion "
                             f"records; {_unrecorded(run.folder)}")
        meta = row.metadata
        label = str(meta.get("filter_stage", ""))
        at = run.index_of(label)
        out = {"run": str(run.folder),
               "document": {"id": row.id, "kept": False, "dropped_by": label, "reason": meta.get("filter_reason"),
                            "exclusion_record": f"{row.file} row {row.row}"},
               "input": {"run": str(run.folder), "recipe": run.name},
               "page": _page(meta), "origin": identity(meta),
               "stages": stage_decisions(run, meta, dropped_at=at, reason=meta.get("filter_reason")),
               "clusters": clusters(meta, row.id)}
        if self.verify:
            checks = self._drop_checks(row, run, label)
            out["verify"] = {"ok": all(c["ok"] for c in checks), "checks": checks}
        return out

    # ---- shared parts ------------------------------------------------------------------------------------------
    def _run_of(self, file: str) -> RunRecipe | None:
        folder = run_folder_of(file)
        return open_run(folder) if folder is not None else None

    def _row_part(self, row: Row, run: RunRecipe | None) -> dict:
        meta = row.metadata
        part = {"input": {"file": row.file, "row": row.row, "run": str(run.folder) if run else None,
                          "recipe": run.name if run else None},
                "page": _page(meta), "origin": identity(meta), "clusters": clusters(meta, row.id)}
        part["stages"] = stage_decisions(run, meta) if run else None
        return part

    def _replay(self, run: RunRecipe):
        if run.folder not in self._replays:
            from cuvee.trace.verify import StageReplay

            self._replays[run.folder] = StageReplay(run)
        return self._replays[run.folder]

    def _source_checks(self, row: Row, run: RunRecipe | None) -> list[dict]:
        """``record`` and ``text`` checks of a row a run wrote (none for a mix input no run wrote)."""
        from cuvee.trace.verify import check, prepare, source_record, text_check

        if run is None:
            return []
        meta = row.metadata
        if meta.get("input_file") is None and meta.get("source_offset") is None:
            return [check("record", False, "the row records neither a byte range nor an input row to re-read")]
        doc, rec = source_record(meta, _storage_options(run))
        if not rec["ok"]:
            return [rec]
        replay = self._replay(run)
        replayed, dropped_at = replay.run(prepare(doc, row))
        return [rec, text_check(replayed, dropped_at, replay, row)]

    def _drop_checks(self, row: Row, run: RunRecipe, label: str) -> list[dict]:
        """A dropped document: its record re-read, and the replayed stages drop it at the recorded stage (a
        whole-corpus stage's drop, dedup's, cannot be replayed one document at a time: said so)."""
        from cuvee.trace.verify import check, prepare, source_record

        doc, rec = source_record(row.metadata, _storage_options(run))
        if not rec["ok"]:
            return [rec]
        replay = self._replay(run)
        if label in replay.corpus:
            before = _before(replay, label)
            kept = before is None or replay.run(prepare(doc, row), until=before)[0] is not None
            return [rec, check("drop", kept, f"{label} is a whole-corpus stage: its drop is recorded, not replayed; "
                                             + ("the per-document stages before it keep the re-read record" if kept
                                                else "a per-document stage before it drops the re-read record"))]
        replayed, dropped_at = replay.run(prepare(doc, row))
        ok = dropped_at == label
        return [rec, check("drop", ok, f"replayed, the per-document stages drop it at {dropped_at or 'no stage'}"
                                       + ("" if ok else f", not at {label}"))]

    def close(self) -> None:
        for r in self._replays.values():
            r.close()
        self._replays.clear()


def _before(replay, label: str) -> str | None:
    """The last replayed stage before whole-corpus stage ``label`` (labels sort by recipe position)."""
    earlier = [lab for lab, _ in replay.steps if lab < label]
    return earlier[-1] if earlier else None


def _unrecorded(folder: Path) -> str:
    """Which stages of a run dropped documents without writing exclusion records (stats.json's counts)."""
    try:
        stages = json.loads((folder / "stats.json").read_text()).get("stages") or []
    except (OSError, ValueError):
        stages = []
    quiet = [f"{s['label']} ({sum(s['dropped'].values()):,} dropped)" for s in stages
             if s.get("label") and s.get("dropped") and not (folder / "excluded" / s["label"]).is_dir()]
    said = f"a stage that drops without writing exclusion records may have dropped it ({', '.join(quiet)}), or " \
        if quiet else ""
    return f"{said}the reader never made it a document (request, metadata, ... records are counted in stats.json)"


def _page(meta: dict) -> dict:
    return {k: meta[k] for k in ("url", "date", "cc_snapshot", "language") if meta.get(k) is not None}


def _storage_options(run: RunRecipe) -> dict | None:
    cc = getattr(run.recipe.input, "common_crawl", None)
    return dict(cc.storage_options or {}) if cc is not None and getattr(cc, "storage_options", None) else None


def dumps(traces) -> str:
    return json.dumps(traces, indent=2, ensure_ascii=False, default=str)
