"""Typed model and training configs (YAML -> pydantic), so a bad key fails before any compute is spent."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    ValidationError,
    model_serializer,
    model_validator,
)

from cuvee.kernel.config import ConfigError, StrictModel, describe, did_you_mean, read_config_file, validate

_Strict = StrictModel  # the kernel's strict base (unknown keys and non-finite numbers refused)


class ModelConfig(_Strict):
    """Llama-style decoder hyper-parameters (names follow Llama / HF ``LlamaConfig``)."""

    vocab_size: int = Field(..., gt=0, le=1 << 24)
    dim: int = Field(..., gt=0, le=1 << 16)
    n_layers: int = Field(..., gt=0, le=1024)
    n_heads: int = Field(..., gt=0, le=1024)
    n_kv_heads: int | None = Field(None, gt=0)  # None = n_heads (no grouping)
    ffn_dim: int | None = Field(None, gt=0, le=1 << 18)  # None = Llama rule: 2/3 * 4 * dim rounded up to multiple_of
    multiple_of: int = Field(64, gt=0)
    rope_theta: float = Field(500_000.0, gt=0)  # Llama 3 value; Llama 2 used 10,000
    norm_eps: float = Field(1e-5, gt=0)
    max_seq_len: int = Field(4096, gt=1, le=1 << 20)
    tie_embeddings: bool = False
    init_std: float = Field(0.02, gt=0)

    @model_validator(mode="after")
    def _check(self):
        kv = self.kv_heads
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % kv:
            raise ValueError(f"n_heads {self.n_heads} is not divisible by n_kv_heads {kv}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        return self

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def hidden_dim(self) -> int:
        if self.ffn_dim:
            return self.ffn_dim
        h = int(2 * 4 * self.dim / 3)
        return self.multiple_of * ((h + self.multiple_of - 1) // self.multiple_of)


# Named sizes. ~125M follows GPT-3 small shapes; ~1B follows Llama 3.2 1B (tied embeddings). With cl100k's
# 100k vocabulary they hold ~152M / ~1.18B parameters (~75M / ~0.97B outside the embedding matrix).
MODEL_PRESETS: dict[str, dict] = {
    "tiny": {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 512},
    "small": {"dim": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 1024},
    "125m": {"dim": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "max_seq_len": 4096, "tie_embeddings": True},
    "1b": {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 8192, "max_seq_len": 4096, "tie_embeddings": True},
}


class DataConfig(_Strict):
    """Where the packed loader reads tokens: a mixer output dir (manifest.json), a shard prefix, or a mix YAML."""

    paths: list[str]
    seq_len: int = Field(256, gt=1, le=1 << 20)
    seed: int = 1234
    add_eos: bool = True  # append the manifest's EOS to documents that do not already end with it
    # document order (cuvee/train/loader.py): "global" reshuffles all documents every epoch (the share of each
    # source among the first steps wanders); "mix" follows the mixer's blended order, so every step holds the
    # mix's weights (anneals, ablations); "window" shuffles the mixer's order within windows of `window` docs;
    # "pieces" cuts documents into seq_len pieces and re-blends each source's shuffled pieces at the mix's weights
    # (every step holds them, every seed reads another order; cuvee/train/piece_blend.py)
    order: Literal["global", "mix", "window", "pieces"] = "global"
    window: int = Field(1024, gt=0)  # documents per shuffle window (order: window)

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # leave out what does not change the data order, so run folders bound before `order` existed (and runs
        # that differ only in an unused `window`) still resume: the folder binding is this dump
        d = handler(self)
        if d.get("order") == "global":
            d.pop("order")
        if d.get("order") != "window":
            d.pop("window", None)
        return d


class OptimConfig(_Strict):
    lr: float = Field(3e-4, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["cosine", "wsd", "constant", "linear"] = "cosine"
    decay_frac: float = Field(0.2, gt=0, le=1)  # WSD: fraction of steps spent decaying
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0)  # 0 disables clipping


class TrainConfig(_Strict):
    name: str = "train"
    model: ModelConfig | str | dict = "tiny"  # preset name, preset name + overrides, or full ModelConfig
    data: DataConfig
    optim: OptimConfig = OptimConfig()
    out_dir: str = "runs/train/${name}"
    steps: int = Field(100, gt=0)
    micro_batch: int = Field(8, gt=0, le=1 << 16)
    grad_accum: int = Field(1, gt=0, le=1 << 16)
    seed: int = 0
    attention: Literal["auto", "sdpa", "flex", "varlen"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 autocast on GPU, fp32 on CPU
    compile: bool = False
    loss_chunk_tokens: int = Field(0, ge=0)  # >0: chunked head + loss (large vocabularies on GPU); 0: off
    # A vocabulary taken from the data is padded up to a multiple of this (Megatron's
    # make-vocab-size-divisible-by): cl100k's 100,277 rows make the output head's matmuls miss the GPU's fast
    # tile paths. Padded ids never occur as inputs or targets. 1 = no padding; an explicit model.vocab_size
    # is used as written.
    vocab_multiple: int = Field(128, ge=1)
    log_every: int = Field(10, gt=0)
    ckpt_every: int = Field(0, ge=0)  # 0: only at the end
    ckpt_after: int = Field(0, ge=0)  # periodic checkpoints only from this step on (the last step is always saved)
    keep_checkpoints: int = Field(2, ge=1)
    eval_paths: dict[str, str] = {}  # name -> held-out shard dir/prefix, evaluated at the end (loss, bpb)
    eval_docs: int = Field(200, gt=0)
    threads: int = Field(0, ge=0, le=4096)  # torch CPU threads; 0 = leave torch's default
    # a step whose loss or gradient norm is NaN/inf: "stop" (default) ends the run with an error before the
    # weights are updated; "skip" drops that step's update and goes on (logged as a "skip" event). Either way
    # a checkpoint is written only from finite weights (cuvee/train/trainer.py)
    on_nonfinite: Literal["stop", "skip"] = "stop"

    @model_validator(mode="after")
    def _check_model(self):
        """The model spec and its fit with the data settings are checked now, not after the data is opened."""
        m = self.resolved_model(vocab_size=self.vocab_multiple)  # placeholder vocabulary: the data gives the real one
        if self.data.seq_len > m.max_seq_len:
            raise ValueError(f"data.seq_len {self.data.seq_len} exceeds model.max_seq_len {m.max_seq_len}")
        return self

    def resolved_out_dir(self) -> Path:
        return Path(self.out_dir.replace("${name}", self.name))

    def resolved_model(self, vocab_size: int | None = None) -> ModelConfig:
        """Expand a preset name (optionally ``{"preset": name, ...overrides}``) and fill vocab from the data."""
        m = self.model
        if isinstance(m, ModelConfig):
            return m
        if isinstance(m, str):
            m = {"preset": m}
        m = dict(m)
        preset = m.pop("preset", None)
        if preset is not None and preset not in MODEL_PRESETS:
            raise ValueError(f"unknown model preset {preset!r}" + did_you_mean(str(preset), sorted(MODEL_PRESETS)))
        base = dict(MODEL_PRESETS[preset]) if preset else {}
        base.update(m)
        if "vocab_size" not in base:
            if vocab_size is None:
                raise ValueError("model.vocab_size is not set and the data manifest gives none")
            base["vocab_size"] = -(-vocab_size // self.vocab_multiple) * self.vocab_multiple
        try:
            return ModelConfig(**base)
        except ValidationError as e:
            raise ValueError(describe(e, ModelConfig, "model.")) from None


def load_train_config(path: str | Path, overrides: dict | None = None) -> TrainConfig:
    """Read a YAML train config; relative data/eval paths are resolved against the current directory.

    Raises :class:`ConfigError` (one line naming the file and the key) for unreadable YAML, alias bombs,
    unknown keys and out-of-range or non-finite values."""
    raw = read_config_yaml(path)
    apply_overrides(raw, overrides or {}, path)
    return build_config(TrainConfig, raw, path)


read_config_yaml = read_config_file  # the kernel's; kept under the name train and search import


def build_config(cls, raw: dict, where: str | Path):
    """``cls(**raw)``, with a validation failure turned into one :class:`ConfigError` line."""
    return validate(cls, raw, where)


def apply_overrides(raw: dict, overrides: dict, where: str | Path) -> None:
    for key, value in overrides.items():
        keys = str(key).split(".")
        d = raw
        for k in keys[:-1]:
            d = d.setdefault(k, {})
            if not isinstance(d, dict):
                raise ConfigError(f"{where}: --set {key}: {k!r} is not a mapping of keys in this config")
        d[keys[-1]] = value
