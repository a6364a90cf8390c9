"""The documents an LLM job reads: a cuvee run folder stands for its ``output/``, and a document that cannot be
sent (no text, text or metadata that is not valid Unicode) is counted under a reason, never sent."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cuvee.llm.backend import writable


def resolve_inputs(inputs: Iterable[str]) -> list[str]:
    """A cuvee run directory (stats.json / recipe.yaml next to output/) means its output/ folder."""
    out = []
    for p in inputs:
        d = Path(p)
        if d.is_dir() and (d / "output").is_dir() and ((d / "stats.json").exists() or (d / "recipe.yaml").exists()):
            out.append(str(d / "output"))
        else:
            out.append(str(p))
    return out


def unusable(doc) -> str | None:
    """Why a source document cannot be sent to a model (the reason it is counted under), or None."""
    if not isinstance(doc.text, str) or not doc.text.strip():
        return "empty_text"
    if not (writable(doc.id) and writable(doc.text) and writable(doc.metadata or {})):
        return "invalid_unicode"
    return None
