"""Transformer quality scorer, FineWeb-Edu recipe: frozen encoder + small trained head.

FineWeb-Edu embeds each document with a frozen encoder and trains a linear regression head on
LLM-annotated 0-5 educational scores, then keeps documents with a score >= 3. We do the same with any
local Hugging Face encoder (all-MiniLM-L6-v2 by default) and either a regression head (numeric labels)
or a classification head (string labels; the score is P(positive label)).

A trained model is a folder: ``head.pt`` (the head's weights) and ``head.json`` (encoder, task, labels,
max_length), so the encoder itself is referenced, not copied.

Published classifiers that are whole ``*ForSequenceClassification`` models (FineWeb-Edu's own
``HuggingFaceFW/fineweb-edu-classifier``, HF text-classification models) are scored by
:mod:`cuvee.classifiers.hf_sequence`; ``transformer_quality`` picks the right one from the folder
(``head.json`` here, ``config.json`` with a ``*ForSequenceClassification`` architecture, or a hub id, there).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cuvee.classifiers.embedder import Encoder
from cuvee.classifiers.examples import POSITIVE, Examples
from cuvee.classifiers.metrics import binary_metrics, regression_metrics
from cuvee.kernel.atomic import replacing, write_json


def _head(dim: int, n_out: int):
    import torch

    return torch.nn.Linear(dim, n_out)


def train_head(emb: np.ndarray, labels: list, task: str, epochs: int = 300, lr: float = 1e-2,
               weight_decay: float = 1e-4, seed: int = 0):
    """Full-batch Adam on precomputed embeddings (cheap: the encoder is frozen)."""
    import torch

    torch.manual_seed(seed)
    x = torch.from_numpy(np.asarray(emb, dtype=np.float32))
    if task == "regression":
        y = torch.tensor([float(v) for v in labels], dtype=torch.float32)
        head = _head(x.shape[1], 1)
        with torch.no_grad():
            head.bias.fill_(float(y.mean()))

        def loss_fn(out):
            return torch.nn.functional.mse_loss(out.squeeze(-1), y)

        classes = None
    else:
        classes = sorted(set(labels))
        if len(classes) < 2:
            raise ValueError(f"need at least two labels for a classification head, got {classes}")
        y = torch.tensor([classes.index(v) for v in labels])
        head = _head(x.shape[1], len(classes))

        def loss_fn(out):
            return torch.nn.functional.cross_entropy(out, y)

    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        loss = loss_fn(head(x))
        loss.backward()
        opt.step()
    return head, classes


def train_transformer(train: Examples, output: str | Path, encoder: str = "all-MiniLM-L6-v2", task: str = "classification",
                      max_length: int = 256, batch_size: int = 32, epochs: int = 300, lr: float = 1e-2, device: str = "auto") -> dict:
    """Embed ``train`` with the frozen encoder, fit the head, save ``output/head.{pt,json}``; returns the config."""
    import torch

    enc = Encoder(encoder, max_length=max_length, batch_size=batch_size, device=device)
    emb = enc.embed(train.texts)
    head, classes = train_head(emb, train.labels, task, epochs=epochs, lr=lr)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    with replacing(out / "head.pt") as tmp:
        torch.save(head.state_dict(), tmp)
    cfg = {"kind": "transformer", "encoder": encoder, "task": task, "labels": classes, "dim": int(emb.shape[1]),
           "max_length": max_length, "train_examples": len(train)}
    write_json(out / "head.json", cfg)
    return cfg


class TransformerScorer:
    """Scores texts with encoder + head: the regression value, or P(positive label) for classification."""

    def __init__(self, model_dir: str | Path, positive_label: str = POSITIVE, batch_size: int = 32, device: str = "auto",
                 encoder: str | None = None, max_length: int | None = None, threads: int | None = None):
        self.model_dir = str(model_dir)
        cfg_path = Path(self.model_dir) / "head.json"
        if not cfg_path.exists():
            raise FileNotFoundError(f"{cfg_path}: not a transformer head folder (train one with `cuvee classify train --kind transformer`)")
        self.cfg = json.loads(cfg_path.read_text())
        self.positive_label = positive_label.removeprefix("__label__")
        if self.cfg["task"] == "classification" and self.positive_label not in self.cfg["labels"]:
            raise ValueError(f"{self.model_dir}: label {self.positive_label!r} not in head labels {self.cfg['labels']}")
        self.encoder = Encoder(encoder or self.cfg["encoder"], max_length=max_length or self.cfg["max_length"],
                               batch_size=batch_size, device=device, threads=threads)
        self._head = None

    def __getstate__(self):
        return {**self.__dict__, "_head": None}

    def _load_head(self):
        if self._head is None:
            import torch

            head = _head(self.cfg["dim"], 1 if self.cfg["task"] == "regression" else len(self.cfg["labels"]))
            head.load_state_dict(torch.load(Path(self.model_dir) / "head.pt", map_location="cpu", weights_only=True))
            self._head = head.eval()
        return self._head

    def logits(self, texts: list[str]) -> np.ndarray:
        import torch

        emb = self.encoder.embed(texts)
        with torch.inference_mode():
            return self._load_head()(torch.from_numpy(emb)).numpy()

    def score_batch(self, texts: list[str]) -> np.ndarray:
        out = self.logits(texts)
        if self.cfg["task"] == "regression":
            return out[:, 0].astype(np.float64)
        z = out - out.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        return p[:, self.cfg["labels"].index(self.positive_label)].astype(np.float64)

    def predict_labels(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """Arg-max label and its probability (classification heads, e.g. a fine-tuned topic head)."""
        out = self.logits(texts)
        z = out - out.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        best = p.argmax(axis=1)
        return [self.cfg["labels"][i] for i in best], p[np.arange(len(best)), best]


def evaluate_transformer(model_dir: str | Path, valid: Examples, positive_label: str = POSITIVE, threshold: float = 0.5,
                         positive_at: float | None = None) -> dict:
    scorer = TransformerScorer(model_dir, positive_label)
    scores = scorer.score_batch(valid.texts)
    if scorer.cfg["task"] == "regression":
        return regression_metrics(valid.labels, scores, positive_at)
    labels = np.array([lab == scorer.positive_label for lab in valid.labels])
    return binary_metrics(labels, scores, threshold)
