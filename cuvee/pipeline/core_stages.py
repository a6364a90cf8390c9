"""Generic stages every recipe can use: length and sampling filters, and any datatrove step by import path."""

from __future__ import annotations

import importlib
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field, field_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage


class LengthParams(StageParams):
    min_chars: int = Field(0, ge=0)
    max_chars: int | None = Field(None, gt=0)

    @field_validator("max_chars")
    @classmethod
    def _max_not_below_min(cls, v, info):
        lo = info.data.get("min_chars")
        if v is not None and lo is not None and v < lo:
            raise ValueError(f"max_chars ({v}) must be at least min_chars ({lo})")
        return v


class LengthFilter(BaseFilter):
    name = "📏 length"

    def __init__(self, min_chars: int, max_chars: int | None, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.min_chars, self.max_chars = min_chars, max_chars

    def filter(self, doc: Document):
        n = len(doc.text)
        if n < self.min_chars:
            return False, "too_short"
        if self.max_chars is not None and n > self.max_chars:
            return False, "too_long"
        return True


@register_stage("length", LengthParams)
def build_length(p: LengthParams, ctx: BuildContext):
    """Drop documents shorter or longer than a number of characters."""
    return [LengthFilter(p.min_chars, p.max_chars, ctx.exclusion_writer())]


class SampleParams(StageParams):
    rate: float = Field(gt=0, le=1)
    seed: int = 0


class HashSampler(BaseFilter):
    """Keeps a document iff a hash of (seed, id) falls under the rate: same documents on every rerun and any task count."""

    name = "🎲 sample"

    def __init__(self, rate: float, seed: int, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.rate, self.seed = rate, seed

    def filter(self, doc: Document):
        import xxhash

        h = xxhash.xxh64_intdigest(f"{self.seed}:{doc.id}") / 2**64
        return True if h < self.rate else (False, "sampled_out")


@register_stage("sample", SampleParams)
def build_sample(p: SampleParams, ctx: BuildContext):
    """Deterministically keep a fraction of documents (by id hash)."""
    return [HashSampler(p.rate, p.seed, ctx.exclusion_writer())]


class DatatroveParams(StageParams):
    step: str = Field(description="import path of a datatrove PipelineStep, e.g. datatrove.pipeline.filters.LambdaFilter")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    writes_any_metadata = True  # a datatrove step may add any metadata key

    @field_validator("step")
    @classmethod
    def _importable(cls, v: str) -> str:
        mod, _, attr = v.rpartition(".")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError, ValueError):
            raise ValueError(f"cannot import {v!r}") from None
        from datatrove.pipeline.base import PipelineStep

        if not (isinstance(obj, type) and issubclass(obj, PipelineStep)):
            raise ValueError(f"{v!r} is not a datatrove PipelineStep class")
        return v


@register_stage("datatrove", DatatroveParams)
def build_datatrove(p: DatatroveParams, ctx: BuildContext):
    """Any datatrove step by import path, with keyword arguments (the escape hatch to its ecosystem)."""
    import inspect

    mod, _, attr = p.step.rpartition(".")
    cls = getattr(importlib.import_module(mod), attr)
    kwargs = dict(p.kwargs)
    writer = ctx.exclusion_writer()
    if writer is not None and issubclass(cls, BaseFilter) and "exclusion_writer" in inspect.signature(cls).parameters:
        kwargs.setdefault("exclusion_writer", writer)
    return [cls(**kwargs)]
