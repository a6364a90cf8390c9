"""Batch encoding on a fixed set of threads, each thread with its own copy of the BPE engine.

Why: since fancy-regex 0.17 (tiktoken >= 0.12) every thread-local regex clone inside one tiktoken ``CoreBPE``
shares a single compiled program, so all threads encoding with one ``CoreBPE`` share its regex scratch
caches (regex-automata's pool: an owner fast path that the other threads keep invalidating, per-thread
stacks that collide). Raw tiktoken makes fresh threads on every call and averages that out; a thread pool
kept for the whole process either avoided it or paid it on every batch, hence runs at ~1x or ~2x the CPU
depending on the process. A private ``CoreBPE`` per worker thread (built once per thread, ~20 MB and
~0.05 s CPU for cl100k) shares nothing, so every process costs the same. Work goes to the threads in a few
contiguous chunks per thread, not one task per document, to keep the GIL hand-offs few.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

EncodeFn = Callable[[str], "np.ndarray"]

# A special token that is never allowed (allowed_special is always empty), hence never emitted: text equal to
# it is encoded as ordinary text. Only there because with no special token at all tiktoken's special-token
# regex is the empty pattern, which matches at every position, and encode() then steps through it byte by
# byte (1.8x the CPU of the whole encode on web text, same ids).
SENTINEL_SPECIAL = "<|cuvee:never-allowed|>"
CHUNKS_PER_THREAD = 4


def private_core(mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int], pat_str: str, name: str):
    """A fresh ``CoreBPE`` of its own (no regex program shared with any other thread's copy)."""
    import tiktoken

    special = dict(special_tokens)
    if not special:
        top = max(mergeable_ranks.values(), default=-1)
        special = {SENTINEL_SPECIAL: top + 1}
    return tiktoken.Encoding(name=name, pat_str=pat_str, mergeable_ranks=mergeable_ranks,
                             special_tokens=special)._core_bpe


def buffer_encoder(core) -> EncodeFn:
    """``text -> uint32 array`` on ``core``, no special-token parsing, no Python list per document."""
    import numpy as np

    none: set = set()

    def encode(text: str):
        try:
            buf = core.encode_to_tiktoken_buffer(text, none)
        except UnicodeEncodeError:  # lone surrogates (legal in JSON): replaced, as tiktoken's own encode does
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            buf = core.encode_to_tiktoken_buffer(text, none)
        return np.frombuffer(buf, dtype=np.uint32)

    return encode


def _chunks(texts: Sequence[str], n: int) -> list[Sequence[str]]:
    """Up to ``n`` contiguous slices of about equal total length (order kept)."""
    total = sum(len(t) for t in texts) or 1
    out, start, acc, k = [], 0, 0, 1
    for i, t in enumerate(texts):
        acc += len(t)
        if acc * n >= total * k and i + 1 < len(texts):
            out.append(texts[start:i + 1])
            start, k = i + 1, k + 1
    out.append(texts[start:])
    return out


class ParallelEncoder:
    """``encode(texts) -> arrays`` on ``num_threads`` persistent threads; ``make_encode`` builds one engine per thread."""

    def __init__(self, make_encode: Callable[[], EncodeFn], num_threads: int):
        self.num_threads = max(1, int(num_threads))
        self._make_encode = make_encode
        self._local = threading.local()
        # built once; its threads start on the first batch and live as long as the tokenizer
        self._pool = (ThreadPoolExecutor(self.num_threads, thread_name_prefix="cuvee-tok")
                      if self.num_threads > 1 else None)

    def _engine(self) -> EncodeFn:
        fn = getattr(self._local, "encode", None)
        if fn is None:
            fn = self._local.encode = self._make_encode()
        return fn

    def _encode_chunk(self, texts: Sequence[str]) -> list:
        encode = self._engine()
        return [encode(t) for t in texts]

    def encode(self, texts: Sequence[str]) -> list:
        if self._pool is None:
            return self._encode_chunk(texts)
        if not texts:
            return []
        out: list = []
        for part in self._pool.map(self._encode_chunk, _chunks(texts, self.num_threads * CHUNKS_PER_THREAD)):
            out.extend(part)
        return out
