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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from datatrove.pipeline.base import PipelineStep

from cuvee.kernel.config import did_you_mean
from cuvee.pipeline.readers import split_input_path
from cuvee.pipeline.recipe import Recipe, RecipeError
from cuvee.pipeline.registry import (
    Barrier,
    BuildContext,
    StageParams,
    StageSpec,
    get_stage,
)
from cuvee.pipeline.writers import (
    intermediate_reader,
    intermediate_writer,
    output_writer,
    route_folder,
)

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

    def completed_ranks(self) -> int:
        """Ranks that wrote datatrove's completion marker (a rerun skips them)."""
        comp = Path(self.logging_dir) / "completions"
        return sum(1 for _ in comp.iterdir()) if comp.exists() else 0


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
                              backoff_s=inp.backoff_s, timeout_s=inp.timeout_s)]
    if inp.format in ("jsonl", "parquet"):
        from cuvee.pipeline.readers import PlannedJsonlReader, PlannedParquetReader
        from cuvee.pipeline.remote import remote_folder

        # datatrove's readers plus per-file counters, listing files exactly like the run's plan
        cls = PlannedJsonlReader if inp.format == "jsonl" else PlannedParquetReader
        steps = []
        for p in inp.paths:
            folder, pattern = split_input_path(p)
            steps.append(cls(remote_folder(folder, inp.timeout_s), glob_pattern=pattern, limit=inp.limit, recursive=True,
                             text_key=inp.text_key, id_key=inp.id_key))
        return steps
    from cuvee.pipeline.readers import make_reader

    return [
        make_reader(*split_input_path(p), fmt=inp.format, limit=inp.limit, max_record_bytes=inp.max_record_bytes,
                    retries=inp.retries, backoff_s=inp.backoff_s, timeout_s=inp.timeout_s)
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


def check_required_metadata(recipe: Recipe) -> None:
    """On crawl input (documents carry no scores of their own), every metadata key a stage reads must be declared
    by an earlier stage with a type the stage accepts, unless an escape-hatch stage came first. JSON lines and
    Parquet input may carry any key: the stage itself checks what the documents hold."""
    if recipe.input.reader_format() in ("jsonl", "parquet"):
        return
    declared: dict[str, str] = {}
    problems = []
    for i, entry in enumerate(recipe.stage_entries):
        for key, types in entry.params.required_metadata().items():
            where = f"stages[{i}]({entry.name})"
            if key not in declared:
                hint = (did_you_mean(key, sorted(declared))
                        or f" (earlier stages write: {', '.join(sorted(declared)) or 'nothing'})")
                problems.append(f"{where}: metadata {key!r} is written by no earlier stage{hint}")
            elif types and declared[key] not in types:
                problems.append(f"{where}: metadata {key!r} is {declared[key]}, this stage needs {' or '.join(types)}")
        if entry.params.writes_any_metadata:
            return
        declared.update(entry.params.metadata_fields())
    if problems:
        raise RecipeError("; ".join(problems))


COPY_FREE = True  # dedup barriers re-read and replay instead of writing a corpus copy where that is exact


def passes_through(step) -> bool:
    """The step's class declares ``passes_through = True``: it yields every document it receives, unchanged
    and in order (a dedup recorder), so a barrier's ``before`` made of such steps changes no document."""
    return bool(getattr(step, "passes_through", False))


def replays_exactly(step) -> bool:
    """The step's class declares ``replays_exactly = True``: its output is a deterministic function of its
    input stream and of files written before the cut (a dedup filter), so running it again gives the same."""
    return bool(getattr(step, "replays_exactly", False))


def replayable(built: list | Barrier) -> bool:
    """A list stage, or a barrier's ``after`` steps, can be re-run instead of copying the corpus after the
    next cut; a barrier also needs ``before`` steps that only record."""
    if isinstance(built, Barrier):
        return all(map(passes_through, built.before)) and all(map(replays_exactly, built.after))
    return bool(built) and all(map(replays_exactly, built))


@dataclass(frozen=True)
class StageBuild:
    """One stage as the compiler builds it. ``build()`` gives new step objects on every call: a replay
    needs its own, and it builds them without an exclusion writer (the original segment wrote those)."""

    label: str  # "03.exact_dedup": stats and logging folders use it
    spec: StageSpec
    params: StageParams
    ctx: BuildContext

    def build(self) -> list | Barrier:
        return self.spec.build(self.params, self.ctx)

    def replay_steps(self) -> list:
        built = self.spec.build(self.params, replace(self.ctx, exclusions_dir=None))
        return list(built.after if isinstance(built, Barrier) else built)


def stage_builds(recipe: Recipe, run_dir: Path) -> list[StageBuild]:
    """The recipe's stages with their build contexts (exclusion writers under ``<run_dir>/excluded``)."""
    excluded = run_dir / "excluded" if recipe.output.exclusions else None
    out = []
    for i, entry in enumerate(recipe.stage_entries):
        ctx = BuildContext(run_dir=run_dir, work_dir=run_dir / "work", tasks=recipe.executor.tasks, stage_index=i,
                           stage_name=entry.name, recipe_name=recipe.name, exclusions_dir=excluded,
                           earlier=tuple((e.name, e.params) for e in recipe.stage_entries[:i]))
        out.append(StageBuild(f"{i:02d}.{entry.name}", get_stage(entry.name), entry.params, ctx))
    return out


def compile_recipe(recipe: Recipe, run_dir: Path | None = None) -> list[Job]:
    """The recipe's jobs: its readers, stages, output summary and writer, cut at every barrier."""
    check_required_metadata(recipe)
    run_dir = Path(run_dir or recipe.resolved_run_dir())
    tail = [(SUMMARY, "output", OutputSummary(recipe.output.route_by)),
            (WRITER, "writer", output_writer(recipe.output.path or str(run_dir / "output"), recipe.output.format,
                                             recipe.output.route_by, declared_metadata(recipe)))]
    return compile_stages(stage_builds(recipe, run_dir), lambda: _reader_steps(recipe), tail,
                          work_dir=run_dir / "work",
                          logs=Path(recipe.logging_dir) if recipe.logging_dir else run_dir / "logs",
                          tasks=recipe.executor.tasks, workers=recipe.executor.workers)


def compile_stages(stages: list[StageBuild], readers: Callable[[], list], tail: list[tuple[str, str, object]], *,
                   work_dir: Path, logs: Path, tasks: int, workers: int | None) -> list[Job]:
    """Segments of per-document steps cut at every barrier, and the barriers' phases, as jobs.

    ``readers()`` gives new input steps on every call; ``tail`` (role, label, step) ends the last segment.
    After a barrier, the next segment needs the documents as they were at the cut. Normally the segment
    writes them to an intermediate copy. Where that stream can be regenerated exactly and cheaply (no stage
    since the last copy or the input changed documents, except dedup filters that replay from their own
    files), no copy is written: the next segment re-reads the input (or the last copy) and replays those
    filters, labelled internal so their counts are not taken twice. Positions are checked against the ids
    recorded at the cut (``PositionTracker``), so a replay that diverged would stop the run, not mislabel it.
    """
    jobs: list[Job] = []
    seg = 0
    pipeline: list = readers()
    labels: list[tuple[str, str]] = [(READER, "reader")] * len(pipeline)
    # the current segment's starting stream, regenerable as: the input (copy is None) or the last intermediate
    # copy, then the steps of `replay`, in order; valid while `clean` (nothing else changed documents since)
    copy: Path | None = None
    replay: list[StageBuild] = []
    clean = True

    def close_segment() -> None:
        jobs.append(Job(f"seg{seg:02d}", "segment", pipeline, labels, tasks, workers, logs / f"seg{seg:02d}"))

    for stage in stages:
        built = stage.build()
        if not isinstance(built, Barrier):
            pipeline.extend(built)
            labels.extend([(STAGE, stage.label)] * len(built))
            if clean and replayable(built):
                replay.append(stage)  # a deterministic filter (one-pass dedup): re-run it rather than copy
            else:
                clean = False
            continue
        pipeline.extend(built.before)
        labels.extend([(STAGE, stage.label)] * len(built.before))
        copy_free = COPY_FREE and clean and replayable(built)
        if copy_free:
            start = (readers() if copy is None else [intermediate_reader(copy)])
            start += [step for done in replay for step in done.replay_steps()]
        else:
            copy, replay = work_dir / f"seg{seg:02d}", []
            pipeline.append(intermediate_writer(copy))
            labels.append((INTERNAL, f"seg{seg:02d}.writer"))
            start = [intermediate_reader(copy)]
        close_segment()
        for ph in built.phases:
            jobs.append(Job(f"{stage.label}.{ph.name}", "phase", ph.pipeline, [(STAGE, stage.label)] * len(ph.pipeline),
                            ph.tasks, ph.workers, logs / f"{stage.label}.{ph.name}"))
        seg += 1
        replay.append(stage)  # its `after` re-runs from the files its phases wrote
        pipeline = start + list(built.after)
        labels = [(INTERNAL, f"seg{seg:02d}.{'replay' if copy_free else 'reader'}")] * len(start)
        labels += [(STAGE, stage.label)] * len(built.after)
        clean = replayable(built)

    for role, label, step in tail:
        pipeline.append(step)
        labels.append((role, label))
    close_segment()
    return jobs
