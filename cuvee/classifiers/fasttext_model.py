"""fastText quality classifier: train (DCLM defaults), evaluate on a held-out split, score documents.

DCLM's OH-2.5 + ELI5 classifier is ``fasttext.train_supervised(wordNgrams=2, lr=0.1, dim=100, epoch=5)``
on ~400k positive vs. random-web negative documents; we use the same defaults. Training and scoring
share :func:`normalize` so that a model sees the same text form in both. Models are saved as ``.bin``
(or ``.ftz`` when quantized; quantization keeps models small enough to ship in the repository).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuvee.classifiers.examples import POSITIVE, Examples
from cuvee.classifiers.metrics import binary_metrics

def normalize(text: str, max_chars: int | None = None) -> str:
    """One line (fastText reads "\n" as end of example), lower-cased; optionally truncated.

    fastText itself splits tokens on runs of ASCII whitespace, so no further collapsing is needed; a
    split/join would cost as much as a third of the scoring time on long pages.
    """
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars]
    return text.replace("\n", " ").lower()


@dataclass(frozen=True)
class FastTextConfig:
    """DCLM defaults."""

    lr: float = 0.1
    dim: int = 100
    epoch: int = 5
    word_ngrams: int = 2
    min_count: int = 1
    bucket: int = 2_000_000
    threads: int = 2
    seed: int = 0
    quantize: bool = False
    quantize_cutoff: int = 100_000  # keep this many word / n-gram rows when quantizing


def _write_training_file(ex: Examples, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for text, label in zip(ex.texts, ex.labels):
            line = normalize(text)
            if line:
                f.write(f"__label__{label} {line}\n")


def train_fasttext(train: Examples, output: str | Path, cfg: FastTextConfig = FastTextConfig()):
    """Train and save a supervised fastText model; returns the loaded model."""
    import fasttext

    if len(set(train.labels)) < 2:
        raise ValueError(f"need at least two labels to train a classifier, got {sorted(set(train.labels))}")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = os.path.join(tmp, "train.txt")
        _write_training_file(train, train_file)
        model = fasttext.train_supervised(
            input=train_file, lr=cfg.lr, dim=cfg.dim, epoch=cfg.epoch, wordNgrams=cfg.word_ngrams,
            minCount=cfg.min_count, bucket=cfg.bucket, thread=cfg.threads, seed=cfg.seed, verbose=0,
        )
        if cfg.quantize:
            model.quantize(input=train_file, qnorm=True, retrain=True, cutoff=cfg.quantize_cutoff, thread=cfg.threads, verbose=0)
    model.save_model(str(output))
    Path(str(output) + ".json").write_text(json.dumps({"kind": "fasttext", "config": asdict(cfg), "labels": sorted(set(train.labels))}, indent=2))
    return model


class FastTextScorer:
    """Probability of ``positive_label`` for each text; the model loads lazily on first use (per worker)."""

    def __init__(self, model_path: str | Path, positive_label: str = POSITIVE, max_chars: int | None = None):
        self.model_path = str(model_path)
        self.positive_label = "__label__" + positive_label.removeprefix("__label__")
        self.max_chars = max_chars
        self._model = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None}

    @property
    def model(self):
        if self._model is None:
            import fasttext

            if not os.path.exists(self.model_path):
                raise FileNotFoundError(f"fastText model not found: {self.model_path}")
            self._model = fasttext.load_model(self.model_path)
            if self.positive_label not in self._model.labels:
                raise ValueError(f"{self.model_path}: label {self.positive_label!r} not in model labels {self._model.labels}")
        return self._model

    def score_batch(self, texts: list[str]) -> np.ndarray:
        model = self.model
        # the C++ entry point directly: the Python wrapper re-checks and copies every line; "\n" = fastText's EOS
        lines = [normalize(t, self.max_chars) + "\n" for t in texts]
        labels, probs = model.f.multilinePredict(lines, -1, 0.0, "strict")
        out = np.zeros(len(lines), dtype=np.float64)
        for i, (labs, ps) in enumerate(zip(labels, probs)):
            for lab, p in zip(labs, ps):
                if lab == self.positive_label:
                    out[i] = min(float(p), 1.0)
                    break
        return out


def evaluate_fasttext(model_path: str | Path, valid: Examples, positive_label: str = POSITIVE, threshold: float = 0.5) -> dict:
    """Precision / recall / F1 at ``threshold`` and ROC-AUC of P(positive) on held-out examples."""
    scorer = FastTextScorer(model_path, positive_label)
    scores = scorer.score_batch(valid.texts) if len(valid) else np.zeros(0)
    labels = np.array([lab == positive_label.removeprefix("__label__") for lab in valid.labels])
    return binary_metrics(labels, scores, threshold)
