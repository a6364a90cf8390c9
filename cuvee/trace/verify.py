"""``--verify``: a traced document checked against its sources, not against what the trace printed.

What "matches" means, check by check (each is reported with its detail; the trace is OK when all hold):

``tokens``  the shard document's tokens, without the EOS the mixer appended, are exactly the mix tokenizer's
            encoding of the mix input row's text (the source's ``text_key``), and decoded they give that text
            back (a tokenizer that does not round-trip says so instead of failing).
``record``  the recorded byte range, read again from the archive (locally or over HTTP/S3), parses with the run's
            own reader into the record the row names: the record framed at ``source_offset`` (+ ``source_skip``)
            carries the recorded WARC-Record-ID (ARC: its digest part), payload digest and URL. A run whose input
            was JSON lines or Parquet re-reads ``input_file`` at ``input_row`` instead.
``text``    the recipe's per-document stages (every stage but the whole-corpus ones, which need the whole run:
            dedup, corpus percentiles), built from ``recipe.resolved.json`` and run on that record, keep it and
            give exactly the output row's text. Of the whole-corpus stages only ``line_dedup`` changes the text of
            a document it keeps; it records how many lines it removed (``line_lines_removed``), and then the row's
            lines must be the replayed lines with exactly that many removed, order kept.

Building the stages loads their models once per run folder (seconds); tracing many positions pays it once.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from cuvee.trace.archive import reread, same_record
from cuvee.trace.decisions import RunRecipe
from cuvee.trace.rows import Row, read_row

TEXT_CHANGING_CORPUS_STAGES = {"line_dedup": "line_lines_removed"}


def check(name: str, ok: bool, detail: str) -> dict:
    return {"check": name, "ok": bool(ok), "detail": detail}


def tokens_check(tokens: np.ndarray, text, tokenizer, eos_id: int | None, text_key: str) -> dict:
    """The shard's tokens against the mix input row's text (see the module docstring)."""
    body = tokens[:-1] if eos_id is not None and len(tokens) and int(tokens[-1]) == eos_id else tokens
    if not isinstance(text, str):
        return check("tokens", False, f"the mix input row has no text under {text_key!r}")
    expected = np.asarray(tokenizer.encode_batch_numpy([text])[0])
    if len(expected) != len(body) or not np.array_equal(expected.astype(np.int64), np.asarray(body, np.int64)):
        return check("tokens", False, f"the shard holds {len(body):,} tokens, the row's text encodes to "
                                      f"{len(expected):,} other tokens: the shard is not this row's text")
    decoded = tokenizer.decode([int(t) for t in body])
    how = "decoded they equal it" if decoded == text else "(this tokenizer does not decode back to the same text)"
    return check("tokens", True, f"the shard's {len(body):,} tokens (+ EOS) are the encoding of the row's "
                                 f"{len(text):,}-character {text_key!r}; {how}")


class StageReplay:
    """A run's per-document stages, built once from its recipe (no exclusion writer, a scratch work folder: the
    run folder is never written), run on one document at a time."""

    def __init__(self, run: RunRecipe):
        from cuvee.pipeline.compiler import passes_through, replays_exactly, stage_builds
        from cuvee.pipeline.registry import Barrier

        self._scratch = tempfile.TemporaryDirectory(prefix="cuvee-trace-")
        self.steps: list[tuple[str, list]] = []
        self.corpus: list[str] = []  # whole-corpus stages, not replayed
        for sb in stage_builds(run.recipe, run.folder):
            built = sb.spec.build(sb.params, replace(sb.ctx, exclusions_dir=None, work_dir=Path(self._scratch.name)))
            if isinstance(built, Barrier) or any(passes_through(s) or replays_exactly(s) for s in built):
                self.corpus.append(sb.label)
            else:
                self.steps.append((sb.label, list(built)))

    def run(self, doc, until: str | None = None) -> tuple[object | None, str | None]:
        """(the document after every replayed stage, None) or (None, the label of the stage that dropped it);
        ``until``: stop after that stage."""
        from cuvee.pipeline.console import quiet_datatrove

        with quiet_datatrove(False, "the trace's console"):
            docs = [doc]
            for label, steps in self.steps:
                it = iter(docs)
                for step in steps:
                    it = step(it, rank=0, world_size=1)
                docs = list(it)
                if not docs:
                    return None, label
                if label == until:
                    break
        return docs[0], None

    def close(self) -> None:
        self._scratch.cleanup()


def document_of(row: Row):
    from datatrove.data import Document

    return Document(text=row.text, id=row.id, metadata=dict(row.metadata))


def source_record(meta: dict, storage_options: dict | None) -> tuple[object, dict]:
    """(the record the row was read from, the ``record`` check): the run's input row, or the archive range."""
    if meta.get("input_file") is not None and meta.get("input_row") is not None:
        again = read_row(str(meta["input_file"]), int(meta["input_row"]))
        return document_of(again), check("record", True, f"re-read row {again.row:,} of input {again.file}")
    doc, how = reread(meta, storage_options)
    diffs = same_record(doc, meta)
    where = f"{how['read']} read of {how['bytes']:,} bytes at {int(meta['source_offset']):,} of {meta['source_file']}"
    if diffs:
        return doc, check("record", False, f"{where}: " + "; ".join(diffs))
    return doc, check("record", True, f"{where}: record id, payload digest and URL equal the recorded ones")


def prepare(doc, row: Row):
    """The re-read record as the row's stages saw it: its id, and the reader keys taken from records outside
    the range (Common Crawl's CLD2 languages sit in the next record; the snapshot in the file's warcinfo)."""
    doc.id = row.id
    for key in ("cc_languages", "cc_charset", "cc_snapshot"):
        if row.metadata.get(key) is not None:
            doc.metadata.setdefault(key, row.metadata[key])
    return doc


def text_check(replayed, dropped_at: str | None, replay: StageReplay, row: Row) -> dict:
    """The replayed text against the row's (module docstring: exact, or line_dedup's recorded removals)."""
    what = f"{len(replay.steps)} per-document stages replayed"
    if replayed is None:
        return check("text", False, f"{what}: {dropped_at} drops the re-read record, but the run kept it")
    if replayed.text == row.text:
        return check("text", True, f"{what}: the text equals the output row's ({len(row.text):,} characters)")
    removed = row.metadata.get(TEXT_CHANGING_CORPUS_STAGES["line_dedup"])
    if removed and any(label.endswith(".line_dedup") for label in replay.corpus):
        if lines_removed(replayed.text, row.text, int(removed)):
            return check("text", True, f"{what}: the output row's text is the replayed text less the {int(removed)} "
                                       f"line(s) line_dedup recorded removing")
    first = next((i for i, (a, b) in enumerate(zip(replayed.text, row.text)) if a != b),
                 min(len(replayed.text), len(row.text)))
    return check("text", False, f"{what}: the replayed text ({len(replayed.text):,} characters) differs from the "
                                f"output row's ({len(row.text):,}) from character {first:,}")


def lines_removed(full: str, kept: str, n: int) -> bool:
    """``kept``'s lines are ``full``'s with exactly ``n`` lines left out, in order (stripped ends aside)."""
    a, b = full.strip().split("\n"), kept.strip().split("\n")
    if len(a) - len(b) != n:
        return False
    it = iter(a)
    return all(any(line == x for x in it) for line in b)
