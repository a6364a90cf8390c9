"""The annotate HTTP client goes through the proxy the environment names (http_proxy / https_proxy / no_proxy, as
urllib does), keeping its total deadline and size cap. All real: cuvee's LLM server on 127.0.0.1 (plain and TLS
with a certificate made here), a small forwarding proxy (absolute-URI GET/POST and CONNECT) counting what it
forwards, and a tarpit proxy that answers CONNECT one byte at a time."""

import base64
import datetime
import http.client
import ipaddress
import socket
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cuvee.classifiers.llm_server import LLMServer
from cuvee.llm.backend import LLMError, ResponseError
from cuvee.llm.endpoint import HttpLM

HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding",
       "upgrade", "content-length"}


def answer(prompt, max_tokens, chat=True):
    return f"Educational score: 3 ({len(prompt)} chars)", 5, 4


class ForwardingProxy:
    """Forwards absolute-URI GET/POST and tunnels CONNECT; ``seen`` lists (method, target, Proxy-Authorization)."""

    def __init__(self):
        self.seen: list[tuple[str, str, str | None]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _record(self):
                proxy.seen.append((self.command, self.path, self.headers.get("Proxy-Authorization")))

            def _forward(self):
                self._record()
                u = urllib.parse.urlsplit(self.path)
                if u.scheme != "http":
                    self.send_error(400, "absolute http URI expected")
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                up = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
                up.request(self.command, (u.path or "/") + (f"?{u.query}" if u.query else ""), body=body or None,
                           headers={k: v for k, v in self.headers.items() if k.lower() not in HOP})
                resp = up.getresponse()
                data = resp.read()
                up.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

            def do_CONNECT(self):
                self._record()
                host, _, port = self.path.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=10)
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                client = self.connection

                def pipe(src, dst):
                    try:
                        while data := src.recv(65536):
                            dst.sendall(data)
                    except OSError:
                        pass
                    finally:
                        for s in (src, dst):
                            try:
                                s.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass

                back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
                back.start()
                pipe(client, upstream)
                back.join(10)
                upstream.close()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def env(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture()
def proxy():
    p = ForwardingProxy()
    yield p
    p.close()


@pytest.fixture()
def llm():
    with LLMServer(answer).start() as srv:
        yield srv


@pytest.fixture()
def tls_llm(tmp_path, env):
    """cuvee's LLM server behind TLS with a certificate for 127.0.0.1 that the client trusts via SSL_CERT_FILE."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cuvee test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    env.setenv("SSL_CERT_FILE", str(cert_file))
    srv = LLMServer(answer)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    srv.httpd.socket = ctx.wrap_socket(srv.httpd.socket, server_side=True)
    with srv.start():
        yield f"https://127.0.0.1:{srv.port}/v1", srv


def test_http_goes_through_http_proxy_as_an_absolute_uri_and_no_proxy_bypasses_it(env, proxy, llm):
    env.setenv("http_proxy", proxy.url)
    done = HttpLM(llm.url, "m", retries=0).complete("rate this")
    assert done.text.startswith("Educational score: 3") and llm.requests == 1
    assert proxy.seen == [("POST", f"{llm.url}/chat/completions", None)]
    env.setenv("NO_PROXY", "example.org,127.0.0.1")
    assert HttpLM(llm.url, "m", retries=0).complete("again").text.startswith("Educational score: 3")
    assert len(proxy.seen) == 1 and llm.requests == 2


def test_proxy_credentials_become_proxy_authorization(env, proxy, llm):
    host = proxy.url.removeprefix("http://")
    env.setenv("http_proxy", f"http://ann:p%40ss@{host}")
    HttpLM(llm.url, "m", retries=0).complete("rate this")
    assert proxy.seen[0][2] == "Basic " + base64.b64encode(b"ann:p@ss").decode()


def test_https_is_tunnelled_through_the_proxy(tls_llm, proxy, env):
    url, srv = tls_llm
    env.setenv("https_proxy", proxy.url)
    done = HttpLM(url, "m", retries=0).complete("rate this")
    assert done.text.startswith("Educational score: 3") and srv.requests == 1
    assert proxy.seen == [("CONNECT", f"127.0.0.1:{srv.port}", None)]
    env.setenv("no_proxy", "127.0.0.1")
    assert HttpLM(url, "m", retries=0).complete("again").text.startswith("Educational score: 3")
    assert len(proxy.seen) == 1 and srv.requests == 2


def test_size_cap_holds_through_the_proxy(env, proxy, llm):
    env.setenv("http_proxy", proxy.url)
    with pytest.raises(ResponseError) as e:
        HttpLM(llm.url, "m", retries=0, max_bytes=64).complete("rate this")
    assert e.value.reason == "too_large" and len(proxy.seen) == 1


def test_total_deadline_covers_a_proxy_trickling_its_connect_answer(env):
    """A proxy that answers CONNECT one byte every 0.1 s is cut at the request's deadline (each byte would
    reset a per-read timeout); before, no socket was watched until the tunnel and handshake were done."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def tarpit():
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            line = b"HTTP/1.1 200 Connection established\r\n" + b"X-Slow: y\r\n" * 1000
            for i in range(len(line)):
                if stop.wait(0.1):
                    return
                try:
                    conn.sendall(line[i:i + 1])
                except OSError:
                    return

    t = threading.Thread(target=tarpit, daemon=True)
    t.start()
    env.setenv("https_proxy", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(LLMError) as e:
            HttpLM("https://127.0.0.1:9/v1", "m", retries=0, timeout=0.5).complete("rate this")
    finally:
        stop.set()
        t.join(5)
        listener.close()
    assert "timed out after 0.5s (whole request)" in str(e.value)


@pytest.mark.parametrize("setting", ["socks5://127.0.0.1:1080", "http://127.0.0.1:99999"])
def test_unusable_proxy_setting_is_refused_before_any_request(env, setting):
    env.setenv("https_proxy", setting)
    with pytest.raises(LLMError) as e:
        HttpLM("https://api.example.org/v1", "m")
    assert "https_proxy" in str(e.value) and setting in str(e.value)


def test_unreachable_proxy_is_a_connection_failure_not_a_direct_request(env, llm):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    env.setenv("http_proxy", f"http://127.0.0.1:{port}")
    with pytest.raises(LLMError, match="gave up after 1 attempts"):
        HttpLM(llm.url, "m", retries=0).complete("rate this")
    assert llm.requests == 0  # never went around the proxy
