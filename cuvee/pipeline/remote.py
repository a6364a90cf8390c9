"""Remote archives that survive a flaky network: reopen at the byte reached, with exponential backoff.

A 1 GB Common Crawl WARC read over HTTPS or S3 is hundreds of range requests; on a busy day one of them
times out or the connection is cut mid-body. Without a retry the whole file (tens of thousands of
records) is lost to ``files_failed``. :class:`RetryingFile` wraps any fsspec file: when a read fails with
a transient error it reopens the object, seeks to the offset it had reached and reads again, so the
records above it see one unbroken byte stream (no duplicates, no gap). Errors that cannot heal (404,
403, a server that cannot seek) fail at once; after ``retries`` transient failures the last error is
raised and the reader counts the file as failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from cuvee.pipeline import retry as _retry

PERMANENT_HTTP = frozenset({400, 401, 403, 404, 405, 410, 411, 412, 413, 414, 416, 451})


def is_transient(exc: BaseException) -> bool:
    """True for errors a later attempt can heal: timeouts, cut connections, HTTP 5xx / 429 / 408."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if status is None:
        resp = getattr(exc, "response", None)  # botocore ClientError
        if isinstance(resp, dict):
            status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if isinstance(status, int):
        return status not in PERMANENT_HTTP and (status >= 500 or status in (408, 429))
    return isinstance(exc, (OSError, TimeoutError, ConnectionError, EOFError)) or _is_network_error(exc)


def _is_network_error(exc: BaseException) -> bool:
    """aiohttp / botocore / urllib3 errors without importing them (they are optional here)."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"ClientError", "ClientPayloadError", "ServerDisconnectedError", "ClientOSError",
                         "ContentLengthError", "TransferEncodingError", "ReadTimeoutError", "ProtocolError",
                         "IncompleteRead", "EndpointConnectionError", "ConnectionClosedError",
                         "ResponseStreamingError", "FSTimeoutError"})


class RetryPolicy(_retry.RetryPolicy):
    """The shared retry helper with remote reads' idea of a transient error (:func:`is_transient`)."""

    def __init__(self, retries: int = 5, backoff_s: float = 1.0, max_sleep_s: float = 60.0):
        super().__init__(retries, backoff_s, max_sleep_s, transient=is_transient)


def timeout_options(url: str, timeout_s: float | None, options: dict | None = None) -> dict:
    """fsspec storage ``options`` for ``url`` with each connect and each socket read bounded to ``timeout_s``.

    Without it a stalled server holds an attempt for fsspec's default (aiohttp: 300 s; botocore: 60 s per read)
    and a stalled file costs that times ``retries + 1``. HTTP(S): aiohttp ``sock_connect`` / ``sock_read`` (no
    ``total``: a streamed body may take longer than one read); S3: botocore ``connect_timeout`` /
    ``read_timeout``. Other protocols and local paths are returned unchanged; options the user set win.
    """
    opts = dict(options or {})
    if timeout_s is None or "://" not in url:
        return opts
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("http", "https"):
        import aiohttp

        client = dict(opts.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s))
        opts["client_kwargs"] = client
    elif protocol in ("s3", "s3a"):
        config = dict(opts.get("config_kwargs") or {})
        config.setdefault("connect_timeout", timeout_s)
        config.setdefault("read_timeout", timeout_s)
        opts["config_kwargs"] = config
    return opts


def remote_folder(path: str, timeout_s: float | None):
    """A datatrove data folder argument for ``path``: remote ones carry :func:`timeout_options`."""
    opts = timeout_options(path, timeout_s)
    return (path, opts) if opts else path


class RetryingFile:
    """A read-only, forward-seekable file over ``opener()`` that heals transient read failures.

    ``opener`` returns a fresh file object positioned at 0 (e.g. ``lambda: fs.open(path, "rb")``).
    ``on_retry(exc)`` is called once per retry (the reader counts them as ``read_retries``).
    """

    def __init__(self, opener: Callable[[], IO[bytes]], policy: RetryPolicy,
                 on_retry: Callable[[BaseException], None] | None = None, name: str = ""):
        self._opener = opener
        self._policy = policy
        self._on_retry = on_retry
        self.name = name
        self._pos = 0
        self._broken = False
        self._f = policy.call(opener, on_retry)

    def _reopen(self) -> None:
        try:
            self._f.close()
        except Exception:  # noqa: BLE001 - the broken handle is discarded either way
            pass
        self._f = self._opener()
        if self._pos:
            self._f.seek(self._pos)

    def read(self, n: int = -1) -> bytes:
        def attempt() -> bytes:
            if self._broken:  # the last attempt failed: a fresh handle at the byte reached (may fail too)
                self._reopen()
                self._broken = False
            try:
                data = self._f.read(n)
            except Exception:
                self._broken = True
                raise
            self._pos += len(data)
            return data

        return self._policy.call(attempt, self._on_retry)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0:
            raise ValueError("RetryingFile supports absolute seeks only")
        self._f.seek(offset)
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        try:
            self._f.close()
        except Exception:  # noqa: BLE001 - closing a broken remote handle must not hide the real outcome
            pass

    def __enter__(self) -> RetryingFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
