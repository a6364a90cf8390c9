"""The compiler builds finished steps and cuts barriers by what the steps declare, not by their classes.

Compilation only: nothing here runs a job.
"""

import gzip
import json
from pathlib import Path

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter

from cuvee.pipeline.compiler import (
    INTERNAL,
    READER,
    STAGE,
    WRITER,
    StageBuild,
    compile_recipe,
    compile_stages,
)
from cuvee.pipeline.recipe import parse_recipe
from cuvee.pipeline.registry import (
    Barrier,
    BuildContext,
    Phase,
    StageParams,
    StageSpec,
    all_stages,
)

# parameters for the registered stages that have required ones and build without a model
REQUIRED = {"datatrove": {"step": "datatrove.pipeline.filters.SamplerFilter", "kwargs": {"rate": 0.5}},
            "sample": {"rate": 0.5}, "topic_sampler": {"rates": {"news": 0.5}}, "language": {"languages": ["en"]},
            "decontaminate": {"eval_sets": [{"task": "cuvee_wcxb_cloze"}]},
            "quality_ensemble": {"members": ["quality_score"]}}
NEEDS_A_MODEL = {"perplexity", "transformer_quality", "fasttext_quality"}


def _steps(built) -> list:
    return [*built.before, *built.after] if isinstance(built, Barrier) else list(built)


def _filters_of_every_stage(exclusions_dir):
    out = {}
    for name, spec in all_stages().items():
        if name in NEEDS_A_MODEL:
            continue
        earlier = (("embed", all_stages()["embed"].params()),) if name in ("semantic_dedup", "cluster") else ()  # their vectors
        ctx = BuildContext(Path("/nonexistent/run"), Path("/nonexistent/run/work"), 1, 3, name,
                           exclusions_dir=exclusions_dir, earlier=earlier)
        built = spec.build(spec.params.model_validate(REQUIRED.get(name, {})), ctx)
        out[name] = [s for s in _steps(built) if isinstance(s, BaseFilter)]
    return out


def test_every_filter_gets_its_exclusion_writer_when_built(tmp_path):
    """With output.exclusions, every filter of every stage is constructed with a writer for its stage's
    folder (nobody sets it afterwards); without it, none has one."""
    with_writers = _filters_of_every_stage(tmp_path / "excluded")
    assert sum(map(len, with_writers.values())) >= 15
    for name, filters in with_writers.items():
        for f in filters:
            assert f.exclusion_writer is not None, f"{name}: {type(f).__name__} has no exclusion writer"
            assert f.exclusion_writer.output_folder.path.endswith(f"excluded/03.{name}")
    for name, filters in _filters_of_every_stage(None).items():
        assert all(f.exclusion_writer is None for f in filters), name


class Recorder(PipelineStep):
    """Not a dedup class: it declares that documents pass through unchanged."""

    name = "recorder"
    passes_through = True

    def run(self, data, rank=0, world_size=1):
        yield from data


class Decider(BaseFilter):
    """Not a dedup class: it declares a deterministic decision."""

    name = "decider"
    replays_exactly = True

    def filter(self, doc):
        return True


class Rewriter(Decider):
    replays_exactly = False


class _P(StageParams):
    pass


def _barrier_stage(i: int, after_cls, run_dir: Path, exclusions: bool = False) -> StageBuild:
    def build(p, ctx):
        return Barrier(before=[Recorder()], phases=[Phase("count", [Recorder()])],
                       after=[after_cls(exclusion_writer=ctx.exclusion_writer())])

    ctx = BuildContext(run_dir, run_dir / "work", 2, i, f"b{i}", exclusions_dir=run_dir / "x" if exclusions else None)
    return StageBuild(f"{i:02d}.b{i}", StageSpec(f"b{i}", _P, build, ""), _P(), ctx)


class Reader(PipelineStep):
    name = "reader"

    def run(self, data=None, rank=0, world_size=1):
        yield from ()


def _compile(tmp_path, stages):
    return compile_stages(stages, lambda: [Reader()], [(WRITER, "writer", Reader())], work_dir=tmp_path / "work",
                          logs=tmp_path / "logs", tasks=2, workers=1)


def test_a_barrier_that_declares_replay_needs_no_copy(tmp_path):
    """Any barrier whose steps declare passes_through / replays_exactly is cut without a corpus copy: the next
    segment re-reads the input and replays the declared steps (internal), fresh objects without exclusion
    writer. The second replay is the explicit list: input, first barrier's after, second's after."""
    jobs = _compile(tmp_path, [_barrier_stage(0, Decider, tmp_path, exclusions=True),
                               _barrier_stage(1, Decider, tmp_path, exclusions=True)])
    assert [j.name for j in jobs] == ["seg00", "00.b0.count", "seg01", "01.b1.count", "seg02"]
    segs = [j for j in jobs if j.kind == "segment"]
    assert not any("intermediate" in type(s).__name__.lower() for j in segs for s in j.pipeline)
    seg2 = segs[2]
    assert [type(s).__name__ for s in seg2.pipeline] == ["Reader", "Decider", "Decider", "Reader"]
    assert seg2.labels == [(INTERNAL, "seg02.replay")] * 2 + [(STAGE, "01.b1"), (WRITER, "writer")]
    replayed, kept = seg2.pipeline[1], seg2.pipeline[2]
    original = segs[1].pipeline[1]
    assert segs[1].labels[1] == (STAGE, "00.b0") and original.exclusion_writer is not None
    assert replayed is not original and replayed.exclusion_writer is None
    assert kept.exclusion_writer is not None
    assert segs[0].labels[0] == (READER, "reader")


def test_a_barrier_that_does_not_declare_replay_is_copied(tmp_path):
    jobs = _compile(tmp_path, [_barrier_stage(0, Rewriter, tmp_path), _barrier_stage(1, Decider, tmp_path)])
    segs = [j for j in jobs if j.kind == "segment"]
    assert type(segs[0].pipeline[-1]).__name__ == "IntermediateWriter"
    assert segs[0].labels[-1] == (INTERNAL, "seg00.writer")
    # after a copy, the next barrier replays from that copy (its after does not replay, so it copies again)
    assert type(segs[1].pipeline[-1]).__name__ == "IntermediateWriter"
    assert [lab for lab in segs[2].labels if lab[0] == INTERNAL] == [(INTERNAL, "seg02.reader")]


def test_recipe_dedup_barriers_replay_through_their_declarations(tmp_path):
    """The real dedup stages: url_dedup then exact_dedup then line_dedup, no copy written at any cut, and the
    last segment replays the reader and both earlier dedup filters."""
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "hello world", "id": "a"}) + "\n")
    recipe = parse_recipe({"name": "t", "run_dir": str(tmp_path / "run"),
                           "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
                           "stages": [{"stage": "url_dedup"}, {"stage": "exact_dedup"}, {"stage": "line_dedup"}],
                           "executor": {"kind": "local", "tasks": 2, "workers": 1}})
    segs = [j for j in compile_recipe(recipe) if j.kind == "segment"]
    assert len(segs) == 4
    assert not any(lab[1].endswith(".writer") for j in segs for lab in j.labels)
    last = [type(s).__name__ for s, (role, _) in zip(segs[3].pipeline, segs[3].labels) if role == INTERNAL]
    assert last[1:] == ["DropListed", "DropListed"]
