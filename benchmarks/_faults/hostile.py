"""Hostile inputs for ``benchmarks/hostile_inputs.py``: each case runs the real CLI on an input a hostile or
careless user gives and says what it observed and whether that is what the house rules ask (a counted drop,
one line and exit 1, or the right output), within a time limit that a hang would pass.

A case is a function ``case(tmp: Path, log: Path) -> Observed``; ``CASES`` lists them by issue #37's failure
number. Every case writes its own inputs under ``tmp`` (no network, nothing shared)."""

from __future__ import annotations

import json
import random
import resource
import string
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from _faults.common import REPO, cuvee, env, one_line_refusal, run_once
from _warcgen import Page, write_warc


@dataclass
class Observed:
    ok: bool
    what: str  # what happened, in one line
    seconds: float


def _yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _timed(argv: list[str], log: Path, timeout: float, **kw) -> tuple[subprocess.CompletedProcess | None, float]:
    """The command's result, or None when it ran past ``timeout`` (a hang); its wall seconds."""
    t0 = time.monotonic()
    try:
        r = run_once(argv, log, timeout=timeout) if not kw else _run_with(argv, log, timeout, **kw)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0
    return r, time.monotonic() - t0


def _run_with(argv: list[str], log: Path, timeout: float, preexec_fn=None) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, env=env(), cwd=REPO, timeout=timeout,
                       preexec_fn=preexec_fn)
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(map(str, argv))}\n{r.stdout}{r.stderr}[rc {r.returncode}]\n")
    return r


def _lines(r: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]


# --------------------------------------------------------------------- 3: quality_ensemble, extreme weights
def _ensemble_run(tmp: Path, log: Path, tag: str, combine: str, weights: tuple[float, float] | None):
    members = [{"key": "a_score"}, {"key": "b_score"}]
    if weights:
        members = [{**m, "weight": w} for m, w in zip(members, weights)]
    recipe = {"name": f"ens_{tag}", "input": {"paths": [str(tmp / "ens_in" / "*.jsonl")], "format": "jsonl"},
              "stages": [{"stage": "quality_ensemble", "members": members, "combine": combine}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2, "workers": 1}}
    r, dt = _timed(cuvee("run", _yaml(tmp / f"ens_{tag}.yaml", recipe), "--run-dir", tmp / f"ens_{tag}"), log, 300)
    buckets = {}
    if r is not None and r.returncode == 0:
        import gzip

        for f in sorted((tmp / f"ens_{tag}" / "output").rglob("*.jsonl*")):
            opener = gzip.open if f.suffix == ".gz" else open
            with opener(f, "rt") as fh:
                for line in fh:
                    d = json.loads(line)
                    buckets[d["id"]] = d["metadata"].get("quality_bucket")
    return r, dt, buckets


