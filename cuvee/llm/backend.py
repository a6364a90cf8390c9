"""What an LLM job asks of a model (:class:`Backend`), what it gets back (:class:`Completion`), and its errors.

Two backends implement the protocol: an OpenAI-compatible endpoint (``endpoint.HttpLM``: one prompt per call,
many calls in flight) and a Hugging Face causal LM in this process (``local.LocalLM``: one call at a time, many
prompts per call). The driver reads only the attributes declared here, so a new backend is checked by a type
checker, not discovered by ``getattr``.
"""

from __future__ import annotations

import json
from typing import NamedTuple, Protocol

from cuvee.kernel.errors import UserError


class LLMError(UserError):
    """A failure the user has to act on (unreachable endpoint, a model that does not load): one line."""


class ResponseError(LLMError):
    """The model answered one prompt with something unusable; ``reason`` is the key it is counted under."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class Completion(NamedTuple):
    """One answer. ``text`` is always writable as UTF-8; when the model's answer was not (a lone surrogate in
    the JSON), ``problem`` says so (``invalid_unicode``) and the job drops that answer under that reason."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    retries: int = 0
    finish_reason: str | None = None  # "stop", "length" (cut by max_new_tokens), ...; None when the server sent none
    problem: str | None = None


class Backend(Protocol):
    """A model the driver can ask: ``concurrency`` calls of :meth:`complete_many` in flight, each with at most
    ``batch_size`` prompts; ``api`` is ``chat`` / ``completions`` for an endpoint, ``local`` in this process."""

    name: str
    api: str
    max_new_tokens: int
    concurrency: int
    batch_size: int

    def complete_many(self, prompts: list[str]) -> list[Completion]:
        """One answer per prompt, in order; ResponseError when the answer to this call is unusable."""
        ...


def writable(value) -> bool:
    """Whether a string, or JSON-able data, can be written as UTF-8 (a lone surrogate cannot)."""
    try:
        (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

