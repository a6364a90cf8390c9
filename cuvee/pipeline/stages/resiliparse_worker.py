"""resiliparse in a child process whose time limit the kernel enforces: the only limit its C code cannot ignore.

A Python signal handler runs between bytecodes, so it never interrupts ``extract_plain_text``: 20,000 nested
``<div>`` (220 KB) held it 15-45 s whatever ``timeout_s`` said. Here one child process per task extracts page
after page; before each page it arms ``setitimer`` (``ITIMER_PROF``: its own CPU time, or ``ITIMER_REAL``: wall
time) with the signal left at its default action, so at the limit the kernel ends the child mid-call. The
parent sees the child gone by that signal, counts a timeout and starts a new child for the next page. A page
costs one round trip through two pipes (measured by ``benchmarks/bench_resiliparse_limit.py``); a new child
costs a Python start and the resiliparse import.

The child is this file run as a script (``python -P``: nothing but the standard library and resiliparse is
imported, and no folder of the caller's can shadow a module). Messages: 8-byte little-endian length, then
UTF-8 (``surrogatepass``, so any str goes through); the reply has a one-byte status first (``T`` text, ``N`` no
text, ``E`` error message). The child says ``R`` once resiliparse is imported, or ``F`` and why not.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys

HEADER = struct.Struct("<Q")
TIMERS = {"cpu": (signal.ITIMER_PROF, signal.SIGPROF), "wall": (signal.ITIMER_REAL, signal.SIGALRM)}
START_S = 120.0  # a child that is not ready by then will not be


class PageTimeout(Exception):
    """The page ran past the limit and the kernel ended the child."""


class WorkerError(RuntimeError):
    """The child could not start (resiliparse missing, ...): every page would fail, so the task stops."""


class ResiliparseWorker:
    """``extract(html)``: resiliparse's main-content text of one page, within ``timeout_s`` of ``timer``
    (``cpu`` or ``wall``) time, or :class:`PageTimeout`; a Python error in resiliparse comes back as
    ``RuntimeError``. ``close()`` ends the child (it also ends by itself when this process goes)."""

    def __init__(self, timeout_s: float, timer: str = "cpu"):
        self.timeout_s, self.timer = timeout_s, timer
        # the parent's own backstop, should the child's timer never fire (it is descheduled on a busy node)
        self.backstop_s = timeout_s + 10.0 if timer == "wall" else 30.0 * timeout_s + 10.0
        self.proc: subprocess.Popen | None = None
        self.started = 0

    def extract(self, html: str) -> str | None:
        proc = self.proc or self._start()
        body = html.encode("utf-8", "surrogatepass")
        try:
            _write_all(proc.stdin.fileno(), HEADER.pack(len(body)) + body)
            status = _byte(proc, self.backstop_s)
            (n,) = HEADER.unpack(_exactly(proc.stdout, HEADER.size))
            reply = _exactly(proc.stdout, n)
        except TimeoutError:  # the parent's backstop: alive, but past any reasonable time
            self._end(proc, kill=True)
            raise PageTimeout() from None
        except (BrokenPipeError, EOFError):
            if self._end(proc, kill=False) == -TIMERS[self.timer][1]:
                raise PageTimeout() from None
            raise RuntimeError(f"the resiliparse worker process ended ({_ended(proc.returncode)})") from None
        if status == b"E":
            raise RuntimeError(reply.decode("utf-8", "replace"))
        return reply.decode("utf-8", "surrogatepass") if status == b"T" else None

    def close(self) -> None:
        if self.proc is not None:
            self._end(self.proc, kill=False)

    def _end(self, proc: subprocess.Popen, kill: bool) -> int:
        """Ends the child (closing its input lets it return; a timer has ended it already, or ``kill``) and
        returns its exit status."""
        self.proc = None
        if kill:
            proc.kill()
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        return proc.returncode

    def _start(self) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-P", os.path.abspath(__file__), self.timer, repr(self.timeout_s)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        try:
            ready = _byte(proc, START_S)
            why = "" if ready == b"R" else _exactly(proc.stdout, HEADER.unpack(_exactly(proc.stdout, HEADER.size))[0])
        except (EOFError, TimeoutError):
            ready, why = b"", b""
        if ready != b"R":
            status = self._end(proc, kill=True)
            raise WorkerError(f"extract: the resiliparse worker process did not start "
                              f"({why.decode('utf-8', 'replace') or _ended(status)})")
        self.proc, self.started = proc, self.started + 1
        return proc


def _byte(proc: subprocess.Popen, wait_s: float) -> bytes:
    """The next byte the child sends, waiting at most ``wait_s`` (TimeoutError) for it."""
    if not select.select([proc.stdout], [], [], wait_s)[0]:
        raise TimeoutError
    return _exactly(proc.stdout, 1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exactly(stream, n: int) -> bytes:
    """``n`` bytes from an unbuffered pipe (a read may return fewer), or EOFError."""
    parts, left = [], n
    while left:
        data = stream.read(left)
        if not data:
            raise EOFError
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _serve(timer: str, timeout_s: float) -> None:
    """The child: pages in, texts out, each page under an armed timer whose signal ends this process."""
    which, sig = TIMERS[timer]
    inp, out = sys.stdin.buffer, sys.stdout.buffer

    def send(status: bytes, body: bytes) -> None:
        out.write(status + HEADER.pack(len(body)) + body)
        out.flush()

    try:
        from resiliparse.extract.html2text import extract_plain_text
    except Exception as e:  # noqa: BLE001 - said to the parent, which stops the task with it
        send(b"F", f"{type(e).__name__}: {e}".encode("utf-8", "replace"))
        return
    signal.signal(sig, signal.SIG_DFL)  # default action: terminate, and the kernel delivers it mid-C-call
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})  # a mask is inherited through exec; never let it be blocked
    out.write(b"R")
    out.flush()
    while True:
        head = inp.read(HEADER.size)
        if len(head) < HEADER.size:
            return  # the parent closed the pipe (or is gone)
        (n,) = HEADER.unpack(head)
        html = inp.read(n).decode("utf-8", "surrogatepass")
        signal.setitimer(which, timeout_s)
        try:
            text = extract_plain_text(html, main_content=True)
        except Exception as e:  # noqa: BLE001 - counted by the parent as an extraction error
            signal.setitimer(which, 0)
            send(b"E", f"{type(e).__name__}: {e}".encode("utf-8", "replace"))
            continue
        signal.setitimer(which, 0)
        if text is None:
            send(b"N", b"")
        else:
            send(b"T", text.encode("utf-8", "surrogatepass"))


if __name__ == "__main__":
    _serve(sys.argv[1], float(sys.argv[2]))
