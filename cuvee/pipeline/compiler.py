"""Recipe -> an ordered list of datatrove jobs (segments and whole-corpus phases).

A recipe is linear, but dedup-like stages need every document before deciding. Such a stage returns a
``Barrier``; the compiler cuts the pipeline there: the segment so far ends with an intermediate
writer, the barrier's phases run as their own jobs, and the next segment starts by re-reading the
intermediate files. Each job remembers which recipe stage every step came from, for the stats.
"""

from __future__ import annotations

import glob as _glob
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from datatrove.pipeline.base import PipelineStep

from cuvee.pipeline.readers import split_input_path
from cuvee.pipeline.recipe import Recipe, RecipeError
from cuvee.pipeline.registry import Barrier, BuildContext, get_stage
from cuvee.pipeline.writers import exclusion_writer, route_folder, intermediate_reader, intermediate_writer, output_writer

# step roles, for accounting
READER, STAGE, INTERNAL, SUMMARY, WRITER = "reader", "stage", "internal", "summary", "writer"


@dataclass
class Job:
    name: str  # seg00, seg01, phase name ...
    kind: str  # "segment" | "phase"
    pipeline: list
    labels: list[tuple[str, str]]  # (role, stage label) per step
    tasks: int
    workers: int | None = None
    logging_dir: Path = field(default_factory=Path)


def check_inputs(recipe: Recipe) -> None:
    """Pre-flight checks shared by ``cuvee run`` and ``cuvee validate``; each failure is one RecipeError line.

    Every local input path must exist and give its reader at least one readable file (for WARC/ARC/WET
    folders: an archive, ``.warc``/``.arc``/``.wet`` optionally ``.gz``/``.zst``/``.lz4``), and every
    local folder the run writes (run_dir, output.path, logging_dir) must be creatable: its first existing
    ancestor is a writable folder. Remote (``://``) paths are not checked.
    """
    from cuvee.pipeline import readers
    from cuvee.pipeline.recipe import RecipeError

    fmt = recipe.input.format
    for p in recipe.input.paths or ():  # a common_crawl input is checked when its listing is read (plan)
        if "://" in p:
            continue
        if any(ch in p for ch in "*?["):
            if not _glob.glob(p, recursive=True):
                raise RecipeError(f"input.paths: {p!r} matches no file")
        elif not os.path.exists(p):
            raise RecipeError(f"input.paths: {p!r} does not exist")
        folder, pattern = split_input_path(p)
        archives = fmt not in ("jsonl", "parquet")
        if pattern is not None:
            expected = f"files matching {pattern!r}"
        elif archives:
            expected = "WARC/ARC/WET archives (.warc, .arc, .wet, optionally .gz/.zst/.lz4)"
        else:
            expected = f"{fmt} files"
        why = ""
        try:
            plan = getattr(readers, "plan_input_files", None)
            if plan is not None:
                files = list(plan(p, fmt))
            else:
                from datatrove.io import get_datafolder

                files = get_datafolder(folder).list_files(recursive=True, glob_pattern=pattern)
                if archives and pattern is None:
                    files = [f for f in files if f.lower().endswith(readers.ARCHIVE_SUFFIXES)]
                files = [os.path.join(folder, f) for f in files]
        except (OSError, RuntimeError, ValueError) as e:
            files, why = [], f": {' '.join(str(e).split())[:200]}"
        files = [f for f in files if "://" in f or not os.path.exists(f) or os.access(f, os.R_OK)]
        if not files:
            raise RecipeError(f"input.paths: {p!r} holds no readable {expected} for input.format {fmt!r}{why}")

    outputs = [("run_dir", str(recipe.resolved_run_dir())), ("output.path", recipe.resolved_output())]
    if recipe.logging_dir:
        outputs.append(("logging_dir", recipe.logging_dir))
    for key, path in outputs:
        if "://" in path:
            continue
        target = Path(os.path.abspath(path))
        for anc in (target, *target.parents):
            if not os.path.lexists(anc):
                continue
            if not anc.is_dir():
                what = "is a file" if anc.exists() else "is a broken link"
                if anc == target:
                    raise RecipeError(f"{key}: {path!r} {what}, not a folder")
                raise RecipeError(f"{key}: {path!r} cannot be created: {str(anc)!r} {what}, not a folder")
            if not os.access(anc, os.W_OK | os.X_OK):
                raise RecipeError(f"{key}: {path!r} cannot be written: folder {str(anc)!r} is not writable")
            break


