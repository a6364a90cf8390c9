"""An lm-eval task YAML constructed as lm-eval's own loader (``lm_eval.tasks._yaml_loader.load_yaml``) would
construct it, without running anything, so the task-code check sees exactly what lm-eval would execute.

lm-eval builds each file with a YAML loader whose ``!function mod.f`` tag imports ``mod.py`` next to that file
(or an importable module), then follows the top-level ``include:`` of the *constructed* mapping (a path or a
list, relative to the including file, each file read once: a second visit is an "include cycle"), drops
``task_list`` from each included config, and lets the including file's keys win. YAML merge keys (``<<: *a``)
and anchors are resolved by construction, so an ``include`` or a ``!function`` can arrive through them. Here the
same construction runs through :mod:`cuvee.yaml_safe` (size, alias and depth bounds), ``!function`` builds an
inert :class:`FunctionRef`, and any other tag is refused. Every reference of every file read is collected (any
key, any depth, lists; lm-eval imports each while reading, even one a later key overrides), and
:func:`resolve_functions` imports those of the final config (lm-eval's own importer) only when code is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuvee.evaltasks.errors import EvalTaskError
from cuvee.yaml_safe import YamlLoadError, load_yaml

MAX_TASK_BYTES = 1 << 20  # one task YAML
MAX_INCLUDE_DEPTH = 16  # include chains; every file is read once at most, as in lm-eval


@dataclass(frozen=True)
class FunctionRef:
    """``!function spec`` written in ``yaml_file``: what lm-eval would import from ``base_dir``; nothing imported."""

    spec: str
    base_dir: Path
    yaml_file: Path

    @property
    def python_file(self) -> Path | None:
        """The file next to the YAML that lm-eval would load first; None: an importable module (or nothing)."""
        module = self.spec.rpartition(".")[0]
        local = (self.base_dir / f"{module.replace('.', '/')}.py").resolve() if module else None
        return local if local is not None and local.exists() else None

    def describe(self) -> str:
        where = self.python_file or f"module {self.spec.rpartition('.')[0] or self.spec!r}"
        return f"{self.yaml_file} runs Python from {where} (!function {self.spec})"


def read_one(path: Path) -> Any:
    """One task YAML, constructed under cuvee.yaml_safe's bounds, ``!function`` as :class:`FunctionRef`."""
    try:
        if path.stat().st_size > MAX_TASK_BYTES:
            raise EvalTaskError(f"task file {path}: larger than {MAX_TASK_BYTES} bytes; refused")
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EvalTaskError(f"task file {path}: not UTF-8 (byte {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise EvalTaskError(f"task file {path}: cannot read it: {e.strerror or e}") from None
    try:
        return load_yaml(text, f"task file {path}", tags={"!function": lambda spec: FunctionRef(spec, path.parent, path)})
    except YamlLoadError as e:
        raise EvalTaskError(str(e)) from None


def construct(path: str | Path) -> tuple[dict, list[Path], list[FunctionRef]]:
    """The task config as lm-eval's ``load_yaml(path, recursive=True)`` builds it (references inert), every YAML
    file read for it (the task's own first), and every reference in those files: lm-eval's loader imports each one
    while it reads the file, also those a later key overrides, so all of them count as the task's code."""
    read: list[Path] = []
    refs: list[FunctionRef] = []
    return _construct(Path(path).expanduser().resolve(), read, refs, ()), read, refs


def _construct(path: Path, read: list[Path], refs: list[FunctionRef], chain: tuple[Path, ...]) -> dict:
    if path in read:
        raise EvalTaskError(f"task file {path}: included twice ({' -> '.join(map(str, (*chain, path)))}); an include "
                            f"cycle, or a file included from two places, which lm-eval refuses too")
    if len(chain) > MAX_INCLUDE_DEPTH:
        raise EvalTaskError(f"task file {chain[0]}: includes nest deeper than {MAX_INCLUDE_DEPTH} files")
    read.append(path)
    cfg = read_one(path)
    if not isinstance(cfg, dict):
        raise EvalTaskError(f"task file {path}: expected a mapping of task settings, got {type(cfg).__name__}")
    refs.extend(function_refs(cfg))
    if "include" not in cfg:
        return cfg
    includes = cfg.pop("include")
    merged: dict = {}
    for inc in includes if isinstance(includes, list) else [includes]:
        if not isinstance(inc, str) or not inc:
            raise EvalTaskError(f"task file {path}: include must be a file path or a list of them, got {inc!r}")
        inc_path = (Path(inc) if Path(inc).is_absolute() else path.parent / inc).expanduser().resolve()
        if not inc_path.is_file():
            raise EvalTaskError(f"task file {path}: its include {inc!r} ({inc_path}) not found")
        inc_cfg = _construct(inc_path, read, refs, (*chain, path))
        inc_cfg.pop("task_list", None)  # lm-eval: task_list defines the included file's own tasks only
        merged.update(inc_cfg)
    merged.update(cfg)  # the including file's keys win
    return merged


def function_refs(value: Any) -> list[FunctionRef]:
    """Every :class:`FunctionRef` in a constructed config: any key or value, any depth, lists included."""
    found: list[FunctionRef] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, FunctionRef):
            found.append(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return found


def resolve_functions(value: Any, importer: Callable[[str, Path], Any]) -> Any:
    """A copy of ``value`` with every :class:`FunctionRef` replaced by ``importer(spec, base_dir)`` (this runs the
    task's code: call it only when the task's code is allowed)."""
    if isinstance(value, FunctionRef):
        return importer(value.spec, value.base_dir)
    if isinstance(value, dict):
        return {resolve_functions(k, importer): resolve_functions(v, importer) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_functions(v, importer) for v in value]
    return value
