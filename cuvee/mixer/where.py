"""``where:`` conditions of mix sources and selections: checking, matching, and proving two selections disjoint.

A condition maps a metadata key to a value (equality) or to operators: ``==`` / ``eq``, ``!=`` / ``ne``,
``>`` / ``gt``, ``>=`` / ``gte``, ``<`` / ``lt``, ``<=`` / ``lte``, ``in``, ``not_in``, ``exists``. Every
operator of a key must hold, and every key of a ``where``. A document without the key (or with null) fails
every operator except ``exists: false``; a comparison between types that do not compare fails.

Why disjointness: the selections of one source each become a source of the blend, so a document matched by
two selections would be drawn twice. Selections are accepted only when, for each pair, some key's conditions
provably exclude each other (value sets, number ranges, ``exists``); otherwise the config is refused.
"""

from __future__ import annotations

import math
from typing import Any

from cuvee.kernel.config import did_you_mean

ALIASES = {"eq": "==", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not_in", "exists", *ALIASES)
_COMPARE = {">": lambda v, r: v > r, ">=": lambda v, r: v >= r, "<": lambda v, r: v < r, "<=": lambda v, r: v <= r}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_where(where: dict, label: str = "") -> dict:
    """Raise ValueError (one line, naming ``label.key``) for a condition that cannot mean what it says."""
    for key, cond in where.items():
        at = f"{label}.{key}" if label else str(key)
        if isinstance(cond, list):
            # ValueError, not TypeError: pydantic turns only ValueError into a config error
            raise ValueError(f"{at}: a list is not a value to compare with; write {{in: {cond}}}")
        if not isinstance(cond, dict):
            continue
        if not cond:
            raise ValueError(f"{at}: empty condition; give a value or operators ({', '.join(OPERATORS)})")
        for op, ref in cond.items():
            if op not in OPERATORS:
                hint = did_you_mean(str(op), OPERATORS, cutoff=0.4)
                raise ValueError(f"{at}: unknown operator {op!r}{hint} (operators: {', '.join(OPERATORS)})")
            canon = ALIASES.get(op, op)
            if canon in ("in", "not_in") and not isinstance(ref, list):
                raise ValueError(f"{at}.{op} needs a list")
            if canon == "exists" and not isinstance(ref, bool):
                raise ValueError(f"{at}.exists needs true or false")
            if canon in _COMPARE and not (isinstance(ref, str) or (_number(ref) and math.isfinite(ref))):
                raise ValueError(f"{at}.{op} needs a finite number or a string, got {ref!r}")
        ops = {ALIASES.get(op, op) for op in cond}
        if len(ops) != len(cond):
            raise ValueError(f"{at}: an operator given twice under two names ({', '.join(cond)})")
    return where


def matches(value: Any, cond: Any) -> bool:
    """Whether a metadata value satisfies one key's condition."""
    if not isinstance(cond, dict):
        return value == cond
    for op, ref in cond.items():
        op = ALIASES.get(op, op)
        if op == "exists":
            ok = (value is not None) == bool(ref)
        elif value is None:
            ok = False
        elif op == "==":
            ok = value == ref
        elif op == "!=":
            ok = value != ref
        elif op == "in":
            ok = value in ref
        elif op == "not_in":
            ok = value not in ref
        else:
            try:
                ok = bool(_COMPARE[op](value, ref))
            except TypeError:
                ok = False
        if not ok:
            return False
    return True


def failed_key(where: dict, meta: dict) -> str | None:
    """The first key of ``where`` whose condition the metadata ``meta`` fails; None when the document is selected."""
    return next((k for k, cond in where.items() if not matches(meta.get(k), cond)), None)


def missing_keys(where: dict, seen: set[str]) -> str:
    """Why a selection may have taken nothing: the ``where`` keys no document has, each with the closest key
    documents do have ("" when every key was seen). One wording for every command that selects by ``where``."""
    notes = []
    for key in where:
        if key not in seen:
            notes.append(f"no document has metadata {key!r}" + did_you_mean(key, sorted(seen)))
    return "; ".join(notes)


def canonical(where: dict) -> dict:
    """``where`` with every operator under its one canonical name and keys sorted, so two spellings of one
    condition (``lte`` / ``<=``) bind a folder's plan alike."""
    return {k: _canon(where[k]) if isinstance(where[k], dict) else where[k] for k in sorted(where)}


def _canon(cond: Any) -> dict:
    return {ALIASES.get(op, op): ref for op, ref in cond.items()} if isinstance(cond, dict) else {"==": cond}


def _interval(c: dict) -> tuple | None:
    """(low, low_inclusive, high, high_inclusive) of a condition made only of numeric comparisons, else None."""
    lo, lo_in, hi, hi_in = -math.inf, False, math.inf, False
    for op, ref in c.items():
        if op == "exists" and ref is True:
            continue
        if op not in _COMPARE or not _number(ref):
            return None
        if op in (">", ">=") and (ref > lo or (ref == lo and op == ">")):
            lo, lo_in = ref, op == ">="
        elif op in ("<", "<=") and (ref < hi or (ref == hi and op == "<")):
            hi, hi_in = ref, op == "<="
    return lo, lo_in, hi, hi_in


def _can_both_hold(a_cond: Any, b_cond: Any) -> bool:
    """False only when no value satisfies both conditions (a proof); True when it cannot be ruled out."""
    a, b = _canon(a_cond), _canon(b_cond)
    none_a, none_b = a.get("exists") is False, b.get("exists") is False
    value_a = any(op != "exists" for op in a) or a.get("exists") is True
    value_b = any(op != "exists" for op in b) or b.get("exists") is True
    if (none_a and value_b) or (none_b and value_a):
        return False
    for x, y in ((a, b), (b, a)):
        points = [x["=="]] if "==" in x else x.get("in")
        if points is not None:  # a finite set of values: try each
            return any(matches(v, x) and matches(v, y) for v in points)
    ia, ib = _interval(a), _interval(b)
    if ia is not None and ib is not None:
        lo, lo_in = max((ia[0], ia[1]), (ib[0], ib[1]), key=lambda t: (t[0], not t[1]))
        hi, hi_in = min((ia[2], ia[3]), (ib[2], ib[3]), key=lambda t: (t[0], t[1]))
        return lo < hi or (lo == hi and lo_in and hi_in)
    return True


def disjoint(a: dict, b: dict) -> bool:
    """Whether two ``where`` mappings provably never hold for the same document."""
    return any(not _can_both_hold(a[k], b[k]) for k in a.keys() & b.keys())