def ensemble_extreme_weights(tmp: Path, log: Path) -> Observed:
    """Two equal weights of 1e308 (their sum is inf) and of 5e-324, every member present on 60 documents:
    the buckets must be combine: mean's, document for document."""
    rng = random.Random(37)
    (tmp / "ens_in").mkdir()
    for part in range(2):
        rows = [{"id": f"{part}-{i}", "text": f"document {part} {i}",
                 "metadata": {"a_score": rng.random(), "b_score": rng.random()}} for i in range(30)]
        (tmp / "ens_in" / f"p{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r, t_total, mean = _ensemble_run(tmp, log, "mean", "mean", None)
    if not mean:
        return Observed(False, f"combine: mean failed: {_lines(r)[-1] if r else 'timed out'}", t_total)
    seen = []
    for tag, w in (("huge", (1e308, 1e308)), ("tiny", (5e-324, 5e-324))):
        r, dt, got = _ensemble_run(tmp, log, tag, "weighted", w)
        t_total += dt
        if r is None or r.returncode != 0:
            return Observed(False, f"weights {w[0]:g}: {_lines(r)[-1] if r else 'timed out'}", t_total)
        moved = sum(got.get(k) != v for k, v in mean.items())
        seen.append(f"{w[0]:g}: {moved} of {len(mean)} moved")
        if moved:
            return Observed(False, "; ".join(seen), t_total)
    return Observed(True, f"buckets equal mean's ({'; '.join(seen)})", t_total)


# ------------------------------------------------------------- 5: resiliparse on deeply nested pages
def _nested(n: int) -> bytes:
    return ("<html><body>" + "<div>" * n + "deep" + "</div>" * n + "</body></html>").encode()


def resiliparse_nested_pages(tmp: Path, log: Path) -> Observed:
    """Two pages of 20,000 nested <div> (220 KB), one of 100,000 (1.1 MB, under max_input_chars) and 20
    ordinary pages, extractor: resiliparse with timeout_s 1: the three must be counted timeouts within
    seconds, the others extracted."""
    ordinary = [Page(f"http://ok.example/{i}", (f"<html><body><article><h1>Page {i}</h1>" + "".join(
        f"<p>Paragraph {j} of page {i} says something plain about the weather and the river.</p>" for j in range(8))
        + "</article></body></html>").encode()) for i in range(20)]
    hostile = [Page("http://deep.example/a", _nested(20_000)), Page("http://deep.example/b", _nested(20_000)),
               Page("http://deep.example/c", _nested(100_000))]
    write_warc(str(tmp / "nested.warc.gz"), hostile[:2] + ordinary[:10] + hostile[2:] + ordinary[10:])
    recipe = {"name": "nested", "input": {"paths": [str(tmp / "nested.warc.gz")]},
              "stages": [{"stage": "response_check"}, {"stage": "extract", "extractor": "resiliparse", "timeout_s": 1.0}],
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1}}
    r, dt = _timed(cuvee("run", _yaml(tmp / "nested.yaml", recipe), "--run-dir", tmp / "nested"), log, 240)
    if r is None:
        return Observed(False, "still running after 240 s", dt)
    if r.returncode != 0:
        return Observed(False, f"exit {r.returncode}: {_lines(r)[-1]}", dt)
    stats = json.loads((tmp / "nested" / "stats.json").read_text())
    reasons = stats["accounting"]["by_reason"]
    timeouts = reasons.get("extract/extraction_timeout", 0)
    ok = timeouts == 3 and stats["accounting"]["kept"] == 20 and stats["accounting"]["balanced"]
    return Observed(ok, f"{timeouts} counted extraction_timeout, {stats['accounting']['kept']} of 20 ordinary kept, "
                        f"{dt:.1f} s for the run", dt)


# --------------------------------------------------------------------- 6: mix search, many mixtures
def _search_config(tmp: Path, mixtures: int) -> Path:
    for name in ("a", "b", "t"):
        path = tmp / f"src_{name}.jsonl"
        if not path.exists():
            path.write_text("".join(json.dumps({"text": f"{name} document {i} " + "word " * 50}) + "\n" for i in range(50)))
    cfg = {"name": f"many{mixtures}", "tokenizer": "bytes256.tiktoken", "mixtures": mixtures,
           "sources": [{"name": n, "paths": str(tmp / f"src_{n}.jsonl")} for n in ("a", "b")],
           "targets": [{"name": "t", "paths": str(tmp / "src_t.jsonl")}],
           "proxy": {"tokens": 4096, "train": {"model": {"dim": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 64},
                                               "data": {"seq_len": 64}}}}
    return _yaml(tmp / f"search{mixtures}.yaml", cfg)


def mix_search_too_many_mixtures(tmp: Path, log: Path) -> Observed:
    """2 sources x 2000 mixtures (validation allows 100,000): refused in one line, in seconds."""
    r, dt = _timed(cuvee("mix", "search", _search_config(tmp, 2000), "--dry-run"), log, 180)
    if r is None:
        return Observed(False, "--dry-run still silent after 180 s", dt)
    ok, line = one_line_refusal(r)
    return Observed(ok and "mixtures: 2000" in line and dt < 60, line[line.find("mixtures:"):][:170], dt)


def mix_search_many_mixtures_that_fit(tmp: Path, log: Path) -> Observed:
    """2 sources x 1000 mixtures (within what random draws place 1e-3 apart): a plan of 1000 distinct rows."""
    r, dt = _timed(cuvee("mix", "search", _search_config(tmp, 1000), "--dry-run", "--json"), log, 180)
    if r is None:  # the sampler takes seconds (the case above): the rest is the dry run's own work
        return Observed(False, "--dry-run still running after 180 s", dt)
    if r.returncode != 0:
        return Observed(False, f"exit {r.returncode}: {_lines(r)[-1][:160]}", dt)
    rows = json.loads(r.stdout)["mixtures"]
    ws = sorted(w[0] for w in rows[3:])  # the drawn rows (after the natural mix and the two corners)
    gap = min((b - a) * 2 for a, b in zip(ws, ws[1:]))  # L1 between neighbours of a two-source segment
    ok = len(rows) == 1000 and gap >= 1e-3 - 1e-12
    return Observed(ok, f"{len(rows)} mixtures, drawn ones at least {gap:.2e} apart (L1)", dt)


