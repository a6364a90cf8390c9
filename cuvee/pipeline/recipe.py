"""Recipe YAML: a declarative pipeline, validated completely before any work starts.

A recipe names its input, an ordered list of stages (each ``{stage: NAME, **params}``), its output
and an executor. Every section is a pydantic model with ``extra="forbid"``; stage parameters are
validated by the model the stage registered. Errors name the file, the key path and what was wrong.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cuvee.kernel.config import ConfigError, StrictModel, did_you_mean, join_problems, problems, short_repr
from cuvee.pipeline.crawl import CommonCrawlInput
from cuvee.pipeline.registry import StageParams, get_stage
from cuvee.yaml_safe import YamlLoadError, load_yaml


class RecipeError(ConfigError):
    """A recipe that cannot run; the message says where and why."""


_Strict = StrictModel


class InputConfig(_Strict):
    paths: list[str] | None = Field(None, description="files, folders, globs or fsspec URLs (or use common_crawl)")
    common_crawl: CommonCrawlInput | None = Field(
        None, description="a Common Crawl snapshot: {snapshot, kind, files, seed, source|base_url|paths_file}")
    format: Literal["auto", "warc", "arc", "wet", "jsonl", "parquet"] = "auto"
    limit: int = Field(-1, ge=-1, description="max records per task, -1 = all (for quick looks)")
    text_key: str = Field("text", min_length=1, max_length=200,
                          description="jsonl/parquet input: the field holding each document's text")
    id_key: str = Field("id", min_length=1, max_length=200,
                        description="jsonl/parquet input: the field holding each document's id (absent: file/row)")
    max_record_bytes: int = Field(10_000_000, gt=0, description="records larger than this are skipped and counted")
    retries: int = Field(5, ge=0, le=30, description="remote inputs: retries of a failed open or range read")
    backoff_s: float = Field(1.0, ge=0, le=600, description="remote inputs: first retry delay, doubled per retry")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="remote inputs: seconds a connect or a read may stall "
                             "before that attempt fails (then retried; HTTP(S) and S3)")

    @field_validator("paths", mode="before")
    @classmethod
    def _one_path(cls, v):
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_source(self):
        if (self.paths is None) == (self.common_crawl is None):
            raise ValueError("give exactly one of input.paths (files, folders, globs, URLs) and "
                             "input.common_crawl (a snapshot sample)")
        if self.paths is not None and not self.paths:
            raise ValueError("input.paths must name at least one path")
        if self.common_crawl is not None and self.format not in ("auto", self.common_crawl.kind):
            raise ValueError(f"input.format {self.format!r} contradicts common_crawl.kind {self.common_crawl.kind!r}")
        if (self.text_key, self.id_key) != ("text", "id") and self.format not in ("jsonl", "parquet"):
            raise ValueError("input.text_key and input.id_key apply to format: jsonl or parquet (crawl archives "
                             "have no fields to choose)")
        return self

    def reader_format(self) -> str:
        return self.common_crawl.kind if self.common_crawl is not None else self.format


class OutputConfig(_Strict):
    path: str | None = Field(None, description="default: <run_dir>/output")
    format: Literal["parquet", "jsonl"] = "parquet"
    route_by: str | None = Field(None, description="metadata key to route documents by, e.g. 'language'")
    exclusions: bool = Field(False, description="also write dropped documents per stage, for inspection")


class LocalExecutorConfig(_Strict):
    kind: Literal["local"] = "local"
    tasks: int = Field(2, ge=1)
    workers: int = Field(-1, ge=-1, description="-1 = as many as tasks")


class SlurmExecutorConfig(_Strict):
    kind: Literal["slurm"]
    tasks: int = Field(ge=1)
    partition: str
    time: str = "04:00:00"
    cpus_per_task: int = Field(1, ge=1)
    mem_per_cpu_gb: int = Field(2, ge=1, description="whole GB: sbatch rejects fractions")
    workers: int = Field(-1, ge=-1, description="array concurrency, -1 = unlimited")
    job_name: str | None = None
    qos: str | None = None
    sbatch_args: dict[str, str] = Field(default_factory=dict)
    env_command: str | None = Field(None, description="shell line run before each task, e.g. 'source .venv/bin/activate'")


class RayExecutorConfig(_Strict):
    kind: Literal["ray"]
    address: str | None = Field(None, description="Ray cluster address; default: start a local Ray")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a locally started Ray")
    tasks: int = Field(ge=1)
    workers: int = Field(-1, ge=-1)
    cpus_per_task: int = Field(1, ge=1)
    mem_per_cpu_gb: float = Field(2, gt=0)


ExecutorConfig = LocalExecutorConfig | SlurmExecutorConfig | RayExecutorConfig


class StageEntry(BaseModel):
    """One validated stage: its registered name and its parameter model instance."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    name: str
    params: StageParams


