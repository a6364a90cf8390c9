"""Start a real cuvee command in its own session, kill -9 (or pause) its whole process group when a trigger
fires, snapshot folders, and judge refusals: the pieces every fault-injection scenario needs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from cuvee.kernel.atomic import TEMP_SUFFIX, is_temp

REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.01


def env(extra: dict | None = None) -> dict:
    """The child's environment: tests/ on the path (the slow step of recipes), no downloads."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e.setdefault("HF_HUB_OFFLINE", "1")
    e.setdefault("TRANSFORMERS_OFFLINE", "1")
    e.update(extra or {})
    return e


def cuvee(*args: str) -> list[str]:
    """``python -m cuvee.cli ARGS``: the real CLI, as a user runs it."""
    return [sys.executable, "-m", "cuvee.cli", *map(str, args)]


class Proc:
    """One command started in its own session, so SIGKILL / SIGSTOP reach its worker processes too."""

    def __init__(self, argv: list[str], log: Path):
        self._fh = open(log, "ab")
        self._fh.write(f"\n$ {' '.join(map(str, argv))}\n".encode())
        self._fh.flush()
        self.popen = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, env=env(),
                                      start_new_session=True, cwd=REPO)
        self.pid = self.popen.pid
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def poll(self) -> int | None:
        rc = self.popen.poll()
        if rc is not None:
            self._fh.close()
        return rc

    def finish(self, timeout: float = 600) -> int:
        rc = self.popen.wait(timeout=timeout)
        self._fh.close()
        return rc

    def _signal_group(self, sig) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def cont(self) -> None:
        self._signal_group(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL to the whole group, then wait until none of its processes is left: a straggler
        (forkserver, pool worker) could still write a file after we look."""
        self._signal_group(signal.SIGKILL)
        self.popen.wait()
        self._fh.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)


# --------------------------------------------------------------------------------------------- triggers
class Trigger:
    """Fires when ``cond(subject, t_since_launch, ctx)`` is true; ``ctx`` is a dict the condition may keep
    state in (e.g. when a job was first seen)."""

    def __init__(self, label: str, cond):
        self.label = label
        self.cond = cond


def t_after_launch(t_s: float) -> Trigger:
    return Trigger(f"t={t_s:.1f}s after launch", lambda s, t, ctx: t >= t_s)


def t_after_bound(t_s: float, plan: str = ".cuvee-plan.json") -> Trigger:
    """``t_s`` seconds after the folder's plan appeared (the work began): a random point inside the work, not
    inside the interpreter's start-up, whatever the machine's load. The subject has the folder as ``d`` or ``out``."""
    def cond(s, t, ctx):
        if "bound" not in ctx and (getattr(s, "d", None) or s.out).joinpath(plan).exists():
            ctx["bound"] = t
        return "bound" in ctx and t - ctx["bound"] >= t_s

    return Trigger(f"{t_s:.2f}s after the plan was bound (random)", cond)


def when(label: str, pred) -> Trigger:
    """A trigger on the subject alone: ``pred(subject) -> bool``."""
    return Trigger(label, lambda s, t, ctx: pred(s))


def thin(triggers: list[Trigger], n: int) -> list[Trigger]:
    """``n`` of the triggers, spread evenly over the list (first and last kept; one: the middle one, mid-work)."""
    if len(triggers) <= n:
        return triggers
    if n == 1:
        return [triggers[len(triggers) // 2]]
    idx = sorted({round(i * (len(triggers) - 1) / max(1, n - 1)) for i in range(n)})
    return [triggers[i] for i in idx]


def run_until(argv: list[str], subject, trig: Trigger, log: Path) -> tuple[bool, dict]:
    """Launch; SIGKILL the group when the trigger fires. Returns (killed?, subject.state() at death or {"rc": rc})."""
    p = Proc(argv, log)
    ctx: dict = {}
    while True:
        if p.poll() is not None:
            return False, {"rc": p.popen.returncode}
        if trig.cond(subject, p.elapsed(), ctx):
            p.kill()
            return True, subject.state()
        time.sleep(POLL_S)


# -------------------------------------------------------------------------------------------- folders
def is_lock(name: str) -> bool:
    """cuvee's lock files (``.cuvee.lock``, an output file's sibling ``.<name>.cuvee.lock``): a refused process
    may open them, so they are not part of a folder's content."""
    return name == ".cuvee.lock" or name.endswith(".cuvee.lock")


