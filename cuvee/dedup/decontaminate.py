"""``decontaminate``: find benchmark items in the corpus by shared word n-grams, then drop the document, remove
the paragraphs holding them, or only annotate.

Why a barrier: the n-gram index of every eval item is built once per run, by one phase task
(:class:`BuildEvalIndex`), into ``work/NN_decontaminate/index`` as flat arrays; every task of the next segment
memory-maps that one copy (:class:`Decontaminate`). Matching is :mod:`cuvee.dedup.ngram_match` (13-grams of
normalised words by default), so an item verbatim inside a long page, split over lines, or with case,
punctuation and whitespace changed is found; items shorter than n words are counted as too short and never
match. Counted per benchmark: ``contaminated_<b>`` documents touched and ``matches_<b>`` (document, item)
pairs; the items found are written per task (``found/<rank>.json``) and summed into ``stats.json``
(``contamination``) by :func:`contamination_report`.

By meaning (``by_meaning``): an item is also found in a document whose vector (the ``embed`` stage's, from the run's
embedding store: the document's first ``max_tokens`` word pieces) is within a cosine ``threshold`` of the item's,
embedded by the phase with the same model and rule. It catches paraphrased and edited items that share no 13-gram;
it cannot see an item deep inside a long page. Counted apart (``contaminated_by_meaning_<b>``, ``found_meaning/``),
reported beside the n-gram figures; ``drop`` drops such documents, ``remove`` and ``annotate`` annotate them (there
are no spans to cut).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

import numpy as np
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import ConfigDict, Field, model_validator

from cuvee.dedup.embed_store import EmbedStore, RowWalker, gather, id_hash, store_dir, writer_of
from cuvee.dedup.files import AtomicWriter, load_array, rank_file, save_array
from cuvee.dedup.ngram_match import (
    DEFAULT_N,
    NgramIndex,
    char_spans,
    read_header,
    word_ids,
    word_spans,
)
from cuvee.dedup.steps import lean_filter_run
from cuvee.evaltasks import EvalTaskError
from cuvee.evaltasks import items as eval_items
from cuvee.kernel.atomic import write_json
from cuvee.kernel.config import StrictModel
from cuvee.kernel.stamps import first_change, restamp, stamps
from cuvee.pipeline.recipe import RecipeError
from cuvee.pipeline.registry import (
    Barrier,
    BuildContext,
    Phase,
    StageParams,
    register_stage,
)

REASON = "contaminated"
MEANING_REASON = "contaminated_by_meaning"  # found by meaning only (no shared n-gram)


def counter_name(name: str) -> str:
    """A benchmark name as it appears in counter keys: lower snake_case."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "eval"


class EvalSetParams(StrictModel):
    """One eval set: a local file (``path``) or an lm-evaluation-harness task (``task``) read from local copies."""

    model_config = ConfigDict(frozen=True)

    name: str | None = Field(None, description="benchmark name in counters and reports (default: task name or "
                                               "file stem)")
    path: str | None = Field(None, description="local JSONL/JSON/Parquet/CSV (optionally .gz), or .txt: one item a line")
    task: str | None = Field(None, description="lm-eval task name (shipped in cuvee/assets/eval_tasks or under "
                                               "include_path) or task YAML path; its data files must be local")
    fields: list[str] | None = Field(None, description="fields joined into an item's text, e.g. [question, choices, "
                                                       "answer]; a.b for nested, choices[label] for the gold choice "
                                                       "(default for tasks: the prompt's fields; else every string)")
    id_field: str | None = Field(None, description="field holding the item id (default: 'id' if present, else the "
                                                   "row number)")
    split: str | None = Field(None, description="task split (default: its test_split, else validation_split)")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.task is None):
            raise ValueError("give exactly one of path (a local file) or task (an lm-eval task name)")
        if self.path is not None and self.split is not None:
            raise ValueError("split applies to a task, not to a path")
        return self


class MeaningParams(StrictModel):
    """Decontamination by meaning: the embed stage's document vectors against the eval items' vectors."""

    model_config = ConfigDict(frozen=True)

    threshold: float = Field(0.85, gt=0, lt=1, description="cosine between a document's vector and an item's at or "
                                                           "above which the item is found")
    store: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the embed stage's store")


