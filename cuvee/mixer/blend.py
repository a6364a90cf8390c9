"""Token-exact blending: Megatron's greedy rule, in tokens instead of samples.

At every step the next document comes from the source furthest behind its share,
``argmax_i(w_i * T - c_i)`` (T tokens emitted so far, c_i from source i; ties go to the larger weight, then
the earlier source). Every prefix of the output then holds each source's share up to one document's length,
with no randomness, so the mix is reproducible and can be cut anywhere (e.g. an early-stopped run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator


class SourceExhaustedError(RuntimeError):
    """A source was selected but has no documents left within its epoch budget."""


def greedy_blend(
    weights: list[float],
    target_tokens: int,
    next_document: Callable[[int], int | None],
) -> Iterator[tuple[int, int]]:
    """Yield ``(source, tokens)`` until ``target_tokens`` are emitted.

    ``next_document(i)`` emits the next document of source i and returns its token count (None when exhausted).
    """
    total = sum(weights)
    w = [x / total for x in weights]
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))  # tie-break: larger weight, then earlier source
    counts = [0] * len(w)
    emitted = 0
    while emitted < target_tokens:
        best, best_deficit = -1, None
        for i in order:
            d = w[i] * emitted - counts[i]
            if best_deficit is None or d > best_deficit:
                best, best_deficit = i, d
        n = next_document(best)
        if n is None:
            raise SourceExhaustedError(f"source #{best} ran out of documents within its epoch budget")
        if n <= 0:
            raise ValueError(f"source #{best} produced an empty document")
        counts[best] += n
        emitted += n
        yield best, n
