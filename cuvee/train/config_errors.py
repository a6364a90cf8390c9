"""One-line messages for invalid train and anneal configs: the key, what is wrong, and "did you mean".

pydantic's own report is a multi-line block per error; a user who typed ``optim.lrr`` or ``seq_len: 0``
needs one line naming the key and, for a misspelling, the key that was probably meant.
"""

from __future__ import annotations

import difflib
import types
import typing

from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A train or anneal config that cannot be used; the message is one line naming the key."""


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (``X | None``, ``X | str | dict`` ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    return []


def _known_keys(model: type[BaseModel], path: tuple) -> list[str]:
    """Field names valid at ``path`` inside ``model`` (empty when the path leaves the typed part)."""
    current = [model]
    for key in path:
        nxt = []
        for m in current:
            field = m.model_fields.get(str(key))
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        current = nxt
    return sorted({name for m in current for name in m.model_fields})


def did_you_mean(word: str, known: list[str], parent: str = "") -> str:
    """`` (did you mean 'optim.lr'?)`` for a close match, else the known names (if any)."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return (f" (did you mean {parent + close[0]!r}?)" if close
            else f"; known keys{' under ' + parent.rstrip('.') if parent else ''}: {', '.join(known)}" if known else "")


def _clean(loc: tuple) -> tuple:
    """A pydantic error location without the names of union branches (``ModelConfig``, ``str``,
    ``function-after[...]``), leaving the keys the user wrote."""
    return tuple(x for x in loc if not (isinstance(x, str) and (x[:1].isupper() or not x.isidentifier()
                                                                or x in ("str", "dict", "int", "float", "list"))))


def _short(value, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def describe(err: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first error of ``err`` as one line (``prefix`` + dotted key: problem), plus how many more."""
    errors = err.errors(include_url=False)
    e = errors[0]
    loc = _clean(e["loc"])
    key = prefix + ".".join(str(x) for x in loc)
    kind = e["type"]
    same = [x for x in errors if _clean(x["loc"]) == loc]
    if len(same) > 1 and kind != "value_error":  # one value tried against each form a union field accepts
        forms = " or ".join(dict.fromkeys(str(x["msg"]).replace("Input should be ", "") for x in same))
        errors = [x for x in errors if _clean(x["loc"]) != loc] + [e]
        kind, e = "union", {**e, "msg": f"must be {forms}"}
    if kind == "extra_forbidden":
        parent = prefix + "".join(f"{x}." for x in loc[:-1])
        text = f"unknown key {key!r}" + did_you_mean(str(loc[-1]), _known_keys(model, loc[:-1]), parent)
    elif kind == "missing":
        missing = [x for x in errors if x["type"] == "missing"]
        names = ", ".join(repr(prefix + ".".join(str(p) for p in _clean(x["loc"]))) for x in missing)
        text = f"missing required key{'s' if len(missing) > 1 else ''} {names}"
        errors = [x for x in errors if x["type"] != "missing"] + [e]
    elif kind == "finite_number":
        text = f"{key}: must be a finite number (got {_short(e.get('input'))})"
    elif kind == "value_error":
        msg = str(e["msg"]).removeprefix("Value error, ")
        text = f"{key}: {msg}" if key else msg
    else:
        msg = str(e["msg"]).replace("Input should be", "must be")
        text = f"{key}: {msg} (got {_short(e.get('input'))})"
    if len(errors) > 1:
        text += f" [and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}]"
    return " ".join(text.split())


__all__ = ["ConfigError", "describe", "did_you_mean"]
