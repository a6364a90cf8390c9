"""Shared inputs for the dedup tests: real page texts from data/curated (WCXB dev ground truth)."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

from datatrove.data import Document

REPO = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def real_texts() -> tuple[str, ...]:
    """Distinct, reasonably long real page texts (main content), in file order."""
    out, seen = [], set()
    with gzip.open(REPO / "data/curated/wcxb_dev_main_content.jsonl.gz", "rt") as f:
        for line in f:
            t = json.loads(line).get("main_content") or ""
            if 400 < len(t) < 6000 and t not in seen:
                seen.add(t)
                out.append(t)
    return tuple(out)


def doc(text: str, i, **meta) -> Document:
    return Document(text=text, id=str(i), metadata=meta)


def quiet() -> None:
    from datatrove.utils.logging import logger

    logger.remove()


def kept_ids(out) -> list[list[str]]:
    return [[d.id for d in r] for r in out]


def counters(c: dict, folder: str, step_part: str) -> dict:
    for name, vals in c[folder].items():
        if step_part in name:
            return vals
    raise KeyError(f"{step_part} not in {list(c[folder])}")
