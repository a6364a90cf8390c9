"""Simple checks an LLM rewrite must pass before it becomes a training document; a failure is a drop reason.

A generator fails in a few recognisable ways: it says nothing (``empty``), it is cut off by the token
limit mid-sentence (``truncated``: finish_reason ``length``, or, when the server sends no reason, as many
tokens as allowed), it repeats the instructions back (``prompt_copy``), or it returns the input nearly
unchanged (``copied_input``), which adds no new tokens to the mix. Overlaps are measured on word 5-gram
sets (lower-cased), so they ignore whitespace and case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REASONS = ("empty", "truncated", "prompt_copy", "copied_input")  # and invalid_unicode, named by the backend
_WORD = re.compile(r"\w+", re.UNICODE)
N = 5


def shingles(text: str, n: int = N) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


@dataclass(frozen=True)
class Checks:
    """Thresholds: ``max_input_similarity`` (Jaccard of output and input 5-grams) and ``max_prompt_copy``
    (share of the instruction's 5-grams found in the output); 1.0 turns a check off."""

    max_input_similarity: float = 0.9
    max_prompt_copy: float = 0.5

    def failure(self, output: str, source: str, instructions: str, finish_reason: str | None,
                completion_tokens: int | None, max_new_tokens: int) -> str | None:
        """The first reason the rewrite ``output`` of ``source`` fails, or None when it passes."""
        if not output.strip():
            return "empty"
        if finish_reason == "length" or (finish_reason is None and completion_tokens is not None
                                         and completion_tokens >= max_new_tokens):
            return "truncated"
        out = shingles(output)
        inst = shingles(instructions)
        if inst and self.max_prompt_copy < 1.0 and len(out & inst) / len(inst) >= self.max_prompt_copy:
            return "prompt_copy"
        if self.max_input_similarity < 1.0 and jaccard(out, shingles(source)) >= self.max_input_similarity:
            return "copied_input"
        return None
