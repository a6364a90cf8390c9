"""SEARCH.yaml: which sources may be mixed (with bounds), the proxy every mixture trains, the targets it is
judged on, how many mixtures, and the proof. Validated in full before anything is tokenized or trained.

Example (``mixes/search_demo.yaml``)::

    name: search_demo
    tokenizer: bytes256.tiktoken          # any mixer tokenizer; the search writes the pick as a mix YAML with it
    seed: 0
    mixtures: 12                          # N proxies; at least sources + 1 (the fit is under-determined below)
    sources:                              # as in a mix config, without weight; optional bounds
      - {name: articles, paths: data/curated/..., text_key: main_content, where: {page_type: article},
         min_weight: 0.05, max_weight: 0.9, max_epochs: 1}
    targets:                              # held-out text, decontaminated against every source before training
      - {name: docs, paths: ..., text_key: main_content, where: {...}, weight: 1.0, max_docs: 60}
    proxy: {train: configs/train/tiny.yaml, tokens: 40000}   # train config (model, optim, seq_len, batch)
    proof: {seeds: [0, 1, 2], tokens: 40000, current: mixes/demo.yaml}
    transfer: {top_k: 2, bottom_k: 2, tokens: 160000}        # optional: do the ranks hold at a larger budget?
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from cuvee.kernel.config import ConfigError, describe
from cuvee.mixer.config import NAME_PATTERN, SourceConfig, listify, plain_name, where_condition
from cuvee.mixer.tokenizers import TokenizerSpec
from cuvee.mixsearch.sampling import room_error
from cuvee.train.config import TrainConfig, _Strict, read_config_yaml
from cuvee.train.sequential import Spending


class SearchConfigError(ConfigError):
    """A search config that cannot run as written; one line naming the file and the key."""


class TextSet(_Strict):
    """Documents read like a mix source: pipeline outputs (JSONL/Parquet), a text key, metadata conditions."""

    name: str = Field(..., pattern=NAME_PATTERN)
    paths: list[str] = Field(..., min_length=1)
    text_key: str = "text"
    where: dict[str, Any] = Field(default_factory=dict)
    min_chars: int = Field(1, ge=0)

    _paths = field_validator("paths", mode="before")(listify)
    _where = field_validator("where")(where_condition)
    _name = field_validator("name")(plain_name)

    def as_mix_source(self, max_epochs: float = 1.0) -> SourceConfig:
        """The mixer's view of this set (weight 1: the weight is chosen per mixture, not here)."""
        return SourceConfig(name=self.name, paths=self.paths, weight=1.0, max_epochs=max_epochs,
                            where=self.where, text_key=self.text_key, min_chars=self.min_chars)


class SearchSource(TextSet):
    min_weight: float = Field(0.0, ge=0, le=1)
    max_weight: float = Field(1.0, ge=0, le=1)
    max_epochs: float = Field(1.0, gt=0, le=1e6)

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_weight > self.max_weight:
            raise ValueError(f"source '{self.name}': min_weight {self.min_weight:g} > max_weight {self.max_weight:g}")
        return self


class Target(TextSet):
    """Held-out text the proxies are scored on: pipeline outputs (``paths``), or the items of an
    lm-evaluation-harness task (``lm_eval``: a shipped task name or a task YAML with local data; each item's
    context and gold continuation is one document, cuvee/evaltasks/render.py)."""

    paths: list[str] = Field(default_factory=list)
    weight: float = Field(1.0, gt=0, le=1e6)
    max_docs: int = Field(200, gt=0, le=1_000_000)  # scored pool: the first max_docs documents, before decontamination
    max_doc_tokens: int = Field(2048, gt=1, le=1 << 30)  # each scored document's first tokens (bounds eval cost)
    lm_eval: str | None = Field(None, min_length=1)
    split: str | None = Field(None, min_length=1)  # lm_eval: the task's split (default: its test, else validation)
    limit: int | None = Field(None, gt=0, le=1_000_000)  # lm_eval: the task's first `limit` items (the pool)
    allow_task_code: bool = False  # lm_eval: run the task file's Python (!function); only for files you trust
    _task: dict | None = None  # lm_eval: the resolved task (its YAML and local data files), set when validated

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        """A misspelt key named with the key meant (the generic message cannot look inside the targets list)."""
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    from cuvee.kernel.config import did_you_mean

                    raise ValueError(f"target {data.get('name', '?')!r}: unknown key {key!r}"
                                     f"{did_you_mean(str(key), sorted(cls.model_fields))}")
        return data

    @model_validator(mode="after")
    def _kind(self):
        if self.lm_eval is None:
            extra = [k for k in ("split", "limit", "allow_task_code") if k in self.model_fields_set]
            if extra:
                raise ValueError(f"target '{self.name}': {', '.join(extra)} apply only to lm_eval targets")
            if not self.paths:
                raise ValueError(f"target '{self.name}': give paths (held-out documents) or lm_eval (a task)")
            return self
        given = [k for k in ("paths", "where", "text_key", "min_chars", "max_docs") if k in self.model_fields_set]
        if given:
            raise ValueError(f"target '{self.name}': lm_eval targets take their documents from the task; "
                             f"{', '.join(given)} do not apply (the pool size is limit)")
        from cuvee.evaltasks import EvalTaskError
        from cuvee.evaltasks.render import resolve_target

        try:
            self._task = resolve_target(self.lm_eval, self.split, self.allow_task_code)
        except EvalTaskError as e:
            raise ValueError(f"target '{self.name}': lm_eval {self.lm_eval!r}: {e}") from None
        return self

    @property
    def task(self) -> dict | None:
        """lm_eval: the resolved task (name, YAML, local data files, split); None for a target of documents."""
        return self._task

    @property
    def pool(self) -> int:
        """Documents read before decontamination: ``limit`` items of an lm_eval task, else ``max_docs``."""
        return self.limit or self.max_docs

    def as_mix_source(self, max_epochs: float = 1.0) -> SourceConfig:
        """For an lm_eval target, every file the task reads (its YAMLs, code and data: what the search folder is
        bound to); the documents themselves are rendered from the task when the target is tokenized (caches.py)."""
        if self.lm_eval is None:
            return super().as_mix_source(max_epochs)
        return SourceConfig(name=self.name, paths=self._task["files"], weight=1.0, max_epochs=max_epochs)


