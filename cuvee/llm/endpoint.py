"""An OpenAI-compatible completion endpoint as an LLM job backend, with bounded cost per request.

A server is input like any other: it may answer slowly, hugely or in the wrong shape. Every request has a
total deadline (``timeout``: connect, headers and body together; a server trickling one byte a second is
cut off at the deadline, not kept alive by each byte), a response size cap (``max_bytes``: a 1 GB answer
is refused after ``max_bytes``, never held in memory), and a response that is not the documented shape
(``content`` not a string, ``usage`` counts not integers) is a :class:`ResponseError` for that document,
counted by the caller, instead of a traceback. An answer that is not valid Unicode (a lone surrogate escaped in
the JSON) comes back with ``Completion.problem`` set, for the job to drop under that reason. Transient failures
(timeouts, cut connections, 408/409/425/429/5xx, honouring ``Retry-After``) are retried by
:class:`cuvee.pipeline.retry.RetryPolicy`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import urllib.parse

from cuvee.llm.backend import Completion, LLMError, ResponseError, writable
from cuvee.llm.route import ProxyConfigError, proxy_for, route
from cuvee.pipeline.retry import RetryPolicy

RETRY_STATUS = frozenset({408, 409, 425, 429})
MAX_RESPONSE_BYTES = 8 << 20  # an answer of 256 tokens is a few KB; 8 MB leaves room for any sane server
MAX_RETRY_AFTER_S = 60.0


class _Transient(Exception):
    """A failure a later attempt may heal; ``retry_after`` is the server's own delay, if it gave one."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    if value and value.strip().replace(".", "", 1).isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    return None


