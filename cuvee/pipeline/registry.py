"""Stage registry: recipe names -> validated parameters -> datatrove pipeline steps.

A recipe names stages by string; each stage module registers a builder with a pydantic parameter
model (``extra="forbid"``), so an unknown key or a bad value fails while the recipe is validated,
before any work starts.

Stage modules are discovered by importing every module under ``STAGE_PACKAGES``; a module joins the
registry simply by calling :func:`register_stage` at import time. Keep heavy imports (torch,
transformers, fasttext) inside the builders or the steps so that validating a recipe stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from cuvee.kernel.config import StrictModel

STAGE_PACKAGES = (
    "cuvee.pipeline.core_stages",
    "cuvee.pipeline.stages",
    "cuvee.filters",
    "cuvee.dedup",
    "cuvee.classifiers",
)


class StageParams(StrictModel):
    """Base for every stage's parameters: the kernel's strict base (unknown keys and non-finite numbers are
    errors, not silently ignored), frozen because a built stage must not change under its plan."""

    model_config = ConfigDict(frozen=True)

    def metadata_fields(self) -> dict[str, str]:
        """Metadata keys this stage writes, with their Parquet types ("string", "double", "int64", "bool"):
        they become typed fields of the output's ``metadata`` struct (see ``cuvee.pipeline.writers``)."""
        return {}

    def required_metadata(self) -> dict[str, tuple[str, ...]]:
        """Metadata keys this stage reads, each with the Parquet types it accepts (empty: any). On crawl input
        the compiler requires an earlier stage to declare each one, so a typo fails before any work."""
        return {}

    writes_any_metadata: ClassVar[bool] = False  # True for the escape hatch: it may write keys it cannot declare


def _type_name(annotation: Any) -> str:
    """A readable type: ``int``, ``float | None``, ``list[str]``, ``'warc' | 'wet'``."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else _type_name(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def describe_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    """Every parameter of a stage model: name, type, required or default (as YAML would write it), description."""
    import json

    rows = []
    for name, info in model.model_fields.items():
        required = info.is_required()
        default = None
        if not required:
            value = info.get_default(call_default_factory=True)
            try:
                default = json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value)
            except TypeError:
                default = repr(value)
        rows.append({"name": name, "type": _type_name(info.annotation), "required": required, "default": default,
                     "description": info.description or ""})
    return rows


@dataclass
class BuildContext:
    """What a builder may need beyond its own parameters."""

    run_dir: Path
    work_dir: Path  # scratch space owned by this run (intermediate shards, dedup indexes)
    tasks: int
    stage_index: int
    stage_name: str
    recipe_name: str = "recipe"
    extra: dict[str, Any] = field(default_factory=dict)
    exclusions_dir: Path | None = None  # set when output.exclusions asks for dropped documents to be kept
    # (name, params) of the recipe's stages before this one: a consumer finds the stage whose files it reads
    # (semantic_dedup: the embed stage of its store) and refuses a recipe without it before any work
    earlier: tuple = ()

    def stage_dir(self, sub: str = "") -> Path:
        """A per-stage folder under work_dir, e.g. for a MinHash index."""
        p = self.work_dir / f"{self.stage_index:02d}_{self.stage_name}"
        return p / sub if sub else p

    def exclusion_writer(self):
        """A writer for the documents this stage's filters drop (``output.exclusions``), or None: builders
        pass it to each filter they construct, so the steps are finished when built."""
        if self.exclusions_dir is None:
            return None
        from cuvee.pipeline.writers import exclusion_writer

        return exclusion_writer(str(self.exclusions_dir / f"{self.stage_index:02d}.{self.stage_name}"))


@dataclass
class Phase:
    """A whole-corpus pass between two segments (e.g. MinHash buckets, clustering)."""

    name: str
    pipeline: list  # list[PipelineStep]
    tasks: int = 1
    workers: int | None = None


@dataclass
class Barrier:
    """Returned by builders of stages that must see every document before deciding (dedup).

    The compiler ends the current segment with ``before`` plus an intermediate writer, runs each
    ``phases`` executor in order (chained with datatrove's ``depends``), then starts the next segment
    by re-reading the intermediate shards (one file per task, same rank) followed by ``after``.
    Steps in ``before`` must yield every document they receive, in order.

    Steps declare how the compiler may regenerate their stream instead of copying the corpus at a cut, with
    class attributes: ``passes_through = True`` (documents leave unchanged: a recorder) and
    ``replays_exactly = True`` (a deterministic function of the input and of files already written: a dedup
    filter). A barrier whose ``before`` all pass through and whose ``after`` all replay exactly needs no copy.
    """

    before: list = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    after: list = field(default_factory=list)


Builder = Callable[[Any, BuildContext], "list | Barrier"]


@dataclass(frozen=True)
class StageSpec:
    name: str
    params: type[StageParams]
    build: Builder
    doc: str
    # (stats.json key, fn(params, stage_dir, counters) -> dict): a stage's own section of stats.json, one entry
    # per stage of the recipe, for results that counters cannot sum (e.g. distinct eval items found)
    report: tuple[str, Callable] | None = None


_STAGES: dict[str, StageSpec] = {}
_loaded = False


def register_stage(name: str, params: type[StageParams], report: tuple[str, Callable] | None = None):
    """Decorator: ``@register_stage("gopher_quality", GopherQualityParams)`` on a builder function."""

    def deco(fn: Builder) -> Builder:
        if name in _STAGES and _STAGES[name].build is not fn:
            raise ValueError(f"stage {name!r} registered twice ({_STAGES[name].build.__module__} and {fn.__module__})")
        _STAGES[name] = StageSpec(name, params, fn, (fn.__doc__ or "").strip(), report)
        return fn

    return deco


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for pkg_name in STAGE_PACKAGES:
        try:
            pkg = importlib.import_module(pkg_name)
        except ModuleNotFoundError as e:
            if e.name == pkg_name:
                continue
            raise
        for mod in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=pkg_name + "."):
            importlib.import_module(mod.name)
    _loaded = True


def get_stage(name: str) -> StageSpec:
    _load_all()
    if name not in _STAGES:
        raise KeyError(name)
    return _STAGES[name]


def all_stages() -> dict[str, StageSpec]:
    _load_all()
    return dict(sorted(_STAGES.items()))
