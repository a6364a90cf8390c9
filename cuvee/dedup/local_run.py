"""Run one dedup stage outside a recipe, the way the compiler does: segment (input + ``before`` +
intermediate writer), each phase as its own executor chained with ``depends``, then segment 2
(intermediate reader + ``after`` + writer). Used by the benchmarks, the CLI and the tests."""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep

from cuvee.pipeline.registry import Barrier, BuildContext, get_stage
from cuvee.pipeline.writers import intermediate_reader, intermediate_writer


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


def build(stage: str, params: dict, work_dir: Path, tasks: int) -> Barrier:
    spec = get_stage(stage)
    ctx = BuildContext(run_dir=work_dir, work_dir=work_dir / "work", tasks=tasks, stage_index=0, stage_name=stage)
    return spec.build(spec.params.model_validate(params), ctx)


def executors(barrier: Barrier, inputs: list, work_dir: Path, tasks: int, workers: int = 1) -> list:
    work_dir = Path(work_dir)
    logs = work_dir / "logs"
    inter = work_dir / "work" / "seg00"
    chain = [LocalPipelineExecutor(pipeline=[*inputs, *barrier.before, intermediate_writer(inter)], tasks=tasks,
                                   workers=workers, logging_dir=str(logs / "seg00"), skip_completed=True)]
    for ph in barrier.phases:
        chain.append(LocalPipelineExecutor(pipeline=ph.pipeline, tasks=ph.tasks, workers=min(workers, ph.tasks),
                                           logging_dir=str(logs / ph.name), depends=chain[-1], skip_completed=True))
    out = intermediate_writer(work_dir / "output")  # uncompressed JSONL, one file per rank
    chain.append(LocalPipelineExecutor(pipeline=[intermediate_reader(inter), *barrier.after, out], tasks=tasks,
                                       workers=workers, logging_dir=str(logs / "seg01"), depends=chain[-1],
                                       skip_completed=True))
    return chain


def read_output(work_dir: Path, tasks: int) -> list[list[Document]]:
    out = []
    for r in range(tasks):
        path = Path(work_dir) / "output" / f"{r:05d}.jsonl"
        docs = []
        if path.exists():
            with open(path, "rt", encoding="utf-8") as f:
                docs = [Document(text=(row := json.loads(line))["text"], id=row["id"], metadata=row.get("metadata", {}))
                        for line in f]
        out.append(docs)
    return out


def merged_counters(work_dir: Path) -> dict[str, dict[str, float]]:
    """{logging folder: {step name: {counter: total}}} from datatrove's merged stats files."""
    res = {}
    for stats in sorted((Path(work_dir) / "logs").glob("*/stats.json")):
        steps = {}
        for step in json.loads(stats.read_text()):
            steps[step["name"]] = {k: (v["total"] if isinstance(v, dict) else v) for k, v in step["stats"].items()}
        res[stats.parent.name] = steps
    return res


def run_stage(stage: str, params: dict, docs_by_rank: list[list[Document]], work_dir: Path, workers: int = 1):
    """Dedup ``docs_by_rank`` with one registered stage; returns (kept docs per rank, counters)."""
    tasks = len(docs_by_rank)
    barrier = build(stage, params, Path(work_dir), tasks)
    chain = executors(barrier, [ListReader(docs_by_rank)], Path(work_dir), tasks, workers)
    chain[-1].run()
    return read_output(work_dir, tasks), merged_counters(work_dir)