def _reader_steps(recipe: Recipe) -> list:
    inp = recipe.input
    if inp.common_crawl is not None:
        from cuvee.pipeline.plan import snapshot_sample
        from cuvee.pipeline.readers import UrlListReader

        sample = snapshot_sample(recipe)
        return [UrlListReader(list(sample.urls), fmt=inp.reader_format(), storage_options=inp.common_crawl.storage_options,
                              limit=inp.limit, max_record_bytes=inp.max_record_bytes, retries=inp.retries,
                              backoff_s=inp.backoff_s)]
    if inp.format in ("jsonl", "parquet"):
        from cuvee.pipeline.readers import PlannedJsonlReader, PlannedParquetReader

        # datatrove's readers plus per-file counters, listing files exactly like the run's plan
        cls = PlannedJsonlReader if inp.format == "jsonl" else PlannedParquetReader
        steps = []
        for p in inp.paths:
            folder, pattern = split_input_path(p)
            steps.append(cls(folder, glob_pattern=pattern, limit=inp.limit, recursive=True))
        return steps
    from cuvee.pipeline.readers import make_reader

    return [
        make_reader(*split_input_path(p), fmt=inp.format, limit=inp.limit, max_record_bytes=inp.max_record_bytes,
                    retries=inp.retries, backoff_s=inp.backoff_s)
        for p in inp.paths
    ]


class OutputSummary(PipelineStep):
    """Counts what reaches the writer: documents, characters and the language / routing histogram."""

    name = "📊 output summary"
    type = "📊 - STATS"

    def __init__(self, route_key: str | None):
        super().__init__()
        self.route_key = route_key

    FLUSH_EVERY = 1024  # counters merged once per this many documents (a stat_update costs ~1 us)

    def run(self, data, rank: int = 0, world_size: int = 1):
        counts: Counter = Counter()
        chars = n = 0
        route = self.route_key if self.route_key and self.route_key != "language" else None
        try:
            for doc in data:
                n += 1
                chars += len(doc.text)
                if lang := doc.metadata.get("language"):
                    counts[f"lang_{lang}"] += 1
                if route:
                    counts[f"route_{route_folder(doc.metadata, route)}"] += 1
                if n >= self.FLUSH_EVERY:
                    self._flush(n, chars, counts)
                    n = chars = 0
                yield doc
        finally:
            self._flush(n, chars, counts)

    def _flush(self, n: int, chars: int, counts: Counter) -> None:
        if n:
            self.stat_update("total", value=n)
            self.stat_update("chars", value=chars)
        for key, v in counts.items():
            self.stat_update(key, value=v)
        counts.clear()


def declared_metadata(recipe: Recipe) -> dict[str, str]:
    """Metadata keys (and Parquet types) the recipe's stages declare; one key with two types is an error."""
    out: dict[str, str] = {}
    for i, entry in enumerate(recipe.stage_entries):
        for k, t in entry.params.metadata_fields().items():
            if out.get(k, t) != t:
                raise RecipeError(f"stages[{i}]({entry.name}) writes metadata {k!r} as {t}, an earlier stage as {out[k]}")
            out[k] = t
    return out


COPY_FREE = True  # dedup barriers re-read and replay instead of writing a corpus copy where that is exact


def _replayable(built: Barrier) -> bool:
    """A barrier can go without a corpus copy when its ``before`` steps only record (documents pass through
    unchanged) and its ``after`` steps are deterministic functions of the phases' files (dedup filters)."""
    from cuvee.dedup.line_dedup import LineDedupFilter
    from cuvee.dedup.steps import DropListed, RecordingStep

    return (all(isinstance(s, RecordingStep) for s in built.before)
            and all(isinstance(s, (DropListed, LineDedupFilter)) for s in built.after))


