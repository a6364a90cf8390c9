"""Mix configs (``mixes/*.yaml``): sources, token weights, epochs caps, seed, tokenizer, shard size.

Validated up front with pydantic (``extra="forbid"``) so a typo fails before any tokenization, with a message
naming the file and the key.

A source may instead have ``selections``: named ``where`` conditions on the documents' metadata, each with its
own weight and ``max_epochs`` (e.g. quality buckets 15-19 four times, 10-14 once, the rest left out). Each
selection is a source of the blend (``<source>.<selection>``, :meth:`MixConfig.blend_config`), so the exact
blend rule, epochs planning, manifest and summary treat it like any source; the selections of one source must
provably exclude each other (``cuvee/mixer/where.py``), so no document can be drawn by two of them.

A source may ``rehydrate``: weight its documents by the size of the duplicate cluster each was kept for
(``cuvee/mixer/rehydrate.py``: FineWeb-2's rule or a table), its selections alike.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cuvee.kernel.config import ConfigError, StrictModel, config_error
from cuvee.mixer.rehydrate import RehydrateConfig
from cuvee.mixer.tokenizers import TokenizerSpec
from cuvee.mixer.where import OPERATORS, check_where, disjoint

__all__ = ["OPERATORS", "MixConfig", "MixConfigError", "SelectionConfig", "SourceConfig", "load_mix_config"]
NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"


def listify(v):
    """``paths: one/file.jsonl`` means a list of one (a ``mode="before"`` validator)."""
    return [v] if isinstance(v, str) else v


def where_condition(v: dict) -> dict:
    """A ``where:`` mapping checked by the mixer's rules (wrapped: a validator's second argument is pydantic's)."""
    return check_where(v)


def plain_name(v: str) -> str:
    """A name that becomes a file or folder name (``out/mix/<name>``, ``<name>_00000.bin``): no ``.``/``..``,
    no hidden names, nothing that could step out of the folder it is joined to."""
    if v.startswith("."):
        raise ValueError(f"name {v!r} must not start with '.' (it names files and the output folder)")
    return v


class MixConfigError(ConfigError):
    """A mix config that cannot be run as written (message names the file and key)."""


class _Frozen(StrictModel):
    model_config = ConfigDict(frozen=True)


def _positive_weight(v: float | None) -> float | None:
    if v is not None and (not math.isfinite(v) or v <= 0):
        raise ValueError(f"weight must be a positive finite number, got {v}")
    return v


class SelectionConfig(_Frozen):
    """Part of a source chosen by metadata, blended as a source of its own."""


    name: str = Field(..., pattern=NAME_PATTERN)
    where: dict[str, Any] = Field(..., description="metadata conditions, all must hold (with the source's where)")
    weight: float = Field(..., description="share of the target, in tokens (like a source's weight)")
    max_epochs: float = Field(1.0, gt=0, description="how often this selection may be repeated to meet its weight")

    _name = field_validator("name")(plain_name)
    _weight = field_validator("weight")(_positive_weight)

    _where = field_validator("where")(where_condition)


class SourceConfig(_Frozen):

    name: str = Field(..., pattern=NAME_PATTERN)
    paths: list[str] = Field(..., min_length=1, description="files, folders or globs of pipeline outputs")
    weight: float | None = Field(None, description="share of the target, in tokens (not with selections)")
    max_epochs: float = Field(1.0, gt=0, description="how often the source may be repeated to meet its weight")
    where: dict[str, Any] = Field(default_factory=dict, description="metadata conditions, all must hold")
    selections: list[SelectionConfig] = Field(default_factory=list, description="parts of the source chosen by "
                                              "metadata, each with its own weight and max_epochs (instead of weight)")
    text_key: str = Field("text", description="field holding the text (e.g. main_content)")
    min_chars: int = Field(1, ge=0, description="documents with fewer characters are counted and skipped")
    rehydrate: RehydrateConfig | None = Field(None, description="weight documents by their duplicate cluster's size "
                                              "(rule: fineweb2, or a table {cluster-size range: weight})")

    _name = field_validator("name")(plain_name)
    _weight = field_validator("weight")(_positive_weight)

    _paths = field_validator("paths", mode="before")(listify)

    _where = field_validator("where")(where_condition)

    @model_validator(mode="after")
    def _weight_or_selections(self):
        if not self.selections:
            if self.weight is None:
                raise ValueError(f"source '{self.name}': give weight (or selections, each with its own weight)")
            return self
        if self.weight is not None or "max_epochs" in self.model_fields_set:
            raise ValueError(f"source '{self.name}': with selections, weight and max_epochs go on each selection")
        names = [sel.name for sel in self.selections]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source '{self.name}': duplicate selection names {dupes}")
        for sel in self.selections:
            both = sorted(sel.where.keys() & self.where.keys())
            if both:
                raise ValueError(f"source '{self.name}': selection '{sel.name}' and the source's where both set {both}; "
                                 f"give each key in one place")
        for i, a in enumerate(self.selections):
            for b in self.selections[i + 1:]:
                if not disjoint(a.where, b.where):
                    raise ValueError(
                        f"source '{self.name}': selections '{a.name}' and '{b.name}' may select the same document "
                        f"(no key on which their where conditions exclude each other); make them exclusive, e.g. "
                        f"quality_bucket {{gte: 15}} and {{gte: 10, lt: 15}}")
        return self

    def blend_sources(self) -> list[SourceConfig]:
        """This source as the blend sees it: itself, or one plain source per selection (``<source>.<selection>``,
        the source's where and the selection's where together)."""
        if not self.selections:
            return [self]
        base = self.model_dump(exclude={"name", "weight", "max_epochs", "where", "selections"})
        return [SourceConfig(**base, name=f"{self.name}.{sel.name}", weight=sel.weight, max_epochs=sel.max_epochs,
                             where={**self.where, **sel.where}) for sel in self.selections]


class MixConfig(_Frozen):

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
    chosen_by: dict[str, Any] | None = Field(None, description="written by `cuvee mix search`: how the weights were "
                                             "chosen (fits, proof verdicts); shown by `cuvee card`, never executed")

    _name = field_validator("name")(plain_name)

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
        units = [u for s in self.sources for u in s.blend_sources()]
        names = [u.name for u in units]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source and selection names {dupes} meet twice (a selection is named <source>.<selection>)")
        total = sum(u.weight for u in units)
        detail = ", ".join(f"{u.name}={u.weight:g}" for u in units)
        if not math.isfinite(total):
            raise ValueError(f"source weights sum to {total:g} ({detail}); use weights of ordinary size, "
                             f"e.g. shares that sum to 1")
        vanishing = [u.name for u in units if u.weight / total == 0.0]
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
        """Share of each source in ``sources`` (a source with selections: the sum of its selections' shares)."""
        per_source = [sum(u.weight for u in s.blend_sources()) for s in self.sources]
        total = sum(per_source)
        return [w / total for w in per_source]

    def blend_config(self) -> MixConfig:
        """The config the blend runs: every selection as a source of its own (``<source>.<selection>``)."""
        if not any(s.selections for s in self.sources):
            return self
        return self.model_copy(update={"sources": [u for s in self.sources for u in s.blend_sources()]})

    def selection_origins(self) -> list[tuple[str, str] | None]:
        """For each source of :meth:`blend_config`: (source, selection) where it is a selection, else None."""
        return [(s.name, sel.name) if s.selections else None for s in self.sources for sel in (s.selections or [None])]

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


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
        raise config_error(e, MixConfig, f"invalid mix config {origin}", cls=MixConfigError) from None