def snapshot(folder: Path) -> dict[str, str]:
    """sha1 of every file under ``folder`` but the locks, for no-change checks."""
    snap = {}
    if folder.exists():
        for p in sorted(folder.rglob("*")):
            if p.is_file() and not is_lock(p.name):
                snap[str(p.relative_to(folder))] = hashlib.sha1(p.read_bytes()).hexdigest()
    return snap


def snapshot_diff(before: dict, after: dict) -> str:
    """The files that differ, for a message (empty when equal)."""
    keys = sorted(set(before) | set(after))
    diff = [k + (" (new)" if k not in before else " (gone)" if k not in after else " (changed)")
            for k in keys if before.get(k) != after.get(k)]
    return ", ".join(diff[:6]) + (f" (+{len(diff) - 6})" if len(diff) > 6 else "")


def lock_held(lock: Path) -> bool:
    """A FolderLock writes ``pid N on HOST since ...`` into its file once the flock is taken; a process killed with
    the lock leaves that line behind, so the holder must also be alive (probing the flock itself could make the
    real holder's non-blocking acquire fail)."""
    try:
        head = lock.read_bytes().split()
    except OSError:
        return False
    if len(head) < 2 or head[0] != b"pid" or not head[1].isdigit():
        return False
    try:
        os.kill(int(head[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return True


class FileSave:
    """The bytes and times of a file, to put it back exactly (size, content and mtime) after an edit."""

    def __init__(self, path: Path):
        self.path = path
        self.data = path.read_bytes()
        st = path.stat()
        self.times = (st.st_atime_ns, st.st_mtime_ns)

    def restore(self) -> None:
        self.path.write_bytes(self.data)
        os.utime(self.path, ns=self.times)


def temporaries(out: Path) -> list[str]:
    """Files below ``out`` that a writer left as temporaries, by the kernel's own rule (the one its sweep uses)."""
    return [n for n in FolderWatch(out).files() if TEMP_SUFFIX in n or is_temp(Path(n))]


def source_b_changes(scn) -> list:
    """The changed inputs of a command reading sources a and b (mix, tokenizer train): source b's file rewritten at
    the same size, and the config pointed at another file for b (``scn.other``)."""
    def rewritten():
        return rewrite_same_size(scn.tmp / "in" / "b.jsonl", swap_case_edit).restore

    return [("a source file rewritten at the same size", rewritten, None),
            ("another source file for source b (config edited)", lambda: (lambda: None),
             lambda out: scn.argv(out, scn.other))]


def rewrite_same_size(path: Path, edit) -> FileSave:
    """Rewrite ``path`` in place with ``edit(bytes) -> bytes`` (same length), mtime moved 1 s on; returns
    what restores it."""
    saved = FileSave(path)
    new = edit(saved.data)
    assert len(new) == len(saved.data) and new != saved.data
    path.write_bytes(new)
    os.utime(path, ns=(saved.times[0], saved.times[1] + 1_000_000_000))
    return saved


_TEXT_START = re.compile(rb'("text": ?")([A-Za-z])')


def swap_case_edit(data: bytes) -> bytes:
    """Flip the case of the first letter of every JSONL record's text: same size, other content."""
    return _TEXT_START.sub(lambda m: m.group(1) + bytes([m.group(2)[0] ^ 0x20]), data)


# ------------------------------------------------------------------------------------------- refusals
def one_line_refusal(r: subprocess.CompletedProcess) -> tuple[bool, str]:
    """(a refusal as the house rules ask: non-zero exit, exactly one line on stderr, no traceback; that line)."""
    err = [ln for ln in (r.stderr or "").splitlines() if ln.strip()]
    out = [ln for ln in (r.stdout or "").splitlines() if ln.strip()]
    ok = r.returncode != 0 and len(err) == 1 and "Traceback" not in (r.stderr or "") + (r.stdout or "")
    return ok, (err or out or [""])[-1].strip()


def run_once(argv: list[str], log: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, check=False, capture_output=True, text=True, env=env(), cwd=REPO, timeout=timeout)
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(map(str, argv))}\n{r.stdout}{r.stderr}[rc {r.returncode}]\n")
    return r


def finish(fails: list[str], keep: bool, tmp: Path) -> int:
    """Print the failures, keep the temporary folder when asked or when something failed; the exit status."""
    import shutil

    if fails:
        print("\nFAILURES:")
        for f in fails:
            print("  " + f)
    if keep or fails:
        print(f"kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if fails else 0


# ------------------------------------------------------------------------------------------ products
OWN = (".cuvee.lock", ".cuvee-owner.json", ".cuvee-plan.json")  # cuvee's own files: not the product


def product(folder: Path, skip=(), norm=None) -> dict[str, bytes]:
    """Every file of a command's product under ``folder`` (relative name -> bytes), cuvee's own files, locks and
    names ``skip`` matches (a predicate on the relative name) left out; ``norm(name, data)`` takes out what may
    differ between two correct runs (the folder's own path, timings)."""
    out = {}
    if folder.exists():
        for p in sorted(folder.rglob("*")):
            rel = str(p.relative_to(folder))
            if p.is_file() and p.name not in OWN and not is_lock(p.name) and not (skip and skip(rel)):
                data = p.read_bytes()
                out[rel] = norm(rel, data) if norm else data
    return out


def compare_products(want: dict[str, bytes], got: dict[str, bytes]) -> dict:
    """File by file: a missing file is a loss, one the reference lacks an extra, other bytes a change."""
    return {"dup": 0, "loss": sum(1 for k in want if k not in got), "extra": sum(1 for k in got if k not in want),
            "changed": sum(1 for k in got if k in want and got[k] != want[k])}


def without_keys(data: bytes, keys: tuple[str, ...], path: Path | None = None) -> bytes:
    """A JSON document with ``keys`` removed at any depth (and ``path`` written as OUT), for comparing two runs."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in keys}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x.replace(str(path), "OUT") if path is not None and isinstance(x, str) else x

    return json.dumps(strip(json.loads(data)), sort_keys=True).encode()


class FolderWatch:
    """A folder a command writes its product into: when its plan appeared (the work began) and which of its
    files exist; ``tick`` learns the reference run's timeline (plan bound -> exit)."""

    def __init__(self, out: Path, plan_dir: Path | None = None):
        self.out = out
        self.plan_dir = plan_dir or out
        self.bound_at: float | None = None
        self.t_last = 0.0

    def bound(self) -> bool:
        return (self.plan_dir / ".cuvee-plan.json").exists()

    def files(self) -> list[str]:
        try:
            return sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*")
                          if p.name not in OWN and not is_lock(p.name) and p.is_file())
        except OSError:  # a file renamed or removed while listed
            return []

    def has(self, name: str) -> bool:
        return (self.out / name).exists()

    def tick(self, t: float) -> None:
        if self.bound_at is None and self.bound():
            self.bound_at = t
        self.t_last = t

    def work_s(self, default: float = 1.0) -> float:
        """Seconds from the plan's binding to the end, in the reference run."""
        return max(0.05, self.t_last - self.bound_at) if self.bound_at is not None else default

    def state(self) -> dict:
        files = self.files()
        running = "startup" if not self.bound() else f"{len(files)} file(s) written" if files else "bound"
        return {"running": running, "files": ",".join(files[:6]) + (" ..." if len(files) > 6 else "")}


def t_into_work(t_s: float, label: str | None = None) -> Trigger:
    """``t_s`` seconds after the subject's work began (``subject.bound()``: its plan bound, its lock taken)."""
    def cond(s, t, ctx):
        if "bound" not in ctx and s.bound():
            ctx["bound"] = t
        return "bound" in ctx and t - ctx["bound"] >= t_s

    return Trigger(label or f"{t_s:.2f}s into the work", cond)


class FileWatch(FolderWatch):
    """A user-named output file cuvee owns: its work begins when its sibling lock is taken; the state says whether
    its temporary, the file and its ``<file>.json`` marker exist."""

    def __init__(self, out: Path):
        super().__init__(out.parent)
        self.file = out
        self.lock = out.parent / f".{out.name}.cuvee.lock"

    def bound(self) -> bool:
        return lock_held(self.lock)

    def temporaries(self) -> list[str]:
        try:
            return sorted(p.name for p in self.out.glob(f".{self.file.name}.*"))
        except OSError:
            return []

    def state(self) -> dict:
        tmp = [n for n in self.temporaries() if not is_lock(n)]
        running = ("written" if self.file.exists() else "temporary being written" if tmp else
                   "lock taken" if self.bound() else "startup")
        marker = Path(str(self.file) + ".json")
        return {"running": running, "marker": "yes" if marker.exists() else "", "tmp": tmp}


def quiet(server):
    """A local LLM server whose clients are killed on purpose: their reset connections are not worth a traceback."""
    server.httpd.handle_error = lambda request, client_address: None
    return server