_SAMPLE = """
import sys, time, numpy as np
from cuvee.mixsearch import sampling
n = int(sys.argv[1])
t0 = time.monotonic()
try:
    rows, _ = sampling.sample_mixtures(n, [1, 1], np.zeros(2), np.ones(2), 0)
except sampling.BoundsError as e:
    print(f"refused in {time.monotonic() - t0:.1f} s: {e}")
else:
    ws = np.sort(rows[3:, 0])
    print(f"{len(rows)} rows in {time.monotonic() - t0:.1f} s, drawn ones >= {2 * np.diff(ws).min():.2e} apart (L1)")
"""


def sampler_up_to_the_bound(tmp: Path, log: Path) -> Observed:
    """The sampler alone (what a search and its dry run call), 2 sources on the whole segment, for 1000 and for
    1498 mixtures (the most validation lets through): distinct rows, or one line, in bounded time."""
    seen, total, ok = [], 0.0, True
    for n in (1000, 1498):
        r, dt = _timed([sys.executable, "-c", _SAMPLE, str(n)], log, 120)
        total += dt
        line = "timed out after 120 s" if r is None else (_lines(r) or ["(nothing)"])[-1]
        good = r is not None and r.returncode == 0 and (line.startswith(f"{n} rows") or line.startswith("refused"))
        ok = ok and good and "Traceback" not in (r.stderr if r else "")
        seen.append(f"{n}: {line[:120]}")
    return Observed(ok, "; ".join(seen), total)


# ---------------------------------------------------------------------------------------- 7: out of room
def _room_inputs(tmp: Path) -> Path:
    rng = random.Random(0)
    (tmp / "room_in").mkdir(exist_ok=True)
    for part in range(2):
        with open(tmp / "room_in" / f"in{part}.jsonl", "w") as f:
            for i in range(1500):
                words = (("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))) for _ in range(60))
                f.write(json.dumps({"id": f"{part}-{i}", "text": " ".join(words)}) + "\n")
    recipe = {"name": "room", "input": {"paths": [str(tmp / "room_in" / "*.jsonl")], "format": "jsonl"},
              "stages": [{"stage": "length", "min_chars": 10}], "output": {"format": "jsonl"},
              "executor": {"kind": "local", "tasks": 2, "workers": 2}}
    return _yaml(tmp / "room.yaml", recipe)


def _quiet_failure(r: subprocess.CompletedProcess | None) -> tuple[bool, str]:
    if r is None:
        return False, "timed out"
    lines = _lines(r)
    ok = r.returncode == 1 and "Traceback" not in r.stderr and len(lines) <= 3 and lines[-1].startswith("Error: ")
    return ok, f"exit {r.returncode}, {len(lines)} console line(s), last: {lines[-1][:110] if lines else ''}"


def disk_full(tmp: Path, log: Path) -> Observed:
    """The run folder on a 300 KB tmpfs (as root; else the case says so and is skipped): a task fails mid-write
    in a datatrove worker. One Error line and no traceback; after the tmpfs grows, the same command finishes."""
    recipe = _room_inputs(tmp)
    mnt = tmp / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)], capture_output=True).returncode:
        return Observed(True, "skipped: cannot mount a tmpfs here (not root); the file size case covers it", 0.0)
    try:
        argv = cuvee("run", recipe, "--run-dir", mnt / "run")
        r, dt = _timed(argv, log, 300)
        ok, what = _quiet_failure(r)
        subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True)
        again, dt2 = _timed(argv, log, 300)
        done = again is not None and again.returncode == 0
        return Observed(ok and done, f"{what}; with room, the rerun {'finished' if done else 'failed'}", dt + dt2)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def file_size_limit(tmp: Path, log: Path) -> Observed:
    """The same with RLIMIT_FSIZE (ulimit -f, any user): writes past 48 KB fail with EFBIG in the task workers."""
    recipe = _room_inputs(tmp)
    argv = cuvee("run", recipe, "--run-dir", tmp / "fsize")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    r, dt = _timed(argv, log, 300, preexec_fn=limit)
    ok, what = _quiet_failure(r)
    logs = "".join(f.read_text() for f in (tmp / "fsize" / "logs").rglob("task_*.log")) if r else ""
    in_log = "Traceback" in logs
    again, dt2 = _timed(argv, log, 300)
    done = again is not None and again.returncode == 0
    return Observed(ok and in_log and done, f"{what}; traceback in the task log: {in_log}; without the limit the "
                                            f"rerun {'finished' if done else 'failed'}", dt + dt2)