class Recipe(_Strict):
    name: str
    run_dir: str | None = Field(None, description="stats, logs and scratch; default runs/<name>")
    input: InputConfig
    stages: list[Any] = Field(default_factory=list)
    output: OutputConfig = Field(default_factory=OutputConfig)
    executor: ExecutorConfig = Field(default_factory=LocalExecutorConfig, discriminator="kind")
    logging_dir: str | None = Field(None, description="datatrove logs; default <run_dir>/logs")

    # filled by load_recipe after per-stage validation
    _stages: list[StageEntry] = []
    _source: str = ""

    @property
    def stage_entries(self) -> list[StageEntry]:
        return self._stages

    @property
    def source(self) -> str:
        return self._source

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or f"runs/{self.name}")

    def resolved_output(self) -> str:
        return self.output.path or str(self.resolved_run_dir() / "output")

    def resolved_logging_dir(self) -> Path:
        return Path(self.logging_dir) if self.logging_dir else self.resolved_run_dir() / "logs"

    def to_dict(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        d["stages"] = [{"stage": s.name, **s.params.model_dump(mode="json")} for s in self._stages]
        return d

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def unknown_stage(name: Any) -> str:
    """The message for a stage name that is not registered: the closest names, not all of them."""
    from cuvee.pipeline.registry import all_stages

    hint = did_you_mean(name, all_stages())
    return f"unknown stage {short_repr(name, 80)}{hint or '; `cuvee stages` lists every stage'}"


def _min_max_problems(params: BaseModel, prefix: str) -> list[str]:
    """Backstop for every stage model: a ``min_X`` above its ``max_X`` (both set) is an error."""
    out = []
    for name in type(params).model_fields:
        if not name.startswith("min_"):
            continue
        other = "max_" + name[4:]
        lo, hi = getattr(params, name, None), getattr(params, other, None)
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
            out.append(f"{prefix}.{other}: must be at least {name} ({name}={lo}, {other}={hi})")
    return out


def parse_recipe(data: Any, where: str = "<recipe>") -> Recipe:
    """Validate a recipe mapping (already parsed YAML); raise RecipeError listing every problem."""
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a recipe must be a mapping, got {type(data).__name__}")
    found: list[str] = []
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(join_problems(problems(e, Recipe), where)) from None

    entries: list[StageEntry] = []
    for i, raw in enumerate(recipe.stages):
        key = f"stages[{i}]"
        if not isinstance(raw, dict) or "stage" not in raw:
            found.append(f"{key}: each stage is a mapping with a 'stage' key naming it, got {short_repr(raw)}")
            continue
        name = raw["stage"]
        try:
            spec = get_stage(name)
        except KeyError:
            found.append(f"{key}.stage: {unknown_stage(name)}")
            continue
        params = {k: v for k, v in raw.items() if k != "stage"}
        try:
            validated = spec.params.model_validate(params)
        except ValidationError as e:
            found.extend(problems(e, spec.params, f"{key}({name})"))
            continue
        found.extend(_min_max_problems(validated, f"{key}({name})"))
        entries.append(StageEntry(name=name, params=validated))
    if found:
        raise RecipeError(join_problems(found, where))
    recipe._stages = entries
    return recipe


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read and validate a recipe file. ``overrides`` are dotted keys, e.g. {"executor.tasks": 4}."""
    path = Path(path)
    if not path.exists():
        raise RecipeError(f"{path}: no such recipe file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RecipeError(f"{path}: cannot read the recipe: {e}") from None
    try:
        data = load_yaml(text, str(path))
    except YamlLoadError as e:
        raise RecipeError(str(e)) from None
    for dotted, value in (overrides or {}).items() if isinstance(data, dict) else ():
        node = data
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    recipe = parse_recipe(data, str(path))
    recipe._source = text
    return recipe