def post_json(url: str, body: bytes, headers: dict, timeout: float, max_bytes: int) -> tuple[int, str | None, bytes]:
    """One POST with a total deadline and a size cap: (status, Retry-After, body bytes).

    A watchdog shuts the socket down at the deadline, so no phase of the exchange can outlive it. The request
    goes through the proxy the environment names for ``url``, as urllib's would (``http_route``)."""
    expired = threading.Event()
    sockets: list = []  # the connection drops its socket once a closing response starts; the watchdog must not

    def expire():
        expired.set()
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed: nothing left to stop
                sock.shutdown(socket.SHUT_RDWR)

    def watch(sock):  # the TCP socket, before any CONNECT or TLS handshake on it
        sockets.append(sock)
        if expired.is_set():
            expire()

    conn, target, proxy_headers = route(url, timeout, watch)
    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        watch(conn.sock)  # the TLS socket wrapping it, for https
        conn.request("POST", target, body=body, headers={**headers, **proxy_headers})
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > max_bytes:
            raise ResponseError("too_large", f"response of {int(declared):,} bytes is over the {max_bytes:,}-byte cap")
        chunks, size = [], 0
        while True:
            chunk = resp.read(min(1 << 16, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ResponseError("too_large", f"response is over the {max_bytes:,}-byte cap")
        if expired.is_set():
            raise TimeoutError("deadline")
        return resp.status, resp.getheader("Retry-After"), b"".join(chunks)
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise _Transient(f"timed out after {timeout:g}s (whole request)") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def _count(usage: dict, key: str) -> int | None:
    v = usage.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ResponseError("bad_usage", f"usage.{key} is {json.dumps(v)[:40]}, not a token count")
    return v


def finish_reason_of(resp) -> str | None:
    """``choices[0].finish_reason`` when it is a string (call after :func:`parse_completion` accepted ``resp``)."""
    reason = resp["choices"][0].get("finish_reason") if isinstance(resp["choices"][0], dict) else None
    return reason if isinstance(reason, str) else None


def parse_completion(resp, chat: bool) -> tuple[str, int | None, int | None]:
    """(text, prompt tokens, completion tokens) of a response; ResponseError when it is not the documented shape."""
    try:
        choice = resp["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ResponseError("bad_shape", f"unexpected response {json.dumps(resp)[:200]}") from None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ResponseError("bad_content", f"answer is a {type(text).__name__}, not a string")
    usage = resp.get("usage") if isinstance(resp, dict) else None
    if usage is None:
        return text, None, None
    if not isinstance(usage, dict):
        raise ResponseError("bad_usage", f"usage is a {type(usage).__name__}, not an object")
    return text, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")


def api_key_from_env(var: str | None) -> str | None:
    """The API key held by environment variable ``var`` (``--api-key-env``); None when no variable is named."""
    if var is None:
        return None
    key = os.environ.get(var)
    if not key:
        raise LLMError(f"--api-key-env {var}: that environment variable is not set")
    return key


class HttpLM:
    """An OpenAI-compatible endpoint (``{endpoint}/chat/completions`` or ``/completions``); temperature 0 unless
    asked (``temperature``, ``top_p`` and ``seed`` are sent only when set, for generation such as rephrasing).
    One prompt per request, ``concurrency`` requests in flight (the driver's threads)."""

    batch_size = 1

    def __init__(self, endpoint: str, model: str, api: str = "chat", api_key: str | None = None, max_new_tokens: int = 256,
                 timeout: float = 120.0, retries: int = 5, backoff: float = 1.0, concurrency: int = 8,
                 tokenizer: str | None = None, max_bytes: int = MAX_RESPONSE_BYTES, temperature: float = 0.0,
                 top_p: float | None = None, seed: int | None = None):
        if urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
            raise LLMError(f"--endpoint {endpoint}: give an http:// or https:// URL")
        if timeout <= 0 or max_bytes <= 0:
            raise LLMError("--timeout and --max-response-bytes must be positive")
        try:
            proxy_for(endpoint)  # a proxy setting it cannot use is refused before any request
        except ProxyConfigError as e:
            raise LLMError(f"--endpoint {endpoint}: {e}") from None
        self.endpoint = endpoint.rstrip("/")
        self.name = model
        self.api = api
        self.api_key = api_key
        self.max_new_tokens = max_new_tokens
        self.sampling = {"temperature": temperature, **({"top_p": top_p} if top_p is not None else {}),
                         **({"seed": seed} if seed is not None else {})}
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.policy = RetryPolicy(retries, backoff, max_sleep_s=30.0, transient=lambda e: isinstance(e, _Transient),
                                  server_delay=lambda e: getattr(e, "retry_after", None))
        self.concurrency = max(1, concurrency)
        self._tok_name = tokenizer
        self._tok = None
        self._tok_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.endpoint}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def _count_tokens(self, prompt: str, answer: str) -> tuple[int | None, int | None]:
        """Token counts when the endpoint sends no ``usage``: the model's tokenizer, if it loads offline."""
        from cuvee.hf_loading import load_tokenizer_offline
        from cuvee.llm.local import encode_prompt

        with self._tok_lock:
            if self._tok is None:
                self._tok = load_tokenizer_offline(self._tok_name or self.name) or False
        if not self._tok:
            return None, None
        ids = encode_prompt(self._tok, prompt) if self.api == "chat" else self._tok(prompt)["input_ids"]
        return len(ids), len(self._tok(answer, add_special_tokens=False)["input_ids"])

    def complete(self, prompt: str) -> Completion:
        body = {"model": self.name, "max_tokens": self.max_new_tokens, **self.sampling}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        resp, retries = self._post(body)
        try:
            text, pt, ct = parse_completion(resp, self.api == "chat")
        except ResponseError as e:
            raise ResponseError(e.reason, f"{self.url}: {e}") from None
        problem = None if writable(text) else "invalid_unicode"
        if problem:
            text = text.encode("utf-8", "replace").decode("utf-8")  # each lone surrogate becomes "?"
        if pt is None or ct is None:
            pt, ct = self._count_tokens(prompt, text)
        return Completion(text, pt, ct, retries, finish_reason_of(resp), problem)

    def complete_many(self, prompts: list[str]) -> list[Completion]:
        return [self.complete(p) for p in prompts]

    def _attempt(self, data: bytes, headers: dict):
        try:
            status, retry_after, raw = post_json(self.url, data, headers, self.timeout, self.max_bytes)
        except (ResponseError, _Transient):
            raise
        except TimeoutError:
            raise _Transient(f"timed out after {self.timeout:g}s") from None
        except (ConnectionRefusedError, socket.gaierror) as e:
            raise _Transient(f"cannot reach endpoint: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise _Transient(f"connection error: {e!r}") from None
        if status >= 400:
            detail = " ".join(raw[:4096].decode("utf-8", "replace").split())[:200]
            if status in RETRY_STATUS or status >= 500:
                raise _Transient(f"HTTP {status} {detail}".strip(), _retry_after(retry_after))
            raise LLMError(f"{self.url}: HTTP {status} {detail}")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _Transient("response is not JSON") from None

    def _post(self, body: dict) -> tuple[dict, int]:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        retries: list = []
        try:
            return self.policy.call(lambda: self._attempt(data, headers), retries.append), len(retries)
        except _Transient as e:
            raise LLMError(f"{self.url}: {e} (gave up after {self.policy.retries + 1} attempts)") from None
