"""``embed``: one embedding per document, written once per run to the run's embedding store
(:mod:`cuvee.dedup.embed_store`: float16 arrays per task, memory-mapped, keyed by document id) for every consumer
(``semantic_dedup`` now). Documents pass through unchanged: nothing is added to their records.

The encoder is the one the topic and transformer scorers use (:class:`cuvee.classifiers.embedder.Encoder`): the
shipped all-MiniLM-L6-v2 by default (no download), or any local sentence-transformers folder that mean-pools.
Text rule: the first ``max_tokens`` word pieces of the document (the encoder first cuts the text to
``12 x max_tokens`` characters, which holds more than ``max_tokens`` word pieces of ordinary prose); later text
is not seen. Vectors are mean-pooled over those word pieces and L2-normalised.

On CPU each document is its own batch (``batch_size: auto``): measured as fast as batches of 8 or 32 on
MiniLM with texts of 150-300 words (padding costs what batching saves), and a vector then depends on its
text alone, bitwise, so decisions made from the vectors are the same with any task count. On CUDA documents
go 64 at a time with bf16 autocast (vectors then differ from the CPU's in the last bits).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.dedup.embed_store import StoreWriter, store_dir
from cuvee.pipeline.recipe import RecipeError
from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

CUDA_BATCH = 64


class EmbedParams(StageParams):
    model: str = Field("all-MiniLM-L6-v2", description="all-MiniLM-L6-v2 (shipped) or a local sentence-transformers "
                                                       "folder that mean-pools")
    max_tokens: int = Field(256, ge=8, le=512, description="word pieces embedded from the start of each document "
                                                           "(MiniLM was trained on 256)")
    batch_size: int | Literal["auto"] = Field("auto", description="documents per forward pass; auto: 1 on CPU "
                                                                  "(vectors independent of their neighbours), 64 on CUDA")
    device: str = Field("auto", description="auto (CUDA when present), cpu, cuda, cuda:N")
    threads: int | None = Field(None, ge=1, description="torch CPU threads per task (default: torch's)")
    store: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,64}$",
                       description="store name: work/embeddings/<store>; consumers name the same store")


def check_model(model: str) -> str:
    """The model's local folder, refused in one line before any work when it is not one cuvee can mean-pool."""
    from cuvee.classifiers.embedder import resolve_encoder

    try:
        path = resolve_encoder(model)
    except FileNotFoundError as e:
        raise RecipeError(f"embed: {e}") from None
    if not (Path(path) / "config.json").is_file():
        raise RecipeError(f"embed: model {model!r} is not a local model folder (no config.json there); give "
                          "all-MiniLM-L6-v2 or the path of a sentence-transformers folder")
    pooling = Path(path) / "1_Pooling" / "config.json"
    if pooling.is_file():
        modes = json.loads(pooling.read_text(encoding="utf-8"))
        if not modes.get("pooling_mode_mean_tokens", False):
            used = [k.removeprefix("pooling_mode_") for k, v in modes.items() if k.startswith("pooling_mode_") and v]
            raise RecipeError(f"embed: model {model!r} pools by {', '.join(used) or 'an unknown mode'}; cuvee's "
                              "encoder mean-pools, which would give this model's vectors wrongly")
    return path


class EmbedStep(PipelineStep):
    """Pass-through: embeds each batch and appends it to this task's rows of the store."""

    name = "🧭 embed"
    type = "🤖 - CLASSIFIER"

    def __init__(self, folder: Path, p: EmbedParams):
        super().__init__()
        self.folder = Path(folder)
        self.p = p

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cuvee.classifiers.embedder import Encoder, pick_device

        device = pick_device(self.p.device)
        bs = self.p.batch_size if self.p.batch_size != "auto" else (CUDA_BATCH if device.startswith("cuda") else 1)
        encoder = Encoder(self.p.model, max_length=self.p.max_tokens, batch_size=bs, device=device,
                          threads=self.p.threads)
        # the stage's own cost for the card: wall and CPU seconds loading the model, then in the encoder
        t, c = time.perf_counter(), time.process_time()
        writer = StoreWriter(self.folder, rank, encoder.dim)
        load = (time.perf_counter() - t, time.process_time() - c)
        wall, cpu, chunk = 0.0, 0.0, max(bs, 64)
        ok = False
        try:
            batch: list = []
            for doc in data or ():
                batch.append(doc)
                if len(batch) >= chunk:
                    wall, cpu = self._embed(encoder, writer, batch, wall, cpu)
                    yield from batch
                    batch = []
            if batch:
                wall, cpu = self._embed(encoder, writer, batch, wall, cpu)
                yield from batch
            ok = True
        finally:
            writer.close(ok, {"model": self.p.model, "max_tokens": self.p.max_tokens, "device": device,
                              "batch_size": bs, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                              "load_wall_s": round(load[0], 3), "load_cpu_s": round(load[1], 3),
                              "rule": f"first {self.p.max_tokens} word pieces, mean-pooled, L2-normalised"})

    def _embed(self, encoder, writer: StoreWriter, batch: list, wall: float, cpu: float) -> tuple[float, float]:
        self.stat_update("total", value=len(batch))
        t, c = time.perf_counter(), time.process_time()
        with self.track_time("batch"):
            vectors = encoder.embed([d.text for d in batch])
        writer.write(batch, vectors)
        self.stat_update("embedded", value=len(batch))
        self.stat_update("forwarded", value=len(batch))
        return wall + time.perf_counter() - t, cpu + time.process_time() - c


def embed_report(p: EmbedParams, stage_dir: Path, counters: dict) -> dict:
    """stats.json ``embeddings``: the model, where the vectors are, and what they cost, summed over tasks
    (``wall_s``/``cpu_s``: in the encoder, per document; ``load_wall_s``: loading the model, once per task)."""
    folder = store_dir(Path(stage_dir).parent, p.store)
    ranks = sorted(folder.glob("[0-9]" * 5 + ".json"))
    desc = [json.loads(f.read_text(encoding="utf-8")) for f in ranks]
    rows = sum(d.get("rows", 0) for d in desc)
    wall = sum(d.get("wall_s", 0.0) for d in desc)
    cpu = sum(d.get("cpu_s", 0.0) for d in desc)
    load = sum(d.get("load_wall_s", 0.0) for d in desc)
    return {"model": p.model, "store": str(folder), "dim": desc[0]["dim"] if desc else None,
            "max_tokens": p.max_tokens, "devices": sorted({d.get("device") for d in desc}), "tasks_done": len(desc),
            "documents": rows, "load_wall_s": round(load, 3), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "cpu_ms_per_doc": round(1000 * cpu / rows, 3) if rows else None,
            "docs_per_s": round(rows / wall, 2) if wall else None}


@register_stage("embed", EmbedParams, report=("embeddings", embed_report))
def build_embed(p: EmbedParams, ctx: BuildContext):
    """One sentence embedding per document (all-MiniLM-L6-v2 by default) into the run's embedding store."""
    check_model(p.model)
    twins = [i for i, (name, q) in enumerate(ctx.earlier) if name == "embed" and q.store == p.store]
    if twins:
        raise RecipeError(f"stage {ctx.stage_name!r}: stages[{twins[0]}] already writes embedding store "
                          f"{p.store!r}; give this one another store: name")
    return [EmbedStep(store_dir(ctx.work_dir, p.store), p)]