class DecontaminateParams(StageParams):
    eval_sets: list[EvalSetParams] = Field(min_length=1, description="the benchmarks to look for")
    action: Literal["drop", "remove", "annotate"] = Field(
        "drop", description="drop the document, remove the paragraphs (lines) holding a match, or annotate only")
    n_grams: int = Field(DEFAULT_N, ge=3, le=100, description="words per n-gram (13: GPT-3's contamination test)")
    min_ngrams: int = Field(1, ge=1, description="an item is found when this many of its distinct n-grams (or all "
                                                 "of them, if it has fewer) occur in the document")
    include_path: list[str] = Field(default_factory=list, description="folders of your own lm-eval task YAMLs")
    metadata_key: str = Field("contamination", description="metadata key listing the items found in a document "
                                                           "(JSON: benchmark, item id, character spans)")
    by_meaning: MeaningParams | None = Field(None, description="also find items by the cosine of the embed stage's "
                                                               "document vector and the item's (an embed stage first)")

    @model_validator(mode="after")
    def _unique_names(self):
        names = [counter_name(e.name or Path(e.path or e.task or "").name.split(".")[0]) for e in self.eval_sets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"eval sets share the name(s) {dup}: give each a distinct name")
        return self

    def metadata_fields(self) -> dict[str, str]:
        return {self.metadata_key: "string"}


class BuildEvalIndex(PipelineStep):
    """Phase (one task): read every eval set, build the n-gram index, write it under ``folder``."""

    type = "🦠 - DECONT"
    name = "🦠 eval n-gram index"

    def __init__(self, folder: str | Path, sources: list[eval_items.Source], n_grams: int,
                 encoder: tuple[str, int] | None = None):
        super().__init__()
        self.folder, self.sources, self.n = Path(folder), sources, n_grams
        self.encoder = encoder  # (model, max_tokens) of the embed stage, for decontamination by meaning

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        if world_size != 1:
            raise RuntimeError("the eval n-gram index is built by one task")
        seqs, bench, ids, benchmarks, texts = [], [], [], [], []
        with self.track_time():
            for b, src in enumerate(self.sources):
                key = counter_name(src.name)
                unreadable = 0
                for item_id, text in eval_items.items(src):
                    if text is None:
                        unreadable += 1
                        continue
                    seqs.append(word_ids(text))
                    texts.append(text)
                    bench.append(b)
                    ids.append(item_id)
                n_items = bench.count(b)
                too_short = sum(1 for s, bb in zip(seqs, bench) if bb == b and len(s) < self.n)
                benchmarks.append({"name": src.name, "key": key, "items": n_items, "too_short": too_short,
                                   "unreadable": unreadable, "stamps": stamps(src.inputs)})
                self.stat_update(f"items_{key}", value=n_items)
                self.stat_update(f"too_short_{key}", value=too_short)
                if unreadable:
                    self.stat_update(f"unreadable_{key}", value=unreadable)
            index = NgramIndex.build(seqs, self.n)
            out = self.folder / "index"
            save_array(out / "item_bench.u16", np.array(bench, dtype=np.uint16))
            write_json(out / "item_ids.json", ids, indent=None)
            index.save(out, extra={"benchmarks": benchmarks})
            if self.encoder:
                save_array(out / "item_vectors.f32", embed_items(texts, *self.encoder))
            self.stat_update("index_builds")
            self.stat_update("indexed_ngrams", value=len(index.hashes))
        return
        yield  # a generator, as datatrove expects