# --------------------------------------------------------------------- 1: task code through a YAML merge key
LM_ROWS = [{"question": f"Which material is item {i} of the old inventory made of?", "choices": ["wood", "stone"],
            "label": i % 2} for i in range(3)]


def task_code_through_a_merge_key(tmp: Path, log: Path) -> Observed:
    """An lm-eval task whose ``include:`` arrives through a merge key, the included file naming a ``!function``
    that writes a sentinel: ``cuvee mix search`` with that ``lm_eval:`` target must refuse it, running nothing."""
    sentinel = tmp / "payload_ran"
    (tmp / "payload.py").write_text(f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('ran')\n"
                                    "def process_docs(ds):\n    return ds\n")
    (tmp / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LM_ROWS))
    (tmp / "inc.yaml").write_text("process_docs: !function payload.process_docs\n")
    body = {"task": "evil", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": "items.jsonl"}},
            "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{question}}",
            "doc_to_choice": "{{choices}}", "doc_to_target": "{{label}}"}
    task = tmp / "evil.yaml"
    task.write_text("metadata: &b {include: inc.yaml}\n<<: *b\n" + yaml.safe_dump(body, sort_keys=False))
    cfg = yaml.safe_load(_search_config(tmp, 3).read_text())
    cfg["targets"] = [{"name": "qa", "lm_eval": str(task)}]
    r, dt = _timed(cuvee("mix", "search", _yaml(tmp / "search_task.yaml", cfg), "--dry-run"), log, 180)
    if r is None:
        return Observed(False, "still running after 180 s", dt)
    ok, line = one_line_refusal(r)
    ran = sentinel.exists()
    return Observed(ok and not ran and "inc.yaml" in line, f"{line[:150]}; payload ran: {ran}", dt)


# --------------------------------------------------------------------- 2: a Latin-1 eval file
def latin1_eval_file(tmp: Path, log: Path) -> Observed:
    """A decontaminate eval file in Latin-1 with an accented item: refused in one line before work (it was read
    with errors='replace', its accented n-grams lost, and counted checked, found 0)."""
    item = "Le garçon mangea une crème brûlée très sucrée au café près de la fenêtre pendant que son frère lisait"
    evals = tmp / "eval.txt"
    evals.write_bytes(f"first item\n{item}\n".encode("latin-1"))
    recipe = _yaml(tmp / "recipe.yaml", {"name": "latin1", "input": {"paths": [str(REPO / "data" / "sample")]},
                                         "stages": [{"stage": "decontaminate", "eval_sets": [{"path": str(evals)}]}]})
    r, dt = _timed(cuvee("run", recipe, "--run-dir", tmp / "run"), log, 180)
    if r is None:
        return Observed(False, "still running after 180 s", dt)
    ok, line = one_line_refusal(r)
    made = (tmp / "run").exists()
    return Observed(ok and "not UTF-8" in line and not made, f"{line[line.find('eval.txt'):][:150]}; run folder "
                                                             f"made: {made}", dt)


# --------------------------------------------------------------------- 4: an answer with a lone surrogate
def _rephrase_inputs(tmp: Path, docs: list[dict]) -> Path:
    run = tmp / "run"
    (run / "output").mkdir(parents=True)
    (run / "stats.json").write_text("{}")
    with open(run / "output" / "part.jsonl", "w") as f:  # json.dumps escapes a lone surrogate as \ud800
        f.writelines(json.dumps(d) + "\n" for d in docs)
    return run


