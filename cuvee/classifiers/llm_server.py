"""A small OpenAI-compatible completion server (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``).

For testing ``cuvee classify annotate`` end to end without a GPU cluster: it serves a local Hugging Face
causal LM (greedy decoding, one request at a time, ``usage`` token counts like vLLM) or any Python
``responder(prompt, max_tokens, chat) -> (text, prompt_tokens, completion_tokens)`` such as a scripted oracle.
Binds to 127.0.0.1 by default. Not a production server: use vLLM (``vllm serve MODEL``) for real models.

    python -m cuvee.classifiers.llm_server MODEL_DIR --port 8000
    cuvee classify annotate RUN_DIR --endpoint http://127.0.0.1:8000/v1 --model MODEL_DIR --out ann.jsonl

``fault`` (a callable: request number -> HTTP status or None) injects errors for retry / resume tests.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Responder = Callable[[str, int, bool], tuple]  # (prompt, max_tokens, chat) -> (text, prompt_tokens | None, completion_tokens | None)


class HFResponder:
    """Greedy generation with a local causal LM, serialised by a lock (CPU torch is not re-entrant here)."""

    def __init__(self, model_dir: str, device: str = "auto"):
        from cuvee.llm.local import load_causal_lm

        self.model, self.tok = load_causal_lm(model_dir, device)
        self._lock = threading.Lock()

    def __call__(self, prompt: str, max_tokens: int, chat: bool = True) -> tuple:
        from cuvee.llm.local import encode_prompt, generate

        ids = encode_prompt(self.tok, prompt) if chat else list(self.tok(prompt)["input_ids"])
        with self._lock:
            c = generate(self.model, self.tok, [ids], max_tokens)[0]
        return c.text, c.prompt_tokens, c.completion_tokens


class KeyedResponder:
    """A scripted annotator: the document inside the prompt (``template.extract``) -> a prepared answer.

    For oracles in tests and benchmarks; unknown documents get ``default``. ``count`` (text -> tokens)
    fills ``usage`` when given."""

    def __init__(self, template, answers: dict[str, str], default: str = "I cannot rate this extract.", count=None):
        self.template, self.answers, self.default, self.count = template, answers, default, count

    def __call__(self, prompt: str, max_tokens: int, chat: bool = True) -> tuple:
        doc = self.template.extract(prompt)
        text = self.answers.get(doc, self.default) if doc is not None else self.default
        if self.count is None:
            return text, None, None
        return text, self.count(prompt), self.count(text)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops SYNs under concurrent clients (1 s retransmit stalls)


class LLMServer:
    """The running server (a daemon thread); ``url`` ends in ``/v1``; ``close()`` stops it."""

    def __init__(self, responder, host: str = "127.0.0.1", port: int = 0, model_name: str = "local",
                 usage: bool = True, max_tokens_cap: int = 4096):
        self.responder = responder
        self.model_name = model_name
        self.usage = usage
        self.max_tokens_cap = max_tokens_cap
        self.fault: Callable[[int], int | None] | None = None
        self.requests = 0  # completion requests received (faulted ones included)
        self._count_lock = threading.Lock()
        self.httpd = _Server((host, port), _handler(self))
        self.host, self.port = self.httpd.server_address[:2]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="cuvee-llm-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> LLMServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _next_request(self) -> int:
        with self._count_lock:
            n = self.requests
            self.requests += 1
            return n


def _handler(server: LLMServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms Nagle / delayed-ACK stall
        wbufsize = -1  # buffered; flushed once per response by BaseHTTPRequestHandler

        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, obj: dict, headers: dict | None = None):
            data = json.dumps(obj).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                return self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            path = self.path.rstrip("/")
            chat = path.endswith("/chat/completions")
            if not (chat or path.endswith("/completions")):
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            except json.JSONDecodeError:
                return self._send(400, {"error": {"message": "body is not JSON"}})
            n = server._next_request()
            status = server.fault(n) if server.fault else None
            if status:
                return self._send(status, {"error": {"message": f"injected fault on request {n}"}}, {"Retry-After": "0"})
            if chat:
                from cuvee.llm.local import messages_to_prompt

                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    return self._send(400, {"error": {"message": "messages: a non-empty list is required"}})
                prompt = messages_to_prompt(msgs)  # one user message: its content (roles of longer chats are not kept)
            else:
                prompt = body.get("prompt")
                if not isinstance(prompt, str):
                    return self._send(400, {"error": {"message": "prompt: a string is required"}})
            max_tokens = min(int(body.get("max_tokens") or 16), server.max_tokens_cap)
            try:
                text, pt, ct = server.responder(prompt, max_tokens, chat)
            except Exception as e:  # noqa: BLE001 - a server answers 500, it does not die
                return self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})
            choice = {"index": 0, "finish_reason": "stop" if (ct or 0) < max_tokens else "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            resp = {"id": f"cmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion" if chat else "text_completion",
                    "created": int(time.time()), "model": body.get("model") or server.model_name, "choices": [choice]}
            if server.usage and pt is not None and ct is not None:
                resp["usage"] = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
            self._send(200, resp)

    return Handler


def serve(model_dir: str | None = None, host: str = "127.0.0.1", port: int = 0, responder=None,
          model_name: str | None = None, usage: bool = True, device: str = "auto") -> LLMServer:
    """Start a server for ``model_dir`` (a HF causal LM folder) or a ``responder``; returns it running."""
    if (model_dir is None) == (responder is None):
        raise ValueError("give model_dir or responder")
    if responder is None:
        responder = HFResponder(str(model_dir), device)
    return LLMServer(responder, host, port, model_name or str(model_dir or "oracle"), usage).start()


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args(argv)
    srv = serve(a.model_dir, a.host, a.port, device=a.device)
    print(f"serving {a.model_dir} at {srv.url} (Ctrl-C to stop)", flush=True)
    try:
        srv._thread.join()
    except KeyboardInterrupt:
        srv.close()


if __name__ == "__main__":
    main()