class Decontaminate(BaseFilter):
    """After the index phase: look up every document's n-grams; drop, cut or annotate the ones holding items."""

    type = "🦠 - DECONT"
    name = "🦠 decontaminate"
    replays_exactly = True  # a function of the document and the index written before the cut

    def __init__(self, folder: str | Path, action: str, min_ngrams: int, metadata_key: str, exclusion_writer=None,
                 meaning: tuple[Path, float] | None = None):
        super().__init__(exclusion_writer=exclusion_writer)
        self.folder, self.action, self.min_ngrams, self.key = Path(folder), action, min_ngrams, metadata_key
        self.meaning = meaning  # (embedding store, cosine threshold)

    def run(self, data, rank: int = 0, world_size: int = 1):
        folder = self.folder / "index"
        header = read_header(folder)
        for b in header["benchmarks"]:  # every file of the eval set: items, task YAMLs, their code
            if changed := first_change(b.get("stamps") or {}, restamp(b.get("stamps") or {})):
                raise EvalTaskError(f"decontaminate: eval set {b['name']}: {changed[0]} changed since this run's "
                                    f"index was built ({changed[1]}); rerun with --fresh")
        index = NgramIndex.load(folder, self.min_ngrams)
        bench = load_array(folder / "item_bench.u16", np.uint16, mmap=True)
        names = [b["key"] for b in header["benchmarks"]]
        found: set[int] = set()
        state = {"index": index, "bench": bench, "names": names, "found": found, "ids": None, "near": set()}
        if self.meaning:
            store = EmbedStore(self.meaning[0])
            items = load_array(folder / "item_vectors.f32", np.float32).reshape(len(bench), -1)
            state |= {"walker": RowWalker(store.hashes(rank), "decontaminate"), "vectors": store.vectors(rank),
                      "items": items}
        self._state = state
        ok = False
        try:
            if self.exclusion_writer:
                yield from super().run(data, rank, world_size)
            else:
                yield from lean_filter_run(self, data, lambda batch: [self.filter(d) for d in batch], batch_size=256)
            ok = True
        finally:
            if ok:
                with AtomicWriter(rank_file(self.folder / "found", rank, "u32")) as w:
                    w.write(np.array(sorted(found), dtype=np.uint32))
                if self.meaning:
                    save_array(rank_file(self.folder / "found_meaning", rank, "u32"),
                               np.array(sorted(state["near"]), dtype=np.uint32))

    def _item_ids(self) -> list[str]:
        if self._state["ids"] is None:
            self._state["ids"] = json.loads((self.folder / "index" / "item_ids.json").read_text())
        return self._state["ids"]

    def _near(self, doc) -> list[tuple[int, float]]:
        """(item, cosine) of every eval item within the threshold of the document's vector."""
        st = self._state
        row = st["walker"].take(np.array([id_hash(doc.id)], dtype=np.uint64))
        sims = st["items"] @ gather(st["vectors"], row)[0]
        return [(int(i), float(sims[i])) for i in np.flatnonzero(sims >= self.meaning[1])]

    def filter(self, doc) -> bool | tuple[bool, str]:
        st = self._state
        ids, starts, ends = word_spans(doc.text)
        matches = st["index"].find(ids)
        near = self._near(doc) if self.meaning else []
        if not matches and not near:
            return True
        names, item_ids = st["names"], self._item_ids()
        report, touched, close = [], {}, {}
        for item, cosine in near:
            b = names[int(st["bench"][item])]
            close[b] = close.get(b, 0) + 1
            st["near"].add(item)
            report.append({"benchmark": b, "item": item_ids[item], "cosine": round(cosine, 4)})
        for b, k in close.items():
            self.stat_update(f"contaminated_by_meaning_{b}")
            self.stat_update(f"matches_by_meaning_{b}", value=k)
        for m in matches:
            b = names[int(st["bench"][m.item])]
            touched[b] = touched.get(b, 0) + 1
            st["found"].add(m.item)
            report.append({"benchmark": b, "item": item_ids[m.item], "ngrams": m.grams,
                           "spans": [list(s) for s in char_spans(m, starts, ends)]})
        for b, k in touched.items():
            self.stat_update(f"contaminated_{b}")
            self.stat_update(f"matches_{b}", value=k)
        doc.metadata[self.key] = json.dumps(report)
        if self.action == "drop":
            return False, REASON if matches else MEANING_REASON
        if self.action == "remove" and matches:  # a match by meaning alone has no span to cut: annotated
            kept, removed = remove_lines(doc.text, [s for r in report for s in r.get("spans", ())])
            self.stat_update("paragraphs_removed", value=removed)
            self.stat_update("chars_removed", value=len(doc.text) - len(kept))
            if not word_ids(kept).size:
                return False, REASON  # nothing but the eval items: nothing left to keep
            doc.text = kept
        self.stat_update("documents_" + ("cut" if self.action == "remove" and matches else "annotated"))
        return True


