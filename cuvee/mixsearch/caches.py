"""Every source and target tokenized once into the search folder (``cache/<name>.bin/.idx`` + ``.json``),
and the targets decontaminated against every source, before any proxy trains.

The mixer's own functions do the work (``resolve_files``, ``tokenize_source``: same selection, counters and
EOS as ``cuvee mix``, and each document's key in ``cache/<name>.documents``/``.ids``, cuvee.mixer.docindex), so a
proxy sees the tokens the picked mix will hold; a proxy's view knows each piece's source by construction (one cache
per source, cuvee.train.piece_blend.BlendView). A cache counts as done only once
its ``.json`` is written (last); the folder is locked and bound to its plan, so a half-written cache of a
killed search is simply written again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from cuvee.kernel.atomic import write_text as atomic_write_text
from cuvee.kernel.errors import UserError
from cuvee.mixer.indexed import IndexedDataset, dtype_for_vocab
from cuvee.mixer.sources import resolve_files, tokenize_source
from cuvee.mixsearch.progress import seconds, timed
from cuvee.train.decontam import decontaminate
from cuvee.train.shards import ShardSet

CACHE = "cache"


class EmptyTargetError(UserError, ValueError):
    """A target with no document left to score after decontamination."""


def shard_tokenizer(tokenizer) -> dict:
    """The tokenizer entry of the views (vocab and EOS for the loader; kind names it as the search's)."""
    return {"kind": "cuvee-search", "name": tokenizer.name, "vocab_size": tokenizer.vocab_size,
            "eos_id": tokenizer.eos_id, "fingerprint": tokenizer.fingerprint}


def tokenize_once(text_set, tokenizer, out: Path, max_epochs: float = 1.0, say=print) -> dict:
    """The cache of one source or target (tokenized now unless its ``.json`` says it is done)."""
    cache = out / CACHE
    cache.mkdir(exist_ok=True)
    meta_path = cache / f"{text_set.name}.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    task = None
    say(f"[search] tokenizing {text_set.name} ...")
    t0 = time.perf_counter()
    if getattr(text_set, "lm_eval", None):  # an lm-eval task's items, rendered to a JSONL file first
        src, task = _rendered_task(text_set, cache, say)
    else:
        src = text_set.as_mix_source(max_epochs)
    files = resolve_files(src)
    scan = tokenize_source(src, files, tokenizer, cache / text_set.name, dtype_for_vocab(tokenizer.vocab_size), 512)
    meta = {"name": text_set.name, "tokens": int(scan.tokens), "documents": int(scan.kept),
            "counters": scan.as_dict(), "files": scan.files, **({"lm_eval": task} if task else {})}
    atomic_write_text(meta_path, json.dumps(meta, indent=2) + "\n")
    say(f"[search] tokenized {text_set.name}: {scan.kept:,} documents, {scan.tokens:,} tokens "
        f"({sum(scan.dropped.values()):,} dropped: {scan.dropped or 'none'}) in {seconds(time.perf_counter() - t0)}")
    return meta


def _rendered_task(target, cache: Path, say):
    """``cache/<name>.items.jsonl``: the target task's first ``limit`` items as documents (cuvee.evaltasks.render),
    and what was read, kept and dropped; the mixer's source view of that file."""
    from cuvee.evaltasks.render import render_items
    from cuvee.mixer.config import SourceConfig

    texts, counts = render_items(target.task, target.allow_task_code, target.pool, say)
    items = cache / f"{target.name}.items.jsonl"
    atomic_write_text(items, "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    say(f"[search] target {target.name}: lm-eval task {target.task['task']}: {counts['read']:,} items read, "
        f"{counts['kept']:,} rendered ({counts['dropped'] or 'none dropped'})")
    task = {**target.task, **counts}
    return SourceConfig(name=target.name, paths=[str(items)], weight=1.0, max_epochs=1.0), task


def open_cache(out: Path, name: str) -> IndexedDataset:
    return IndexedDataset(out / CACHE / name)


def document_bytes(shards: ShardSet, indices: np.ndarray, tokenizer) -> np.ndarray | None:
    """UTF-8 bytes of each document's text (EOS excluded), decoded with the search's tokenizer."""
    eos = tokenizer.eos_id
    out = []
    try:
        for i in indices:
            ids = np.asarray(shards.document(int(i)))
            ids = ids[ids != eos]
            out.append(len(tokenizer.decode(ids.tolist()).encode("utf-8")))
    except Exception:  # noqa: BLE001 - a tokenizer that cannot decode: the metric falls back to loss per token
        return None
    arr = np.asarray(out, dtype=np.float64)
    return arr if arr.sum() > 0 else None


class Truncated(ShardSet):
    """Each document cut to its first ``max_tokens`` tokens: a target's scoring cost stays bounded however long
    its pages are (decontamination still compares whole documents). No EOS is appended when scoring (its
    ``eos_id`` is None): a whole document keeps the EOS its cache holds, a cut one is not made to predict one."""

    def __init__(self, base: ShardSet, max_tokens: int):
        self.base, self.max_tokens = base, max_tokens
        super().__init__(datasets=base.datasets, tokenizer={**base.tokenizer, "eos_id": None}, manifests=base.manifests)

    def document(self, i: int) -> np.ndarray:
        return self.base.document(i)[: self.max_tokens]

    def document_length(self, i: int) -> int:
        return min(self.base.document_length(i), self.max_tokens)


def _decontaminated(t, shards: ShardSet, sources: list[ShardSet], ngram: int, threshold: float) -> dict:
    """One target's kept documents and what was removed (``cuvee.train.decontam``, as ``cuvee anneal`` does)."""
    keep, rep = decontaminate({t.name: shards}, sources, max_docs=t.pool, ngram=ngram, threshold=threshold)
    per = rep["eval_sets"][t.name]
    return {"kept": [int(i) for i in keep[t.name]], "pool": min(t.pool, shards.num_documents),
            "duplicates_within": int(per.get("duplicates_within_eval", 0)),
            "exact_overlap": int(per.get("exact_overlap", 0)), "near_overlap": int(per.get("near_overlap", 0)),
            "contained_overlap": int(per.get("contained_overlap", 0)), "removed": per.get("removed", [])[:50]}


def clean_targets(cfg, tokenizer, out: Path, say=print) -> tuple[dict, dict]:
    """Per target: (ShardSet, kept indices, per-document bytes), and the decontamination report.

    Kept: the first ``max_docs`` documents (an lm_eval target: its ``limit`` items), minus exact/near duplicates within the set and any document that
    (near-)duplicates a document of any source (``cuvee.train.decontam``, as ``cuvee anneal`` does). The
    report is computed once and stored in ``cache/decontamination.json``."""
    tok = shard_tokenizer(tokenizer)
    sets = {t.name: ShardSet(datasets=[open_cache(out, t.name)], tokenizer=tok) for t in cfg.targets}
    report_path = out / CACHE / "decontamination.json"
    if report_path.exists():
        stored = json.loads(report_path.read_text())
    else:
        sources = [ShardSet(datasets=[open_cache(out, s.name)], tokenizer=tok) for s in cfg.sources]
        ngram = 50 if tokenizer.vocab_size <= 512 else 13  # byte-level: ~50 bytes is the 13-token window's span
        stored = {"ngram": ngram, "threshold": cfg.decontam_threshold, "targets": {}}
        with timed(say, f"decontaminating {len(cfg.targets)} target(s) against {len(cfg.sources)} source(s) "
                        f"({ngram}-gram containment)"):
            for t in cfg.targets:
                stored["targets"][t.name] = _decontaminated(t, sets[t.name], sources, ngram, cfg.decontam_threshold)
        atomic_write_text(report_path, json.dumps(stored, indent=2) + "\n")
    targets = {}
    for t in cfg.targets:
        info = stored["targets"][t.name]
        keep = np.asarray(info["kept"], dtype=np.int64)
        if keep.size == 0:
            raise EmptyTargetError(f"target '{t.name}': no documents left after decontamination against the sources "
                             f"({info['pool']} in the pool, {info['exact_overlap']} exact, {info['near_overlap']} "
                             f"near and {info.get('contained_overlap', 0)} contained overlaps, "
                             f"{info['duplicates_within']} duplicates within): hold these documents "
                             f"out of every source")
        say(f"[search] target {t.name}: {info['pool']} documents, {info['duplicates_within']} duplicates, "
            f"{info['exact_overlap'] + info['near_overlap'] + info.get('contained_overlap', 0)} overlapping the "
            f"sources, {keep.size} scored")
        scored = Truncated(sets[t.name], t.max_doc_tokens)
        targets[t.name] = (scored, keep, document_bytes(scored, keep, tokenizer))
    return targets, stored
