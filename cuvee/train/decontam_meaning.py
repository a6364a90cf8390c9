"""Eval hygiene by meaning: an anneal's eval document is left out when a training document of either arm says the
same thing in other words, which the token n-gram checks of :mod:`cuvee.train.decontam` cannot see.

The test is the ``decontaminate`` stage's ``by_meaning`` test, on the anneal's shards: both sides are decoded from
their token ids and embedded with the same encoder and rule as the ``embed`` stage (the shipped all-MiniLM-L6-v2 by
default, the first ``max_tokens`` word pieces, one document per forward pass on CPU), and an eval document is
removed when its cosine to some training document is at least ``threshold``. Every removal names its evidence: the
training source and document, and the cosine.

Cost: one embedding per training document of both arms (the stage's ~100 ms of CPU per page on one core; opt-in
for that reason), the eval side held in memory (a few hundred vectors), the training side streamed in chunks.
"""

from __future__ import annotations

import numpy as np

from cuvee.train.evaluate import document_text
from cuvee.train.shards import ShardSet, open_shards

CHUNK = 256  # training documents embedded and compared at a time


def _texts(shards: ShardSet, indices) -> list[str]:
    out = []
    for i in indices:
        text = document_text(np.asarray(shards.document(int(i))), shards.tokenizer)
        if text is None:
            raise ValueError(f"eval hygiene by meaning: cannot decode tokenizer {shards.tokenizer.get('kind')!r} "
                             "back to text; leave decontam_meaning out")
        out.append(text)
    return out


def meaning_overlap(eval_sets: dict[str, ShardSet], keep: dict[str, np.ndarray], train_sources: list,
                    threshold: float, model: str = "all-MiniLM-L6-v2", max_tokens: int = 256,
                    say=lambda m: None) -> dict[str, dict]:
    """Per eval set: ``removed`` (each with the eval ``document``, the training ``source`` index and ``train_document``
    and the ``cosine``, highest first) and ``kept`` (the indices of ``keep[name]`` left), at ``threshold``."""
    from cuvee.classifiers.embedder import Encoder

    enc = Encoder(model, max_length=max_tokens, batch_size=1)
    vecs = {name: enc.embed(_texts(eval_sets[name], keep[name])) for name in eval_sets}
    best = {name: np.full(len(keep[name]), -2.0, dtype=np.float32) for name in eval_sets}
    where = {name: np.full((len(keep[name]), 2), -1, dtype=np.int64) for name in eval_sets}
    for si, spec in enumerate(train_sources):
        shards = spec if isinstance(spec, ShardSet) else open_shards(spec)
        n = shards.num_documents
        for a in range(0, n, CHUNK):
            t = enc.embed(_texts(shards, range(a, min(n, a + CHUNK))))
            for name, ev in vecs.items():
                if not len(ev):
                    continue
                sims = ev @ t.T
                j = sims.argmax(1)
                top = sims[np.arange(len(ev)), j]
                better = top > best[name]
                best[name][better] = top[better]
                where[name][better] = np.stack([np.full(better.sum(), si), a + j[better]], axis=1)
            say(f"[anneal] eval hygiene by meaning: source {si + 1}/{len(train_sources)}, "
                f"{min(n, a + CHUNK):,}/{n:,} training documents embedded")
    out = {}
    for name in eval_sets:
        hit = best[name] >= threshold
        order = np.argsort(-best[name][hit], kind="stable")
        removed = [{"document": int(keep[name][i]), "source": int(where[name][i, 0]),
                    "train_document": int(where[name][i, 1]), "cosine": round(float(best[name][i]), 4)}
                   for i in np.flatnonzero(hit)[order]]
        out[name] = {"removed": removed, "kept": np.asarray(keep[name])[~hit]}
    return out
