"""Mix configs (``mixes/*.yaml``): sources, token weights, epochs caps, seed, tokenizer, shard size.

Validated up front with pydantic (``extra="forbid"``) so a typo fails before any tokenization, with a message
naming the file and the key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cuvee.mixer.tokenizers import TokenizerSpec

OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not_in", "exists")
NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"


def _plain_name(v: str) -> str:
    """A name that becomes a file or folder name (``out/mix/<name>``, ``<name>_00000.bin``): no ``.``/``..``,
    no hidden names, nothing that could step out of the folder it is joined to."""
    if v.startswith("."):
        raise ValueError(f"name {v!r} must not start with '.' (it names files and the output folder)")
    return v


class MixConfigError(ValueError):
    """A mix config that cannot be run as written (message names the file and key)."""


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=NAME_PATTERN)
    paths: list[str] = Field(..., min_length=1, description="files, folders or globs of pipeline outputs")
    weight: float = Field(..., description="share of the target, in tokens")
    max_epochs: float = Field(1.0, gt=0, description="how often the source may be repeated to meet its weight")
    where: dict[str, Any] = Field(default_factory=dict, description="metadata conditions, all must hold")
    text_key: str = Field("text", description="field holding the text (e.g. main_content)")
    min_chars: int = Field(1, ge=0, description="documents with fewer characters are counted and skipped")

    _name = field_validator("name")(_plain_name)

    @field_validator("paths", mode="before")
    @classmethod
    def _listify(cls, v):
        return [v] if isinstance(v, str) else v

    @field_validator("weight")
    @classmethod
    def _weight(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"weight must be a positive finite number, got {v}")
        return v

    @field_validator("where")
    @classmethod
    def _where(cls, v: dict) -> dict:
        for key, cond in v.items():
            if isinstance(cond, dict):
                bad = [op for op in cond if op not in OPERATORS]
                if bad:
                    raise ValueError(f"where.{key}: unknown operator(s) {bad}; use one of {list(OPERATORS)}")
                for op in ("in", "not_in"):
                    if op in cond and not isinstance(cond[op], list):
                        raise ValueError(f"where.{key}.{op} needs a list")
        return v


class MixConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=NAME_PATTERN)
    target_tokens: int = Field(..., gt=0)
    seed: int = 1234
    tokenizer: TokenizerSpec
    sources: list[SourceConfig] = Field(..., min_length=1)
    shard_tokens: int = Field(100_000_000, gt=0, description="a shard is closed once it holds this many tokens")
    normalize_weights: bool = Field(False, description="rescale weights to sum 1 instead of requiring it")
    output_dir: str | None = Field(None, description="default: out/mix/<name>")
    batch_size: int = Field(512, gt=0, description="documents per tokenizer batch")
    threads: int | None = Field(None, gt=0, description="tokenizer threads (default: all cores)")
    description: str = ""

    _name = field_validator("name")(_plain_name)

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _tok(cls, v):
        return TokenizerSpec.parse(v) if isinstance(v, (str, TokenizerSpec)) else v

    @model_validator(mode="after")
    def _weights(self):
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate source names {dupes}")
        total = sum(s.weight for s in self.sources)
        detail = ", ".join(f"{s.name}={s.weight:g}" for s in self.sources)
        if not math.isfinite(total):
            raise ValueError(f"source weights sum to {total:g} ({detail}); use weights of ordinary size, "
                             f"e.g. shares that sum to 1")
        vanishing = [s.name for s in self.sources if s.weight / total == 0.0]
        if vanishing:
            raise ValueError(f"source weight(s) of {vanishing} are too small beside the others to get any share "
                             f"({detail})")
        if not self.normalize_weights and abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"source weights must sum to 1 (got {total:.6g}: {detail}); fix them or set normalize_weights: true"
            )
        return self

    @property
    def weights(self) -> list[float]:
        total = sum(s.weight for s in self.sources)
        return [s.weight / total for s in self.sources]

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def _format_error(err: ValidationError, origin: str) -> str:
    """One line for one problem, else a header and a line per problem."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        elif e["type"] == "string_pattern_mismatch":
            msg = f"{e['input']!r}: use only letters, digits, '_', '.' and '-' (it names files and folders)"
        lines.append(f"{loc}: {msg}")
    if len(lines) == 1:
        return f"invalid mix config {origin}: {lines[0]}"
    return "\n  ".join([f"invalid mix config {origin}:", *lines])


def load_mix_config(config: str | Path | dict | MixConfig) -> MixConfig:
    """Parse and validate a mix config from a YAML path, a dict or an existing MixConfig."""
    if isinstance(config, MixConfig):
        return config
    origin = "<dict>"
    if isinstance(config, (str, Path)):
        origin = str(config)
        path = Path(config)
        if not path.exists():
            raise MixConfigError(f"mix config not found: {config}")
        try:
            from cuvee.yaml_safe import YamlLoadError, load_yaml

            data = load_yaml(path.read_text(), origin)
        except YamlLoadError as e:  # its message starts with the file name
            raise MixConfigError(f"invalid mix config {e}") from None
        if not isinstance(data, dict):
            raise MixConfigError(f"invalid mix config {origin}: expected a mapping at the top level")
        data.setdefault("name", re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem))
    else:
        data = dict(config)
    try:
        return MixConfig.model_validate(data)
    except ValidationError as e:
        raise MixConfigError(_format_error(e, origin)) from None