def rephrase_lone_surrogate(tmp: Path, log: Path) -> Observed:
    """cuvee's OpenAI-compatible server on loopback answers one document with a lone surrogate (escaped in its
    JSON, as a broken server sends it): a counted drop, and the rerun finishes asking nothing again."""
    from cuvee.classifiers.llm_server import serve
    from cuvee.rephrase.cli import load_style

    style = load_style("wikipedia")

    def respond(prompt: str, max_tokens: int, chat: bool = True):
        doc = style.extract(prompt) or ""
        text = "Here \ud800 broken" if "BAD-ANSWER" in prompt else " ".join(reversed(doc.split()))
        return text, len(prompt.split()), len(text.split())

    texts = [f"Document {i} tells of the river, the valley and the harbour town number {i}." for i in range(5)]
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)] + [{"id": "bad", "text": "BAD-ANSWER " + texts[0]}]
    run, out = _rephrase_inputs(tmp, docs), tmp / "rephrased"
    with serve(responder=respond, model_name="m") as srv:
        argv = cuvee("rephrase", run, "--out", out, "--prompt", "wikipedia", "--model", "m", "--endpoint", srv.url,
                     "--max-input-tokens", "0", "--retries", "0")
        r, dt = _timed(argv, log, 180)
        asked = srv.requests
        again, dt2 = _timed(argv, log, 180)
        asked_again = srv.requests - asked
    if r is None or again is None:
        return Observed(False, "still running after 180 s", dt + dt2)
    try:
        first = json.loads(r.stdout)["this_run"]
        second = json.loads(again.stdout)["this_run"]
    except (ValueError, KeyError):
        return Observed(False, f"rc {r.returncode}/{again.returncode}: {_lines(r)[-1:]}", dt + dt2)
    ok = (r.returncode == 0 and first["dropped_by_reason"] == {"invalid_unicode": 1} and first["kept"] == 5
          and again.returncode == 0 and second["already_done"] == 6 and asked_again == 0)
    return Observed(ok, f"kept {first['kept']}, dropped {first['dropped_by_reason']}; rerun: already done "
                        f"{second.get('already_done')}, {asked_again} requests", dt + dt2)


# --------------------------------------------------------------------- also: the same rules on every command
def rephrase_where_on_a_missing_field(tmp: Path, log: Path) -> Observed:
    """``--where`` on a field no document has: refused in one line, as ``cuvee mix`` refuses it (it exited 0
    having generated nothing)."""
    run = _rephrase_inputs(tmp, [{"id": f"d{i}", "text": f"Document {i} about rivers."} for i in range(3)])
    r, dt = _timed(cuvee("rephrase", run, "--out", tmp / "out", "--prompt", "wikipedia", "--model", "m",
                         "--endpoint", "http://127.0.0.1:9", "--max-input-tokens", "0",
                         "--where", "{page_type: {gt: 5}}"), log, 120)
    if r is None:
        return Observed(False, "still running after 120 s", dt)
    ok, line = one_line_refusal(r)
    return Observed(ok and "page_type" in line, line[:160], dt)


def eval_data_with_a_shell_substitution(tmp: Path, log: Path) -> Observed:
    """``CUVEE_EVAL_DATA`` holding ``$(``: one line naming it (it was 'unexpected AttributeError'); no shell runs."""
    evals = tmp / "eval.txt"
    evals.write_text("an item about the harbour town and its river valley in the north of the country\n")
    recipe = _yaml(tmp / "recipe.yaml", {"name": "envvar", "input": {"paths": [str(REPO / "data" / "sample")]},
                                         "stages": [{"stage": "decontaminate",
                                                     "eval_sets": [{"path": "${CUVEE_EVAL_DATA}/eval.txt"}]}]})
    argv = cuvee("validate", recipe)
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**env(), "CUVEE_EVAL_DATA": f"$(touch {tmp}/shell_ran)"})
    with open(log, "a") as fh:
        fh.write(f"\n$ CUVEE_EVAL_DATA='$(...)' {' '.join(map(str, argv))}\n{r.stdout}{r.stderr}[rc {r.returncode}]\n")
    ok, line = one_line_refusal(r)
    ran = (tmp / "shell_ran").exists()
    return Observed(ok and "CUVEE_EVAL_DATA" in line and not ran, f"{line[:160]}; shell ran: {ran}", 0.0)


CASES = [  # (issue #37 failure, name, case); 0: the "also" line
    (1, "task code through a YAML merge key, lm_eval target of mix search", task_code_through_a_merge_key),
    (2, "decontaminate eval file in Latin-1", latin1_eval_file),
    (3, "quality_ensemble weighted, equal weights 1e308 and 5e-324", ensemble_extreme_weights),
    (4, "rephrase answer with a lone surrogate", rephrase_lone_surrogate),
    (5, "extract resiliparse, 20,000 and 100,000 nested <div>", resiliparse_nested_pages),
    (6, "mix search, 2 sources x 2000 mixtures", mix_search_too_many_mixtures),
    (6, "mixture sampler, 2 sources x 1000 and x 1498", sampler_up_to_the_bound),
    (6, "mix search --dry-run, 2 sources x 1000 mixtures", mix_search_many_mixtures_that_fit),
    (7, "cuvee run out of disk (300 KB tmpfs)", disk_full),
    (7, "cuvee run past the file size limit (ulimit -f)", file_size_limit),
    (0, "rephrase --where on a field no document has", rephrase_where_on_a_missing_field),
    (0, "CUVEE_EVAL_DATA holding $(", eval_data_with_a_shell_substitution),
]
