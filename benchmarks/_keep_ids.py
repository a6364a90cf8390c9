"""A benchmark-only stage, ``bench_keep_ids``: keeps the documents a file lists and gives them the text it lists
(a stage's output, written by ``write_kept``).

bench_dolma's baseline for a stage: read the stage's *input* and write exactly the stage's *output*, so the
stage's marginal cost excludes reading and writing even when it drops most documents or shortens them (a
baseline that read the stage's smaller output would charge the stage for reading every dropped document; one
that wrote the input's texts would credit it with the writing its shorter texts save). Registered on import.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from datatrove.pipeline.base import PipelineStep

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage


class KeepIdsParams(StageParams):
    ids_file: str


def write_kept(path: Path, rows) -> None:
    """The stage's output as ``path`` (JSON: ids and text lengths in characters), ``path.bin`` (UTF-8 texts,
    concatenated) and ``path.npy`` (byte offsets): loading it costs milliseconds, where parsing the texts as JSON
    cost as much as reading the corpus again and swamped the stages' figures."""
    ids, lengths, texts = [], [], []
    for row in rows:
        ids.append(row["id"])
        lengths.append(len(row["text"]))
        texts.append(row["text"].encode("utf-8", "surrogatepass"))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    path.write_text(json.dumps({"ids": ids, "lengths": lengths}))
    Path(f"{path}.bin").write_bytes(b"".join(texts))
    np.save(f"{path}.npy", offsets)


class KeepIds(PipelineStep):
    """Keeps the listed documents with the listed texts, as cheaply as a step can: a dict lookup per document,
    a decode only where the length differs (the stages compared only remove text, so an equal length means an
    unchanged text), counters once at the end."""

    name = "bench keep ids"
    type = "bench"

    def __init__(self, ids_file: str):
        super().__init__()
        self.ids_file = ids_file  # loaded in run(): datatrove deep-copies steps and writes their attributes to
        # executor.json (a 140 MB blob as its repr), which cost 17-33 us per kept document when loaded here

    def run(self, data, rank: int = 0, world_size: int = 1):
        kept_rows = json.loads(Path(self.ids_file).read_text())
        index = {doc_id: (i, n) for i, (doc_id, n) in enumerate(zip(kept_rows["ids"], kept_rows["lengths"]))}
        blob = Path(f"{self.ids_file}.bin").read_bytes()
        offsets = np.load(f"{self.ids_file}.npy", allow_pickle=False).tolist()
        total = kept = 0
        for doc in data:
            total += 1
            hit = index.get(doc.id)
            if hit is None:
                continue
            i, n = hit
            if len(doc.text) != n:
                doc.text = blob[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogatepass")
            kept += 1
            yield doc
        self.stat_update("total", value=total)
        self.stat_update("forwarded", value=kept)
        if total > kept:
            self.stat_update("dropped", value=total - kept)
            self.stat_update("dropped_not_kept_by_the_stage", value=total - kept)


@register_stage("bench_keep_ids", KeepIdsParams)
def build_keep_ids(p: KeepIdsParams, ctx: BuildContext):
    """Benchmark baseline: keep the listed ids."""
    return [KeepIds(p.ids_file)]
