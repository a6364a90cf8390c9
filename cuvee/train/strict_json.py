"""Strict JSON for logs and reports: NaN and infinity become ``null``, never the bare ``NaN``/``Infinity``
that Python's json writes by default and that strict readers (jq, browsers, most other languages) reject."""

from __future__ import annotations

import json
import math


def finite_or_none(obj):
    """``obj`` with every non-finite float (anywhere inside dicts, lists, tuples) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def dumps(obj, **kw) -> str:
    """``json.dumps`` that can only write strict JSON (``allow_nan=False`` after mapping NaN/inf to null)."""
    default = kw.pop("default", None)
    if default is not None:  # convert numpy scalars etc. first, so their non-finite values are mapped too
        obj = json.loads(json.dumps(obj, default=default))
    return json.dumps(finite_or_none(obj), allow_nan=False, **kw)
