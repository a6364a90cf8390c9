"""One strict config base and one formatter for every config a user writes (recipes, stage parameters, mixes,
train and anneal configs, mix searches, rephrase settings): unknown keys and bad values fail before any work, in
one line that names the file, the key path, the problem and, for a misspelling, the key probably meant.

pydantic's own report is a multi-line block per error and names union branches (``ModelConfig``, ``str``) the
user never wrote; :func:`problems` turns each error into ``key: problem`` with those left out, and
:func:`config_error` joins them (``file: a.b: problem; c: unknown key; did you mean 'd'?``), at most
``MAX_PROBLEMS`` of them and the rest counted.
"""

from __future__ import annotations

import difflib
import reprlib
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from cuvee.kernel.errors import UserError

MAX_VALUE_REPR = 200  # characters of an offending value shown in an error
MAX_PROBLEMS = 20  # problems listed in one error; the rest are counted
MAX_MESSAGE = 4000  # characters of a whole error message


class ConfigError(UserError, ValueError):
    """A config that cannot be used; the message is one line naming the file and the key."""


class StrictModel(BaseModel):
    """The base of every config section: an unknown key or a non-finite number is an error, never ignored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def did_you_mean(word: Any, options, parent: str = "", cutoff: float = 0.6) -> str:
    """``"; did you mean 'parent.x'?"`` for the closest of ``options`` to a misspelt ``word``, else ''. The one
    "did you mean" of every command (config keys, stage names, metadata keys, operators, styles)."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, [str(o) for o in options], n=2, cutoff=cutoff)
    return f"; did you mean {' or '.join(repr(parent + c) for c in close)}?" if close else ""


def short_repr(value: Any, limit: int = MAX_VALUE_REPR) -> str:
    """``repr`` of a value, bounded in time and size whatever the value (a huge list, a deep nest)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 6, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    try:
        text = r.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still reported
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (``X | None``, ``A | B``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    return []


def known_keys(model: type[BaseModel] | None, path: tuple) -> list[str]:
    """Field names valid at ``path`` inside ``model`` (list indexes and dict keys between two keys are skipped;
    empty when the path leaves the typed part)."""
    if model is None:
        return []
    current = [model]
    for key in path:
        inner = [m for c in current if str(key) in c.model_fields
                 for m in _models_in(c.model_fields[str(key)].annotation)]
        if inner:
            current = inner
        elif any(str(key) in c.model_fields for c in current):
            return []  # a field that is not a model (free keys): nothing to suggest
    return sorted({name for m in current for name in m.model_fields})


def _clean(loc: tuple) -> tuple:
    """An error location without the names of union branches (``ModelConfig``, ``str``, ``function-after[...]``),
    leaving the keys (and list positions) the user wrote."""
    return tuple(x for x in loc if not (isinstance(x, str) and (x[:1].isupper() or not x.isidentifier()
                                                                or x in ("str", "dict", "int", "float", "list",
                                                                         "bool", "none"))))


def _key(prefix: str, loc: tuple) -> str:
    parts = [prefix.rstrip(".")] if prefix else []
    for x in loc:
        if isinstance(x, int) and parts:
            parts[-1] += f"[{x}]"
        else:
            parts.append(str(x))
    return ".".join(parts) or "(top level)"


def problems(err: ValidationError, model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Each problem of ``err`` as ``key: what is wrong``; one value tried against each form of a union field is
    one problem ("must be A or B"), and every missing key is named in one problem."""
    errors = err.errors(include_url=False)
    by_loc: dict[tuple, list[dict]] = {}
    for e in errors:
        by_loc.setdefault(_clean(e["loc"]), []).append(e)
    out, missing = [], []
    for loc, group in by_loc.items():
        e = group[0]
        key, kind = _key(prefix, loc), e["type"]
        if kind == "missing":
            missing.append(repr(key))
        elif kind == "extra_forbidden":
            hint = did_you_mean(str(loc[-1]) if loc else "", known_keys(model, tuple(x for x in loc[:-1]
                                                                                    if not isinstance(x, int))))
            out.append(f"{key}: unknown key{hint}")
        elif len(group) > 1 and kind != "value_error":
            forms = " or ".join(dict.fromkeys(str(x["msg"]).replace("Input should be ", "") for x in group))
            out.append(f"{key}: must be {forms} (got {short_repr(e.get('input'), 60)})")
        elif kind == "finite_number":
            out.append(f"{key}: must be a finite number (got {short_repr(e.get('input'), 60)})")
        elif kind in ("value_error", "assertion_error"):
            msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            out.append(f"{key}: {msg}" if loc or prefix else msg)
        else:
            msg = str(e["msg"]).replace("Input should be", "must be")
            got = "" if isinstance(e.get("input"), dict) else f" (got {short_repr(e.get('input'), 60)})"
            out.append(f"{key}: {msg}{got}")
    if missing:
        out.insert(0, f"missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    return [" ".join(p.split()) for p in out]


def join_problems(lines: list[str], origin: str = "") -> str:
    """``origin: p1; p2; ...`` with at most MAX_PROBLEMS problems and MAX_MESSAGE characters, the rest counted."""
    shown, size = [], 0
    for line in lines:
        if len(shown) >= MAX_PROBLEMS or size + len(line) > MAX_MESSAGE:
            break
        shown.append(line)
        size += len(line) + 2
    text = "; ".join(shown)
    if len(shown) < len(lines):
        text += f" [and {len(lines) - len(shown)} more problem{'s' if len(lines) - len(shown) > 1 else ''}]"
    return f"{origin}: {text}" if origin else text


def config_error(err: ValidationError, model: type[BaseModel] | None, origin: str = "", prefix: str = "",
                 cls: type[ConfigError] = ConfigError) -> ConfigError:
    """The one-line :class:`ConfigError` (or ``cls``) for a failed validation of ``model`` read from ``origin``."""
    return cls(join_problems(problems(err, model, prefix), origin))


def describe(err: ValidationError, model: type[BaseModel] | None, prefix: str = "") -> str:
    """The problems of ``err`` as one line, without an origin (for messages that add their own)."""
    return join_problems(problems(err, model, prefix))


def read_config_file(path) -> dict:
    """A YAML config file as a mapping (through ``cuvee.yaml_safe``'s bounds); every failure is one ConfigError line."""
    from pathlib import Path

    from cuvee.yaml_safe import YamlLoadError, load_yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config: {getattr(e, 'strerror', None) or e}") from None
    try:
        raw = load_yaml(text, str(path))  # alias bombs and recursive aliases refused
    except YamlLoadError as e:
        raise ConfigError(" ".join(str(e).split())) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at top level, got {type(raw).__name__}")
    return raw


def validate(cls: type[BaseModel], raw: dict, origin, error: type[ConfigError] = ConfigError):
    """``cls(**raw)``, with a validation failure turned into one ``error`` line naming ``origin``."""
    try:
        return cls(**raw)
    except ValidationError as e:
        raise config_error(e, cls, str(origin), cls=error) from None
    except (TypeError, ValueError) as e:  # e.g. a non-string key at top level
        raise error(f"{origin}: {' '.join(str(e).split())}") from None
