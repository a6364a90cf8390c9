"""`cuvee classify annotate` against unlucky files and hostile servers (issue #25), all real: real files,
real HTTP servers on 127.0.0.1 (cuvee's own llm_server, or a raw one that misbehaves on purpose), real
second processes.
"""

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.classifiers.llm_server import KeyedResponder, serve
from cuvee.cli import main
from cuvee.llm.prompt import load_prompt


@pytest.fixture()
def docs(tmp_path):
    path = tmp_path / "docs" / "part.jsonl"
    path.parent.mkdir()
    texts = [f"Document number {i} about photosynthesis and light." for i in range(6)]
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path, texts


def cli(*args):
    return CliRunner().invoke(main, ["classify", "annotate", *map(str, args), "--no-progress"])


def one_line_error(res):
    err = res.output.strip()
    assert res.exit_code == 1 and err.startswith("Error: ") and "\n" not in err and "Traceback" not in err, res.output
    return err


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().split("\n") if x]


# ---------------------------------------------------------------- the output file


def test_last_record_without_newline_is_kept_not_dropped(docs, tmp_path):
    src, _ = docs
    out = tmp_path / "ann.jsonl"
    with serve(responder=lambda p, m, chat: ("Educational score: 2", 1, 1), model_name="m") as srv:
        assert cli(src, "--endpoint", srv.url, "--model", "m", "--n", 3, "--out", out).exit_code == 0
        body = out.read_bytes()
        out.write_bytes(body[:-1])  # cuvee's own last record, complete but without its newline
        res = cli(src, "--endpoint", srv.url, "--model", "m", "--n", 6, "--out", out)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["already_done"] == 3 and s["dropped_partial_lines"] == 0 and s["annotated"] == 3
    assert out.read_bytes().startswith(body) and len(lines(out)) == 6


@pytest.mark.parametrize("content", [
    '{"id": "d0", "text": "a record of mine"}\n{"id": "d1", "text": "another"}\n',  # JSONL without cuvee's fields
    '{"id": "d0", "label": 1}\n{"id": "d1", "label": 0}',  # ... and without a final newline
    "hello world",  # not JSON at all, no newline (was cut away as a 'torn line')
])
def test_a_file_cuvee_did_not_write_is_refused_and_untouched(docs, tmp_path, content):
    src, _ = docs
    out = tmp_path / "mine.jsonl"
    out.write_text(content)
    with serve(responder=lambda p, m, chat: ("Educational score: 2", 1, 1), model_name="m") as srv:
        res = cli(src, "--endpoint", srv.url, "--model", "m", "--n", 2, "--out", out)
        assert srv.requests == 0  # refused before any request
    err = one_line_error(res)
    assert "another --out" in err and str(out) in err
    assert out.read_text() == content and not Path(str(out) + ".summary.json").exists()


def test_a_foreign_summary_file_is_not_overwritten(docs, tmp_path):
    src, _ = docs
    out = tmp_path / "ann.jsonl"
    summary = Path(str(out) + ".summary.json")
    summary.write_text("my notes\n")
    with serve(responder=lambda p, m, chat: ("Educational score: 2", 1, 1), model_name="m") as srv:
        err = one_line_error(cli(src, "--endpoint", srv.url, "--model", "m", "--n", 2, "--out", out))
    assert "summary" in err and summary.read_text() == "my notes\n"


