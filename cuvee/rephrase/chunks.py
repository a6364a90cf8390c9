"""Cutting a long document into pieces of at most N tokens for rewriting, and joining the rewrites back.

A model rewrites a few hundred tokens well and loses the thread over thousands, and its context bounds
prompt + answer; so documents are cut by the model's own token count. Cuts fall between lines where they
can (lines are packed greedily up to the budget); a single line over the budget is cut at token
boundaries taken from the tokenizer's character offsets, so every piece is an exact substring of the
document and the pieces concatenate back to it.
"""

from __future__ import annotations

import re
from itertools import pairwise

_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)")
JOIN = "\n\n"  # between the rewrites of consecutive pieces


class TokenCounter:
    """Token counts and token-boundary cuts of texts under one Hugging Face tokenizer (no special tokens)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def count(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def cut(self, text: str, max_tokens: int) -> list[str]:
        """``text`` as consecutive substrings of at most ``max_tokens`` tokens each (token boundaries)."""
        if getattr(self.tok, "is_fast", False):
            offsets = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            ends = [e for _, e in offsets]  # cut after a token: the space before the next word stays with it
            cuts = [0] + [ends[i - 1] for i in range(max_tokens, len(ends), max_tokens)] + [len(text)]
            return [text[a:b] for a, b in pairwise(cuts) if b > a]
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return [self.tok.decode(ids[i : i + max_tokens]) for i in range(0, len(ids), max_tokens)]


def _sentences(line: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(line) if s]


def _pack(segments: list[str], max_tokens: int, counter: TokenCounter, level: int) -> list[str]:
    """Consecutive segments packed greedily up to the budget; a segment over it is split one level finer
    (lines -> sentences -> token boundaries)."""
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for seg in segments:
        n = counter.count(seg)
        if n > max_tokens:
            if current:
                pieces.append("".join(current))
                current, used = [], 0
            finer = _sentences(seg) if level == 0 else []
            pieces.extend(_pack(finer, max_tokens, counter, 1) if len(finer) > 1 else counter.cut(seg, max_tokens))
            continue
        if used + n > max_tokens and current:
            pieces.append("".join(current))
            current, used = [], 0
        current.append(seg)
        used += n
    if current:
        pieces.append("".join(current))
    return pieces


def split_document(text: str, max_tokens: int, counter: TokenCounter | None) -> list[str]:
    """The document's pieces (one piece when it fits or when ``max_tokens`` is 0 / no counter); they
    concatenate back to ``text``."""
    if not max_tokens or counter is None or counter.count(text) <= max_tokens:
        return [text]
    pieces = _pack(text.splitlines(keepends=True), max_tokens, counter, 0)
    out: list[str] = []
    for p in pieces:  # a whitespace-only piece travels with its neighbour: nothing to rewrite in it
        if out and not p.strip() or out and not out[-1].strip():
            out[-1] += p
        else:
            out.append(p)
    return out


def join_rewrites(parts: list[str]) -> str:
    return JOIN.join(p.strip() for p in parts)

