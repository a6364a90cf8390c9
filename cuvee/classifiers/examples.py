"""Labelled training examples for classifiers, from a labelled file or from positive / negative sources.

Sources are anything :func:`cuvee.pipeline.io.iter_documents` reads (Parquet / JSONL files, folders,
globs). A labelled file carries the label in a column (``label`` by default), which the reader places
in ``metadata``. Documents with empty text or no label are skipped and counted, never silently lost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cuvee.pipeline.io import iter_documents

POSITIVE = "hq"
NEGATIVE = "lq"


@dataclass
class Examples:
    texts: list[str] = field(default_factory=list)
    labels: list = field(default_factory=list)  # str for classification, float for regression
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def __len__(self) -> int:
        return len(self.texts)

    def split(self, valid_fraction: float, seed: int = 0) -> tuple[Examples, Examples]:
        """Random, stratified-by-label train / held-out split (deterministic for a seed)."""
        rng = random.Random(seed)
        by_label: dict = {}
        for i, lab in enumerate(self.labels):
            by_label.setdefault(lab if isinstance(lab, str) else "_all", []).append(i)
        train, valid = Examples(skipped=dict(self.skipped)), Examples()
        for idx in by_label.values():
            rng.shuffle(idx)
            n_valid = int(round(len(idx) * valid_fraction))
            for j, i in enumerate(idx):
                tgt = valid if j < n_valid else train
                tgt.texts.append(self.texts[i])
                tgt.labels.append(self.labels[i])
        return train, valid


def load_labelled(paths, text_key: str = "text", label_key: str = "label", regression: bool = False, limit: int | None = None) -> Examples:
    """Examples from files with a text column and a label column."""
    ex = Examples()
    for doc in iter_documents(paths):
        text = doc.text if text_key == "text" else doc.metadata.get(text_key)
        label = doc.metadata.get(label_key)
        if not text or not str(text).strip():
            ex.skip("empty_text")
            continue
        if label is None or label == "":
            ex.skip("missing_label")
            continue
        if regression:
            try:
                label = float(label)
            except (TypeError, ValueError):
                ex.skip("non_numeric_label")
                continue
        else:
            label = str(label).removeprefix("__label__")
        ex.texts.append(str(text))
        ex.labels.append(label)
        if limit and len(ex) >= limit:
            break
    return ex


def load_sources(positive, negative, text_key: str = "text", limit_per_class: int | None = None,
                 positive_label: str = POSITIVE, negative_label: str = NEGATIVE,
                 negative_text_key: str | None = None) -> Examples:
    """Examples from positive and negative document sources (DCLM style: good text vs. random web); the negatives'
    text is read from ``negative_text_key`` when given (curated ``main_content`` against a pipeline's ``text``)."""
    ex = Examples()
    for paths, label, key in ((positive, positive_label, text_key), (negative, negative_label, negative_text_key or text_key)):
        n = 0
        for doc in iter_documents(paths):
            text = doc.text if key == "text" else doc.metadata.get(key)
            if not text or not str(text).strip():
                ex.skip(f"empty_text_{label}")
                continue
            ex.texts.append(str(text))
            ex.labels.append(label)
            n += 1
            if limit_per_class and n >= limit_per_class:
                break
    return ex