def remove_lines(text: str, spans: list) -> tuple[str, int]:
    """``text`` without every line (paragraph) that a character span touches, and how many were removed."""
    lines = text.split("\n")
    bounds = np.cumsum([0] + [len(x) + 1 for x in lines])  # line i is [bounds[i], bounds[i+1] - 1)
    drop = np.zeros(len(lines), dtype=bool)
    for a, b in spans:
        first = int(np.searchsorted(bounds, a, side="right")) - 1
        last = int(np.searchsorted(bounds, b - 1, side="right")) - 1
        drop[first:last + 1] = True
    removed = int(drop.sum())
    touched = drop.copy()
    for i in range(1, len(lines) - 1):  # a removed paragraph between two blank lines leaves one blank line, not two
        if touched[i] and not touched[i + 1] and not lines[i + 1].strip():
            j = i
            while j > 0 and touched[j]:
                j -= 1
            if not touched[j] and not lines[j].strip():
                drop[i + 1] = True
    return "\n".join(x for x, d in zip(lines, drop) if not d), removed


def embed_items(texts: list[str], model: str, max_tokens: int) -> np.ndarray:
    """The items' vectors, made as the embed stage makes a document's (one text per pass on CPU)."""
    from cuvee.classifiers.embedder import Encoder, pick_device

    device = pick_device("auto")
    encoder = Encoder(model, max_length=max_tokens, batch_size=64 if device.startswith("cuda") else 1, device=device)
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    return gather(encoder.embed(texts).astype(np.float16), np.arange(len(texts)))  # rounded as documents are


def resolve_sources(p: DecontaminateParams) -> list[eval_items.Source]:
    return [eval_items.resolve(e.name, e.path, e.task, e.fields, e.id_field, e.split, tuple(p.include_path))
            for e in p.eval_sets]


def contamination_report(params: DecontaminateParams, stage_dir: Path, counters: dict) -> dict:
    """The stage's ``stats.json`` entry: per benchmark items checked, too short, found, documents touched."""
    folder = Path(stage_dir) / "index"
    try:
        header = read_header(folder)
        bench = load_array(folder / "item_bench.u16", np.uint16)
    except (OSError, ValueError):
        return {"action": params.action, "n_grams": params.n_grams, "benchmarks": {}, "complete": False}
    def per_bench(sub: str) -> np.ndarray:
        files = sorted((Path(stage_dir) / sub).glob("*.u32"))
        found = np.unique(np.concatenate([load_array(f, np.uint32) for f in files])) if files else []
        return np.bincount(bench[found], minlength=len(header["benchmarks"])) if len(found) else \
            np.zeros(len(header["benchmarks"]), dtype=np.int64)

    found, near = per_bench("found"), per_bench("found_meaning")
    out = {}
    for i, b in enumerate(header["benchmarks"]):
        key = b["key"]
        out[b["name"]] = {"items_checked": b["items"], "too_short": b["too_short"], "unreadable": b["unreadable"],
                          "items_found": int(found[i]),
                          "documents_touched": int(counters.get(f"contaminated_{key}", 0)),
                          "matches": int(counters.get(f"matches_{key}", 0))}
        if params.by_meaning:
            out[b["name"]] |= {"items_found_by_meaning": int(near[i]),
                               "documents_touched_by_meaning": int(counters.get(f"contaminated_by_meaning_{key}", 0))}
    meaning = params.by_meaning.model_dump() if params.by_meaning else None
    return {"action": params.action, "n_grams": params.n_grams, "min_ngrams": params.min_ngrams,
            "by_meaning": meaning, "benchmarks": out, "complete": True}


@register_stage("decontaminate", DecontaminateParams, report=("contamination", contamination_report))
def build_decontaminate(p: DecontaminateParams, ctx: BuildContext):
    """Benchmark decontamination: eval items found by shared word 13-grams; drop, remove paragraphs or annotate."""
    try:
        sources = resolve_sources(p)
    except EvalTaskError as e:
        raise RecipeError(f"stage {ctx.stage_name!r}: {e}") from None
    folder, encoder, meaning = ctx.stage_dir(), None, None
    if p.by_meaning:
        store = p.by_meaning.store
        embed = writer_of(ctx, store, "by_meaning")
        encoder, meaning = (embed.model, embed.max_tokens), (store_dir(ctx.work_dir, store), p.by_meaning.threshold)
    return Barrier(
        before=[],
        phases=[Phase("eval_index", [BuildEvalIndex(folder, sources, p.n_grams, encoder)], tasks=1)],
        after=[Decontaminate(folder, p.action, p.min_ngrams, p.metadata_key, ctx.exclusion_writer(), meaning)],
    )
