"""fastText quality classifier: train (DCLM defaults), evaluate on a held-out split, score documents.

DCLM's OH-2.5 + ELI5 classifier is ``fasttext.train_supervised(wordNgrams=2, lr=0.1, dim=100, epoch=5)``
on ~400k positive vs. random-web negative documents; we use the same defaults. Training and scoring
share :func:`normalize` so that a model sees the same text form in both. Models are saved as ``.bin``
(or ``.ftz`` when quantized; quantization keeps models small enough to ship in the repository).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cuvee.classifiers.examples import POSITIVE, Examples
from cuvee.classifiers.metrics import binary_metrics
from cuvee.kernel.atomic import replacing, write_json
from cuvee.kernel.owned_file import marker


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


def train_fasttext(train: Examples, output: str | Path, cfg: FastTextConfig = FastTextConfig(), plan: dict | None = None):
    """Train and save a supervised fastText model (through the kernel's atomic write); returns it.

    ``<output>.json`` records the config, labels and ``plan``: the kernel's marker of an owned file."""
    import fasttext

    from cuvee.classifiers.fasttext_child import train_in_child

    if len(set(train.labels)) < 2:
        raise ValueError(f"need at least two labels to train a classifier, got {sorted(set(train.labels))}")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, replacing(output) as part:
        train_file = os.path.join(tmp, "train.txt")
        _write_training_file(train, train_file)
        try:  # a fresh process, so fastText's unset matrix rows are zero pages (cuvee/classifiers/fasttext_child.py)
            train_in_child(dict(input=train_file, lr=cfg.lr, dim=cfg.dim, epoch=cfg.epoch, wordNgrams=cfg.word_ngrams,
                                minCount=cfg.min_count, bucket=cfg.bucket, thread=cfg.threads, seed=cfg.seed, verbose=0),
                           dict(input=train_file, qnorm=True, retrain=True, cutoff=cfg.quantize_cutoff,
                                thread=cfg.threads, verbose=0) if cfg.quantize else None, str(part))
        except RuntimeError as e:
            if "NaN" in str(e):
                raise RuntimeError(f"fastText training diverged ({e}): lower --lr (now {cfg.lr}) or check the "
                                   f"training file") from None
            raise
        model = fasttext.load_model(str(part))
        # the marker before the rename: a kill between the two must not leave a model the rerun refuses as foreign
        write_json(marker(output), {"kind": "fasttext", "config": asdict(cfg), "labels": sorted(set(train.labels)),
                                    "plan": plan})
    return model


def full_label(label) -> str:
    """``hq`` / ``__label__hq`` / ``1`` (an int from YAML) -> ``__label__hq`` / ``__label__1``."""
    return "__label__" + str(label).strip().removeprefix("__label__")


def check_positive_label(model, positive_label, where: str = "") -> str:
    """The full label name, or a ValueError that lists the model's labels (DCLM's model: ``hq`` / ``cc``)."""
    labels = list(model.get_labels())
    for label in (str(positive_label).strip(), full_label(positive_label)):  # exact first: models with a custom label prefix
        if label in labels:
            return label
    bare = ", ".join(lab.removeprefix("__label__") for lab in labels)
    raise ValueError(f"{where or 'fastText model'}: positive_label {str(positive_label)!r} is not a label of this model; "
                     f"its labels are: {bare} (give one of them as positive_label, with or without '__label__')")


class FastTextScorer:
    """Probability of ``positive_label`` for each text; the model loads lazily on first use (per worker).

    Works with any label scheme (``hq``/``lq``, DCLM's ``hq``/``cc``, ``1``/``0``, multi-class): every label's
    probability is requested (k = -1), so P(positive) is right even when the positive label is not the top
    one; if fastText still leaves it out (hierarchical softmax prunes labels below ~1e-5), a 2-label model
    scores ``1 - P(other label)`` and a multi-class model 0.
    """

    def __init__(self, model_path: str | Path, positive_label: str = POSITIVE, max_chars: int | None = None):
        self.model_path = str(model_path)
        self.requested_label = str(positive_label)  # as the recipe gave it, for error messages
        self.positive_label = full_label(positive_label)
        self.max_chars = max_chars
        self._model = None
        self._other = None  # the other label of a 2-label model

    def __getstate__(self):
        return {**self.__dict__, "_model": None}

    @property
    def model(self):
        if self._model is None:
            import fasttext

            from cuvee.classifiers.fasttext_check import check_model_file

            if not os.path.exists(self.model_path):
                raise FileNotFoundError(f"fastText model not found: {self.model_path}")
            check_model_file(self.model_path)  # fastText trusts every size in the file: a cut one eats all memory
            model = fasttext.load_model(self.model_path)
            self.positive_label = check_positive_label(model, self.requested_label, self.model_path)
            labels = list(model.get_labels())
            self._other = next(lab for lab in labels if lab != self.positive_label) if len(labels) == 2 else None
            self._model = model
        return self._model

    def labels(self) -> list[str]:
        """The model's labels (loads the model; raises if ``positive_label`` is not one of them)."""
        return list(self.model.get_labels())

    def score_batch(self, texts: list[str]) -> np.ndarray:
        model = self.model
        # the C++ entry point directly: the Python wrapper re-checks and copies every line; "\n" = fastText's EOS
        lines = [normalize(t, self.max_chars) + "\n" for t in texts]
        labels, probs = model.f.multilinePredict(lines, -1, 0.0, "strict")
        out = np.zeros(len(lines), dtype=np.float64)
        pos, other = self.positive_label, self._other
        for i, (labs, ps) in enumerate(zip(labels, probs)):
            p_other = None
            for lab, p in zip(labs, ps):
                if lab == pos:
                    out[i] = min(float(p), 1.0)
                    break
                if lab == other:
                    p_other = float(p)
            else:  # positive label not returned
                if p_other is not None:
                    out[i] = min(max(1.0 - p_other, 0.0), 1.0)
        return out


def evaluate_fasttext(model_path: str | Path, valid: Examples, positive_label: str = POSITIVE, threshold: float = 0.5) -> dict:
    """Precision / recall / F1 at ``threshold`` and ROC-AUC of P(positive) on held-out examples."""
    scorer = FastTextScorer(model_path, positive_label)
    scores = scorer.score_batch(valid.texts) if len(valid) else np.zeros(0)
    labels = np.array([str(lab) == full_label(positive_label).removeprefix("__label__") for lab in valid.labels])
    return binary_metrics(labels, scores, threshold)
