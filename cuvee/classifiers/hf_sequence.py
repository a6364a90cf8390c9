"""Any Hugging Face sequence-classification model as a cuvee scorer / tagger (FineWeb-Edu classifier & co.).

``HFSequenceScorer`` loads ``AutoModelForSequenceClassification`` + ``AutoTokenizer`` from a local folder or
a hub id (``HuggingFaceFW/fineweb-edu-classifier``). Loading happens lazily on the worker; validating a
recipe only reads ``config.json`` (local folder, or the HF cache for a hub id - never the network).
Set ``HF_HUB_OFFLINE=1`` to forbid downloads at run time as well (hub ids then need a populated cache).

Heads:

* regression (``num_labels == 1`` or ``problem_type == "regression"``): the raw output is the score;
  ``int_score`` adds FineWeb-Edu's ``int(round(max(0, min(score, 5))))`` (Python's round: 2.5 -> 2);
* multi-class: the score is the softmax probability of ``positive_label`` (matched against
  ``config.id2label``), and/or ``label_to`` receives the arg-max label name.

Only what ``AutoModelForSequenceClassification`` can load is supported: NVIDIA's DeBERTa-v3 quality and
domain classifiers (``nvidia/quality-classifier-deberta``, ``nvidia/domain-classifier``) are custom
``PyTorchModelHubMixin`` classes, not transformers architectures, and are refused with a clear error.

Throughput: each ``score_batch`` call (one batch window, e.g. 256 documents) is sorted by length, cut into
model batches of ``batch_size`` (little padding), run under ``torch.inference_mode`` and put back in input
order. On CUDA the model runs in bf16; on CPU in fp32 with ``threads`` torch threads. For more CPU
throughput run more datatrove tasks/workers with ``threads: 1`` each (process parallelism scales better
than intra-op threads on small batches) - ``executor.workers`` = number of cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

from cuvee.classifiers.scoring import ScoreAnnotator
from cuvee.hf_loading import (
    looks_like_hub_id,
    pretrained,
    refuse_remote_code,
)

# characters per token kept before tokenising: bounds the cost of megabyte pages, never binding on real text
CHARS_PER_TOKEN_CAP = 64
# padded tokens per model batch on CPU (see _batches); GPUs take whole batch_size batches
CPU_BATCH_TOKENS = 1024
NVIDIA_HINT = ("NVIDIA's quality/domain classifiers (nvidia/quality-classifier-deberta, nvidia/domain-classifier) are "
               "custom PyTorchModelHubMixin classes that AutoModelForSequenceClassification cannot load")


def read_config(model: str) -> dict | None:
    """``config.json`` of a local folder, or of a hub id already in the HF cache; None if not available offline."""
    p = Path(model)
    if p.is_dir():
        refuse_remote_code(p)
        cfg = p / "config.json"
        return json.loads(cfg.read_text()) if cfg.exists() else None
    if looks_like_hub_id(model):
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(model, "config.json")
        except Exception:  # noqa: BLE001 - a cache probe must never fail validation
            return None
        if isinstance(hit, str) and os.path.exists(hit):
            refuse_remote_code(Path(hit).parent)
            return json.loads(Path(hit).read_text())
    return None


def is_sequence_classifier_config(cfg: dict | None) -> bool:
    return bool(cfg) and any(str(a).endswith("ForSequenceClassification") for a in cfg.get("architectures") or [])


def is_hf_sequence_model(model: str) -> bool:
    """A local folder whose config.json names a ``*ForSequenceClassification`` architecture, or a hub id."""
    p = Path(model)
    if p.is_dir():
        return not (p / "head.json").exists() and is_sequence_classifier_config(read_config(model))
    return looks_like_hub_id(model)


def config_labels(cfg: dict) -> list[str]:
    """Label names in id order (``id2label`` keys are strings in config.json, ints once loaded)."""
    id2label = cfg.get("id2label") or {}
    n = int(cfg.get("num_labels") or len(id2label) or 2)
    return [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n)]


def is_regression_config(cfg: dict) -> bool:
    return cfg.get("problem_type") == "regression" or len(config_labels(cfg)) == 1


def check_options(model: str, positive_label: str | None = None, label_to: str | None = None,
                  int_score: bool = False, require_score: bool = True, labels_needed: list[str] | None = None,
                  cfg: dict | None = None, tagging: bool = False) -> dict | None:
    """Validate options against the model's config when it can be read offline (else defer to load time).

    Raises ValueError naming the available labels when a label does not exist.
    """
    cfg = cfg if cfg is not None else read_config(model)
    if cfg is None:
        return None
    if Path(model).is_dir() and not is_sequence_classifier_config(cfg):
        archs = cfg.get("architectures")
        raise ValueError(f"{model}: config.json architectures {archs} are not a *ForSequenceClassification model "
                         f"(AutoModelForSequenceClassification is required; {NVIDIA_HINT})")
    labels = config_labels(cfg)
    if is_regression_config(cfg):
        if positive_label is not None:
            raise ValueError(f"{model}: regression model (one output): positive_label {positive_label!r} does not apply")
        if label_to is not None:
            raise ValueError(f"{model}: regression model (one output): label_to does not apply")
        if labels_needed or tagging:
            raise ValueError(f"{model}: regression model (one output) has no labels to tag with")
        return cfg
    if int_score:
        raise ValueError(f"{model}: int_score needs a regression model; this one has labels {labels}")
    if positive_label is not None and positive_label not in labels:
        raise ValueError(f"{model}: positive_label {positive_label!r} is not a label of the model; available labels: {labels}")
    missing = [lab for lab in labels_needed or [] if lab not in labels]
    if missing:
        raise ValueError(f"{model}: labels {missing} are not labels of the model; available labels: {labels}")
    if require_score and positive_label is None and label_to is None:
        raise ValueError(f"{model}: multi-class model: give positive_label (one of {labels}) for the score, or label_to")
    return cfg


def int_score(score: float) -> int:
    """FineWeb-Edu's rounding: ``int(round(max(0, min(score, 5))))``."""
    return int(round(max(0.0, min(float(score), 5.0))))