class ProxyConfig(_Strict):
    train: str | dict  # a train YAML path or its mapping; model, optim, data.seq_len, micro_batch, grad_accum used
    tokens: int = Field(..., gt=0, le=10**13)  # training tokens per proxy

    @field_validator("train")
    @classmethod
    def _train(cls, v):
        if isinstance(v, str) and not v.strip():
            raise ValueError("give a train config path or mapping")
        return v


class ProofConfig(_Strict):
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    tokens: int | None = Field(None, gt=0, le=10**13)  # per arm and seed; default: the proxy's tokens
    current: str | dict[str, float] | None = None  # the user's mix: a mix YAML (weights per source name) or weights
    # absolute, in the target's metric (bpb, or loss); no default - a fixed one would be as large as the
    # differences a search looks for - so None: never "no difference" (the verdict says to state one)
    equivalence_margin: float | None = Field(None, ge=0)
    alpha: float = Field(0.05, gt=0, lt=1)  # family-wise over all looks
    looks: int = Field(1, ge=1, le=100)  # planned proof seed sets (cuvee/train/sequential.py): seeds added later
    spending: Spending = "obrien_fleming"  # are the next look, tested at its own level; beyond `looks`: refused
    enabled: bool = True

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if len(v) < 2 or len(set(v)) != len(v):
            raise ValueError("seeds must hold at least 2 distinct integers (seed noise needs >= 2; 3+ recommended)")
        return v


class TransferConfig(_Strict):
    """The transfer check: the ``top_k`` best and ``bottom_k`` worst proxies (by the weighted target metric)
    trained again for ``tokens`` tokens (a larger budget), and the rank correlation between the two budgets."""

    top_k: int = Field(2, ge=1, le=10_000)
    bottom_k: int = Field(2, ge=1, le=10_000)
    tokens: int = Field(..., gt=0, le=10**13)


