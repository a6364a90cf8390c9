"""The filter funnel: per stage, documents and (estimated) tokens in, kept and dropped, with reasons.

Document numbers come straight from ``stats.json``. Tokens are not counted by the stages, so they are
estimated from each stage's ``chars_out`` times the tokens-per-character ratio measured on the
output documents (the last stage therefore matches the output's token estimate).
"""

from __future__ import annotations

from typing import Any

from cuvee.card.run_data import StageStats

DEDUP_COUNTERS = ("clusters", "lines_removed", "chars_removed", "duplicates", "duplicate_clusters")
DEDUP_WORDS = ("dedup", "minhash", "duplicate")
EXTRACT_WORDS = ("extract", "trafilatura", "resiliparse", "readability", "justext", "inscriptis")


def stage_label(i: int, s: StageStats) -> str:
    return f"{i + 1:02d} {s.name}"


def is_extraction_stage(s: StageStats) -> bool:
    """HTML -> text: before and at this stage characters are markup, so tokens cannot be estimated from them."""
    text = " ".join([s.name] + [str(v) for v in s.params.values() if isinstance(v, str)]).lower()
    return any(w in text for w in EXTRACT_WORDS)


def funnel_rows(stages: list[StageStats], tokens_per_char: float | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    prev_chars: int | None = None
    text_from = max((i for i, s in enumerate(stages) if is_extraction_stage(s)), default=-1)
    for i, s in enumerate(stages):
        chars = s.chars_out if (s.chars_out or not s.docs_out) else None  # readers report 0 chars (payload not decoded yet)
        tok_out = round(chars * tokens_per_char) if (chars is not None and tokens_per_char and i >= text_from) else None
        tok_in = round(prev_chars * tokens_per_char) if (prev_chars is not None and tokens_per_char) else None
        rows.append(
            {
                "label": stage_label(i, s),
                "name": s.name,
                "docs_in": s.docs_in,
                "docs_out": s.docs_out,
                "dropped": s.dropped_total,
                "reasons": dict(sorted(s.dropped.items(), key=lambda kv: (-kv[1], kv[0]))),
                "chars_out": chars,
                "tokens_out_est": tok_out,
                "tokens_dropped_est": (tok_in - tok_out) if (tok_in is not None and tok_out is not None) else None,
            }
        )
        prev_chars = chars if i >= text_from else None
    return rows


def is_dedup_stage(s: StageStats) -> bool:
    return any(w in s.name.lower() for w in DEDUP_WORDS) or any(k in s.counters for k in DEDUP_COUNTERS)