class HFSequenceScorer:
    """Batched, length-sorted inference of a sequence-classification model; picklable without the model."""

    def __init__(self, model: str, positive_label: str | None = None, label_to: str | None = None,
                 int_score: bool = False, max_length: int | None = None, batch_size: int = 32,
                 device: str = "auto", threads: int | None = None, int_key: str | None = None,
                 cpu_batch_tokens: int | None = CPU_BATCH_TOKENS):
        self.model_name = str(model)
        self.positive_label = positive_label
        self.label_to = label_to
        self.int_score = int_score
        self.int_key = int_key or "int_score"
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.threads = threads
        self.cpu_batch_tokens = cpu_batch_tokens
        self._model = None
        self._tok = None
        self.labels: list[str] | None = None
        self.regression: bool | None = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_tok": None}

    # ------------------------------------------------------------------ loading

    def load(self):
        if self._model is not None:
            return self._model, self._tok
        import torch
        from transformers import (
            AutoConfig,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )

        from cuvee.classifiers.embedder import pick_device

        if self.threads:
            torch.set_num_threads(self.threads)
        self.device = pick_device(self.device)
        cfg = pretrained(AutoConfig, self.model_name)
        cfg_dict = cfg.to_dict()
        if getattr(cfg, "architectures", None) and not is_sequence_classifier_config(cfg_dict):
            raise ValueError(f"{self.model_name}: architectures {cfg.architectures} are not *ForSequenceClassification ({NVIDIA_HINT})")
        check_options(self.model_name, self.positive_label, self.label_to, self.int_score, require_score=False, cfg=cfg_dict)
        dtype = torch.bfloat16 if self.device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
        self._tok = pretrained(AutoTokenizer, self.model_name)
        try:
            model = pretrained(AutoModelForSequenceClassification, self.model_name, dtype=dtype)
        except TypeError:  # older transformers: torch_dtype
            model = pretrained(AutoModelForSequenceClassification, self.model_name, torch_dtype=dtype)
        self._model = model.to(self.device).eval()
        self.labels = config_labels(cfg_dict)
        self.regression = is_regression_config(cfg_dict)
        self.max_length = self.resolve_max_length(self._tok, cfg)
        return self._model, self._tok

    def resolve_max_length(self, tok, cfg) -> int:
        """Recipe ``max_length``, else the tokenizer's ``model_max_length``, capped by the position embeddings."""
        cap = getattr(cfg, "max_position_embeddings", None)
        if cap and "roberta" in (getattr(cfg, "model_type", "") or ""):
            cap -= 2  # RoBERTa-family positions start after the padding index
        n = self.max_length
        if n is None:
            tml = getattr(tok, "model_max_length", None)
            n = int(tml) if tml and tml < 1_000_000 else (cap or 512)
        return int(min(n, cap)) if cap else int(n)

    # ------------------------------------------------------------------ inference

    def logits(self, texts: list[str]) -> np.ndarray:
        """Raw model outputs, (n, num_labels) float32, in input order."""
        import torch

        model, tok = self.load()
        out = np.zeros((len(texts), model.config.num_labels), dtype=np.float32)
        if not texts:
            return out
        cap = self.max_length * CHARS_PER_TOKEN_CAP
        # tokenise the window once (truncated, unpadded), sort by token count, then pad each model batch
        enc = tok([t[:cap] for t in texts], truncation=True, max_length=self.max_length)
        lens = [len(ids) for ids in enc["input_ids"]]
        keys = list(enc.keys())
        with torch.inference_mode():
            for idx in self._batches(lens):
                feats = [{k: enc[k][i] for k in keys} for i in idx]
                batch = tok.pad(feats, padding="longest", return_tensors="pt").to(self.device)
                out[idx] = model(**batch).logits.float().cpu().numpy()
        return out

    def _batches(self, lens: list[int]) -> list[list[int]]:
        """Indices sorted by token count, cut into batches of at most ``batch_size`` documents and, on CPU, at
        most ``cpu_batch_tokens`` padded tokens (large padded batches are slower than small ones on CPU)."""
        budget = self.cpu_batch_tokens if not str(self.device).startswith("cuda") else None
        out, cur = [], []
        for i in sorted(range(len(lens)), key=lambda i: lens[i]):
            if cur and (len(cur) >= self.batch_size or (budget and (len(cur) + 1) * lens[i] > budget)):
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        return out

    def probabilities(self, texts: list[str]) -> np.ndarray:
        z = self.logits(texts).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def predict_labels(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """Arg-max label and its probability (multi-class heads)."""
        self.load()
        if self.regression:
            raise ValueError(f"{self.model_name}: regression model (one output) has no labels")
        p = self.probabilities(texts)
        best = p.argmax(axis=1)
        return [self.labels[i] for i in best], p[np.arange(len(best)), best]

    def score_batch(self, texts: list[str]) -> np.ndarray:
        """The score per text."""
        return self.score_with_extras(texts)[0]

    def score_with_extras(self, texts: list[str]) -> tuple[np.ndarray, list[dict]]:
        """The score per text and its extra metadata (``int_key`` for regression heads, ``label_to``'s arg-max label)."""
        self.load()
        if self.regression:
            scores = self.logits(texts)[:, 0].astype(np.float64)
            return scores, [{self.int_key: int_score(s)} if self.int_score else {} for s in scores]
        p = self.probabilities(texts)
        best = p.argmax(axis=1)
        scores = p[:, self.labels.index(self.positive_label)] if self.positive_label is not None else p[np.arange(len(best)), best]
        return scores.astype(np.float64), [{self.label_to: self.labels[i]} if self.label_to else {} for i in best]


class HFScoreAnnotator(ScoreAnnotator):
    """``ScoreAnnotator`` that also writes the scorer's extra metadata (``<name>_int_score``, ``label_to``)."""

    def score(self, texts: list[str]) -> tuple[np.ndarray, list[dict]]:
        return self.scorer.score_with_extras(texts)


class HFLabelTagger(BaseFilter):
    """Tags ``metadata[key]`` with the arg-max label (and ``<key>_score`` with its probability), batched.

    ``label_thresholds``: a label is only given when its probability reaches the label's minimum, else the
    document gets ``default_label``. ``keep``: drop documents whose final label is not listed.
    """

    name = "🏷️ hf labels"
    type = "🤖 - CLASSIFIER"

    def __init__(self, scorer: HFSequenceScorer, key: str, keep: list[str] | None = None,
                 label_thresholds: dict[str, float] | None = None, default_label: str = "other", batch_size: int = 64,
                 exclusion_writer=None):
        super().__init__(exclusion_writer, batch_size=batch_size)
        self.scorer = scorer
        self.key = key
        self.keep = set(keep) if keep else None
        self.label_thresholds = dict(label_thresholds or {})
        self.default_label = default_label

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self.filter_batch([doc])[0]

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        labels, probs = self.scorer.predict_labels([d.text for d in batch])
        out = []
        for d, lab, p in zip(batch, labels, probs):
            if p < self.label_thresholds.get(lab, 0.0):
                lab = self.default_label
            d.metadata[self.key] = lab
            d.metadata[f"{self.key}_score"] = float(p)
            self.stat_update(f"{self.key}_{lab}")
            out.append(True if self.keep is None or lab in self.keep else (False, f"{self.key}_{lab}"))
        return out
