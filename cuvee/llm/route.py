"""How an HTTP request reaches its server: directly, or through the proxy the environment names.

``endpoint`` speaks ``http.client`` itself (for its total deadline and size cap), so it has to choose the
proxy the way ``urllib`` would: ``urllib.request.getproxies()`` (``http_proxy`` / ``https_proxy``, upper or
lower case) and ``urllib.request.proxy_bypass()`` (``no_proxy``). An ``http://`` URL is sent to the proxy as
an absolute-URI request; an ``https://`` one goes through a ``CONNECT`` tunnel (``set_tunnel``), so TLS
still runs end to end with the server. Credentials in the proxy URL become ``Proxy-Authorization``.
"""

from __future__ import annotations

import base64
import http.client
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import NamedTuple


class ProxyConfigError(ValueError):
    """A proxy setting cuvee cannot use (a scheme other than http, no host, a bad port)."""


class Route(NamedTuple):
    connection: http.client.HTTPConnection
    target: str  # what follows the method in the request line: a path, or the absolute URI for an http proxy
    headers: dict[str, str]  # Proxy-Authorization for an absolute-URI request through a proxy


def proxy_for(url: str) -> urllib.parse.SplitResult | None:
    """The proxy ``url`` goes through (None: direct); ProxyConfigError for a proxy setting that cannot be used."""
    u = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(u.scheme)
    if not proxy or urllib.request.proxy_bypass(u.netloc.rpartition("@")[2]):
        return None
    p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        p.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise ProxyConfigError(f"{u.scheme}_proxy {proxy}: the port is not a number from 0 to 65535") from None
    if p.scheme != "http" or not p.hostname:
        raise ProxyConfigError(f"{u.scheme}_proxy {proxy}: give an http://host:port proxy (cuvee speaks plain HTTP "
                               "to a proxy, then tunnels https through it)")
    return p


def _auth(p: urllib.parse.SplitResult) -> dict[str, str]:
    if p.username is None:
        return {}
    user = urllib.parse.unquote(p.username)
    password = urllib.parse.unquote(p.password or "")
    return {"Proxy-Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")}


class _Watched:
    """A connection that hands its TCP socket to ``on_socket`` as soon as it exists (before CONNECT or TLS)."""

    def __init__(self, *args, on_socket: Callable[[socket.socket], None], **kwargs):
        super().__init__(*args, **kwargs)
        self._on_socket = on_socket
        self._create_connection = self._watched_socket  # http.client's hook for making the socket

    def _watched_socket(self, address, *args, **kwargs) -> socket.socket:
        sock = socket.create_connection(address, *args, **kwargs)
        self._on_socket(sock)
        return sock


class _HTTP(_Watched, http.client.HTTPConnection):
    pass


class _HTTPS(_Watched, http.client.HTTPSConnection):
    pass


def route(url: str, timeout: float, on_socket: Callable[[socket.socket], None]) -> Route:
    """An unconnected connection for ``url``; ``on_socket`` gets the TCP socket the moment it exists, so a
    caller's deadline can shut it down in every phase (connect, CONNECT, TLS handshake, request, answer)."""
    u = urllib.parse.urlsplit(url)
    proxy = proxy_for(url)
    https = u.scheme == "https"
    if proxy is None or https:
        host, port = (u.hostname, u.port) if proxy is None else (proxy.hostname, proxy.port or 80)
        conn = (_HTTPS if https else _HTTP)(host, port, timeout=timeout, on_socket=on_socket)
        if proxy is not None:
            conn.set_tunnel(u.hostname, u.port or 443, headers=_auth(proxy))
        return Route(conn, (u.path or "/") + (f"?{u.query}" if u.query else ""), {})
    conn = _HTTP(proxy.hostname, proxy.port or 80, timeout=timeout, on_socket=on_socket)
    absolute = urllib.parse.urlunsplit((u.scheme, u.netloc.rpartition("@")[2], u.path or "/", u.query, ""))
    return Route(conn, absolute, _auth(proxy))