def test_second_annotate_process_on_the_same_out_gets_a_clear_message(docs, tmp_path):
    src, _ = docs
    out = tmp_path / "ann.jsonl"
    release = threading.Event()
    entered = threading.Event()

    def slow(prompt, max_tokens, chat):
        entered.set()
        release.wait(120)
        return "Educational score: 3", 1, 1

    with serve(responder=slow, model_name="m") as srv:
        first = subprocess.Popen([sys.executable, "-m", "cuvee.classifiers.cli", "annotate", str(src), "--endpoint", srv.url,
                                  "--model", "m", "--n", "1", "--out", str(out), "--no-progress"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert entered.wait(180), "the first process never asked the server"
            err = one_line_error(cli(src, "--endpoint", srv.url, "--model", "m", "--n", 1, "--out", out))
            assert "another cuvee process" in err
        finally:
            release.set()
            stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert json.loads(stdout)["annotated"] == 1 and len(lines(out)) == 1


# ---------------------------------------------------------------- scores are counted, never clamped


def test_out_of_range_and_non_integer_answers_are_counted_not_clamped(docs, tmp_path):
    src, texts = docs
    answers = ["Educational score: 99", "Educational score: 10/10", "Educational score: -3", "Educational score: 1e3",
               "Educational score: 2.5", "Educational score: 4"]
    template = load_prompt("fineweb_edu")
    responder = KeyedResponder(template, dict(zip(texts, answers)), count=lambda t: 1)
    out = tmp_path / "ann.jsonl"
    with serve(responder=responder, model_name="m") as srv:
        res = cli(src, "--endpoint", srv.url, "--model", "m", "--n", 6, "--out", out)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert (s["scored"], s["out_of_range"], s["not_integer"], s["unparsed"]) == (1, 4, 1, 0)
    assert s["score_histogram"] == {"4": 1}
    by_answer = {r["answer"]: r for r in lines(out)}
    for a in answers[:4]:
        assert by_answer[a]["score"] is None and by_answer[a]["score_problem"] == "out_of_range"
    assert by_answer["Educational score: 4"]["score"] == 4
    from cuvee.classifiers.annotate import read_score

    assert read_score("Educational score: 3/5") == (3, None) and read_score("Educational score: 3/10")[1] == "out_of_range"


# ---------------------------------------------------------------- hostile servers


class _Hostile(ThreadingHTTPServer):
    daemon_threads = True


def hostile(reply):
    """A raw server on 127.0.0.1: ``reply(handler)`` writes whatever it likes; returns (server, url, sent bytes)."""
    sent = []

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                reply(self, sent)
            except OSError:
                pass  # the client hung up: that is the point of some of these

    srv = _Hostile(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1", sent


def _json_reply(obj):
    def reply(h, sent):
        data = json.dumps(obj).encode()
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return reply


@pytest.mark.parametrize("resp,reason", [
    ({"choices": [{"message": {"content": ["Educational", "score: 3"]}}]}, "bad_content"),
    ({"choices": [{"message": {"content": 3}}]}, "bad_content"),
    ({"choices": [{"message": {"content": "Educational score: 3"}}], "usage": {"prompt_tokens": "12", "completion_tokens": "3"}},
     "bad_usage"),
])
def test_malformed_responses_are_counted_per_document(docs, tmp_path, resp, reason):
    src, _ = docs
    srv, url, _ = hostile(_json_reply(resp))
    try:
        res = cli(src, "--endpoint", url, "--model", "m", "--n", 3, "--out", tmp_path / "a.jsonl", "--retries", 0)
    finally:
        srv.shutdown()
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["annotated"] == 0 and s["failed"] == 3 and s["failed_by_reason"] == {reason: 3} and s["remaining"] == 3


def test_huge_responses_are_capped(docs, tmp_path):
    src, _ = docs
    chunk = b"x" * (1 << 16)

    def declared(h, sent):  # says 1.2 GB up front
        h.send_response(200)
        h.send_header("Content-Length", str(1_200_000_000))
        h.end_headers()
        for _ in range(64):
            h.wfile.write(chunk)
            sent.append(len(chunk))

    def undeclared(h, sent):  # no length: streams until the client hangs up
        h.send_response(200)
        h.end_headers()
        for _ in range(20_000):  # up to 1.3 GB
            h.wfile.write(chunk)
            sent.append(len(chunk))

    for reply in (declared, undeclared):
        srv, url, sent = hostile(reply)
        try:
            res = cli(src, "--endpoint", url, "--model", "m", "--n", 2, "--out", tmp_path / f"{reply.__name__}.jsonl",
                      "--retries", 0, "--concurrency", 1, "--max-response-bytes", 1 << 20)
        finally:
            srv.shutdown()
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["failed_by_reason"] == {"too_large": 2} and s["annotated"] == 0
        assert sum(sent) < 2 * 64 * len(chunk) + 2 * (8 << 20)  # the client stopped reading near the cap


def test_timeout_is_a_total_deadline_not_per_read(docs, tmp_path):
    """A server trickling one byte every 0.2 s of a 100-byte answer: each read arrives well within --timeout 1,
    but the request as a whole must end at about 1 s, long before the server has sent the whole answer."""
    src, _ = docs
    body = json.dumps({"choices": [{"message": {"content": "Educational score: 3"}}]}).encode().ljust(100)

    def trickle(h, sent):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.flush()
        for b in body:
            h.wfile.write(bytes([b]))
            h.wfile.flush()
            sent.append(1)
            time.sleep(0.2)

    srv, url, sent = hostile(trickle)
    try:
        res = cli(src, "--endpoint", url, "--model", "m", "--n", 1, "--out", tmp_path / "a.jsonl", "--retries", 0,
                  "--timeout", 1)
        n_sent = sum(sent)
    finally:
        srv.shutdown()
    err = one_line_error(res)
    assert "timed out after 1s" in err and "gave up after 1 attempts" in err
    assert n_sent < len(body)


def test_retry_after_and_gave_up_message(docs, tmp_path):
    src, _ = docs

    def busy(h, sent):
        sent.append(1)
        data = b'{"error": "busy"}'
        h.send_response(429)
        h.send_header("Retry-After", "0")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    srv, url, sent = hostile(busy)
    try:
        err = one_line_error(cli(src, "--endpoint", url, "--model", "m", "--n", 1, "--out", tmp_path / "a.jsonl",
                                 "--retries", 2))
    finally:
        srv.shutdown()
    assert "HTTP 429" in err and "gave up after 3 attempts" in err and len(sent) == 3
