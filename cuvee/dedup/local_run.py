"""Run one dedup stage outside a recipe through the recipe compiler (``compile_stages``): the same segments,
phases, copy-free replay and logging folders as ``cuvee run``, with given input steps and an uncompressed
JSONL output, one file per rank. Used by the benchmarks, ``cuvee dedup run`` and the tests."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from cuvee.pipeline.compiler import WRITER, StageBuild, compile_stages
from cuvee.pipeline.executors import build_chain
from cuvee.pipeline.recipe import LocalExecutorConfig
from cuvee.pipeline.registry import Barrier, BuildContext, get_stage
from cuvee.pipeline.writers import intermediate_writer


class ListReader(PipelineStep):
    """Yields ``docs_by_rank[rank]``: in-memory input for tests and benchmarks."""

    name = "📋 list reader"
    type = "📖 - READER"

    def __init__(self, docs_by_rank: list[list[Document]]):
        super().__init__()
        self.docs_by_rank = docs_by_rank

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        for doc in self.docs_by_rank[rank]:
            self.stat_update("total")
            self.stat_update("forwarded")
            yield Document(text=doc.text, id=doc.id, metadata=dict(doc.metadata))


@dataclass(frozen=True)
class LocalStage:
    """A validated dedup stage: how the compiler builds it, and its first build (its phases, for callers
    that time them one by one). Building it up front surfaces bad parameters before any work."""

    stage: StageBuild
    barrier: Barrier

    @property
    def phases(self) -> list:
        return self.barrier.phases


def build(stage: str, params: dict, work_dir: Path, tasks: int) -> LocalStage:
    spec = get_stage(stage)
    work_dir = Path(work_dir)
    ctx = BuildContext(run_dir=work_dir, work_dir=work_dir / "work", tasks=tasks, stage_index=0, stage_name=stage)
    sb = StageBuild(f"00.{stage}", spec, spec.params.model_validate(params), ctx)
    return LocalStage(sb, sb.build())


def executors(stage: LocalStage, inputs: list, work_dir: Path, tasks: int, workers: int = 1) -> list:
    """The compiled jobs as local executors chained with ``depends``: run the last to run them all.
    A replay re-reads ``inputs`` through its own copies of the steps."""
    work_dir = Path(work_dir)
    jobs = compile_stages([stage.stage], lambda: copy.deepcopy(list(inputs)),
                          [(WRITER, "writer", intermediate_writer(work_dir / "output"))],
                          work_dir=work_dir / "work", logs=work_dir / "logs", tasks=tasks, workers=workers)
    return build_chain(jobs, LocalExecutorConfig(tasks=tasks, workers=workers))


def read_output(work_dir: Path, tasks: int) -> list[list[Document]]:
    out = []
    for r in range(tasks):
        path = Path(work_dir) / "output" / f"{r:05d}.jsonl"
        docs = []
        if path.exists():
            with open(path, encoding="utf-8") as f:
                docs = [Document(text=(row := json.loads(line))["text"], id=row["id"], metadata=row.get("metadata", {}))
                        for line in f]
        out.append(docs)
    return out


_STAGE_PREFIX = re.compile(r"^\d{2}\.[^.]+\.")  # a phase's folder is "<stage label>.<phase>"; one stage here


def merged_counters(work_dir: Path) -> dict[str, dict[str, float]]:
    """{job (seg00, a phase name, seg01): {step name: {counter: total}}} from datatrove's merged stats files."""
    res = {}
    for stats in sorted((Path(work_dir) / "logs").glob("*/stats.json")):
        steps = {}
        for step in json.loads(stats.read_text()):
            steps[step["name"]] = {k: (v["total"] if isinstance(v, dict) else v) for k, v in step["stats"].items()}
        res[_STAGE_PREFIX.sub("", stats.parent.name)] = steps
    return res


def run_stage(stage: str, params: dict, docs_by_rank: list[list[Document]], work_dir: Path, workers: int = 1):
    """Dedup ``docs_by_rank`` with one registered stage; returns (kept docs per rank, counters)."""
    tasks = len(docs_by_rank)
    built = build(stage, params, Path(work_dir), tasks)
    chain = executors(built, [ListReader(docs_by_rank)], Path(work_dir), tasks, workers)
    chain[-1].run()
    return read_output(work_dir, tasks), merged_counters(work_dir)