class SearchConfig(_Strict):
    name: str = Field(..., pattern=NAME_PATTERN)
    tokenizer: TokenizerSpec
    seed: int = 0
    mixtures: int = Field(..., gt=0, le=100_000)
    sources: list[SearchSource] = Field(..., min_length=2)
    targets: list[Target] = Field(..., min_length=1)
    proxy: ProxyConfig
    proof: ProofConfig = ProofConfig()
    transfer: TransferConfig | None = None
    concentration: float = Field(1.0, gt=0, le=1e4)  # Dirichlet concentration per source (see sampling.py)
    decontam_threshold: float = Field(0.8, gt=0, le=1)
    output_dir: str = "runs/mix_search/${name}"
    threads: int = Field(0, ge=0, le=4096)  # torch CPU threads; 0 = torch's default
    description: str = ""

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _tok(cls, v):
        return TokenizerSpec.parse(v) if isinstance(v, (str, TokenizerSpec)) else v

    @model_validator(mode="after")
    def _check(self):
        names = [s.name for s in self.sources] + [t.name for t in self.targets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source and target names must be distinct: {dupes} appear twice")
        lo = sum(s.min_weight for s in self.sources)
        hi = sum(s.max_weight for s in self.sources)
        if lo > 1 + 1e-9:
            raise ValueError(f"the sources' min_weight values sum to {lo:.4g} > 1: no mixture can meet them")
        if hi < 1 - 1e-9:
            raise ValueError(f"the sources' max_weight values sum to {hi:.4g} < 1: no mixture can reach 1")
        if self.mixtures < len(self.sources) + 1:
            raise ValueError(f"mixtures: {self.mixtures} is fewer than sources + 1 = {len(self.sources) + 1}: "
                             f"the fit would be under-determined")
        too_many = room_error(self.mixtures, [s.min_weight for s in self.sources], [s.max_weight for s in self.sources])
        if too_many:
            raise ValueError(too_many)
        if self.transfer is not None and self.transfer.top_k + self.transfer.bottom_k > self.mixtures:
            raise ValueError(f"transfer: top_k + bottom_k = {self.transfer.top_k + self.transfer.bottom_k} is more "
                             f"than the {self.mixtures} mixtures")
        if isinstance(self.proof.current, dict):
            known = {s.name for s in self.sources}
            extra = sorted(set(self.proof.current) - known)
            if extra:
                raise ValueError(f"proof.current names {extra}, not sources of this search ({sorted(known)})")
            if any(not math.isfinite(v) or v < 0 for v in self.proof.current.values()) or \
                    sum(self.proof.current.values()) <= 0:
                raise ValueError("proof.current weights must be finite, >= 0 and not all 0")
        return self

    def resolved_out_dir(self) -> Path:
        return Path(self.output_dir.replace("${name}", self.name))

    @property
    def proof_tokens(self) -> int:
        return self.proof.tokens or self.proxy.tokens


def _train_config(proxy: ProxyConfig, origin: str) -> TrainConfig:
    """The proxy's train config (data paths are the search's own blends, so any given are ignored)."""
    if isinstance(proxy.train, str):
        path = Path(proxy.train)
        if not path.exists() and not path.is_absolute():
            alt = Path(__file__).resolve().parents[2] / path  # bundled configs work from any directory
            path = alt if alt.exists() else path
        if not path.exists():
            raise SearchConfigError(f"{origin}: proxy.train: train config not found: {proxy.train}")
        raw = read_config_yaml(path)
        where = str(path)
    else:
        raw, where = dict(proxy.train), f"{origin}: proxy.train"
    raw = dict(raw)
    data = dict(raw.get("data") or {}) if isinstance(raw.get("data") or {}, dict) else raw.get("data")
    if isinstance(data, dict):
        data["paths"] = []
        raw["data"] = data
    raw.pop("eval_paths", None)
    try:
        return TrainConfig(**raw)
    except ValidationError as e:
        raise SearchConfigError(f"{where}: {describe(e, TrainConfig)}") from None
    except (TypeError, ValueError) as e:
        raise SearchConfigError(f"{where}: {' '.join(str(e).split())}") from None


def proxy_train_config(cfg: SearchConfig, origin: str = "search config") -> TrainConfig:
    return _train_config(cfg.proxy, origin)


def load_search_config(path: str | Path | dict) -> tuple[SearchConfig, TrainConfig]:
    """The validated search config and its proxy train config; every problem is one :class:`SearchConfigError`."""
    if isinstance(path, dict):
        raw, origin = dict(path), "<dict>"
    else:
        origin = str(path)
        if not Path(path).is_file():
            raise SearchConfigError(f"search config not found: {path}")
        try:
            raw = read_config_yaml(path)
        except ConfigError as e:
            raise SearchConfigError(str(e)) from None
        raw.setdefault("name", re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem))
    try:
        cfg = SearchConfig(**raw)
    except ValidationError as e:
        raise SearchConfigError(f"{origin}: {describe(e, SearchConfig)}") from None
    except (TypeError, ValueError) as e:
        raise SearchConfigError(f"{origin}: {' '.join(str(e).split())}") from None
    train = _train_config(cfg.proxy, origin)
    if isinstance(cfg.proof.current, str) and not Path(cfg.proof.current).exists():
        raise SearchConfigError(f"{origin}: proof.current: mix config not found: {cfg.proof.current}")
    return cfg, train


def current_weights(cfg: SearchConfig) -> dict[str, float] | None:
    """The user's current mix as weights per source name (a mix YAML's sources matched by name), or None."""
    cur = cfg.proof.current
    if cur is None:
        return None
    if isinstance(cur, dict):
        total = sum(cur.values())
        return {s.name: cur.get(s.name, 0.0) / total for s in cfg.sources}
    from cuvee.mixer.config import load_mix_config

    mix = load_mix_config(cur)
    weights = dict(zip([s.name for s in mix.sources], mix.weights))
    extra = sorted(set(weights) - {s.name for s in cfg.sources})
    if extra:
        raise SearchConfigError(f"proof.current {cur}: sources {extra} are not sources of this search")
    total = sum(weights.values())
    return {s.name: weights.get(s.name, 0.0) / total for s in cfg.sources}