def compile_recipe(recipe: Recipe, run_dir: Path | None = None) -> list[Job]:
    """The recipe's jobs: segments of per-document steps cut at every barrier, and the barriers' phases.

    After a barrier, the next segment needs the documents as they were at the cut. Normally the segment
    writes them to an intermediate copy. Where that stream can be regenerated exactly and cheaply (no stage
    since the last copy or the input changed documents, except dedup filters that replay from their own
    files), no copy is written: the next segment re-reads the input (or the last copy) and replays those
    filters, labelled internal so their counts are not taken twice. Positions are checked against the ids
    recorded at the cut (``PositionTracker``), so a replay that diverged would stop the run, not mislabel it.
    """
    run_dir = Path(run_dir or recipe.resolved_run_dir())
    work_dir = run_dir / "work"
    logs = Path(recipe.logging_dir) if recipe.logging_dir else run_dir / "logs"
    tasks = recipe.executor.tasks
    workers = recipe.executor.workers

    jobs: list[Job] = []
    seg = 0
    pipeline: list = _reader_steps(recipe)
    labels: list[tuple[str, str]] = [(READER, "reader")] * len(pipeline)
    # how to regenerate the current segment's starting stream with fresh step objects, and whether every step
    # added since then is replayable (a barrier's after-steps) or a pass-through recorder
    replay = lambda: _reader_steps(recipe)  # noqa: E731
    clean = True

    def close_segment() -> None:
        jobs.append(Job(f"seg{seg:02d}", "segment", pipeline, labels, tasks, workers, logs / f"seg{seg:02d}"))

    for i, entry in enumerate(recipe.stage_entries):
        spec = get_stage(entry.name)
        label = f"{i:02d}.{entry.name}"
        ctx = BuildContext(run_dir=run_dir, work_dir=work_dir, tasks=tasks, stage_index=i, stage_name=entry.name,
                           recipe_name=recipe.name)
        built = spec.build(entry.params, ctx)
        if recipe.output.exclusions:
            for step in built.after if isinstance(built, Barrier) else built:
                if hasattr(step, "exclusion_writer") and step.exclusion_writer is None:
                    step.exclusion_writer = exclusion_writer(str(run_dir / "excluded" / label))
        if isinstance(built, Barrier):
            pipeline.extend(built.before)
            labels.extend([(STAGE, label)] * len(built.before))
            copy_free = COPY_FREE and clean and _replayable(built)
            if not copy_free:
                inter = work_dir / f"seg{seg:02d}"
                pipeline.append(intermediate_writer(inter))
                labels.append((INTERNAL, f"seg{seg:02d}.writer"))
            close_segment()
            for ph in built.phases:
                jobs.append(Job(f"{label}.{ph.name}", "phase", ph.pipeline, [(STAGE, label)] * len(ph.pipeline),
                                ph.tasks, ph.workers, logs / f"{label}.{ph.name}"))
            seg += 1
            if copy_free:
                start = replay()
                labels = [(INTERNAL, f"seg{seg:02d}.replay")] * len(start)

                def replay(prev=replay, spec=spec, params=entry.params, ctx=ctx):
                    return prev() + list(spec.build(params, ctx).after)
            else:
                start = [intermediate_reader(inter)]
                labels = [(INTERNAL, f"seg{seg:02d}.reader")]

                def replay(inter=inter, spec=spec, params=entry.params, ctx=ctx):
                    return [intermediate_reader(inter)] + list(spec.build(params, ctx).after)
            pipeline = start + list(built.after)
            labels += [(STAGE, label)] * len(built.after)
            clean = _replayable(built)
        else:
            pipeline.extend(built)
            labels.extend([(STAGE, label)] * len(built))
            if clean and built and all(getattr(s, "replays_exactly", False) for s in built):
                # a deterministic filter (one-pass exact dedup): the next cut may re-run it instead of copying

                def replay(prev=replay, spec=spec, params=entry.params, ctx=ctx):
                    return prev() + list(spec.build(params, ctx))
            else:
                clean = False

    pipeline.append(OutputSummary(recipe.output.route_by))
    labels.append((SUMMARY, "output"))
    pipeline.append(output_writer(recipe.output.path or str(run_dir / "output"), recipe.output.format,
                                  recipe.output.route_by, declared_metadata(recipe)))
    labels.append((WRITER, "writer"))
    close_segment()
    return jobs
