"""Fault injection: kill -9 a real `cuvee run` at many points, resume it, count duplicates / losses / refusals.

    python benchmarks/fault_injection.py                  # 24 kill points, seed 0
    python benchmarks/fault_injection.py --points 40 --seed 1 --keep

What it does (no network, no shared data: it writes its own input into a temporary folder):

1. Input: 6 JSONL.gz files of synthetic documents with planted exact duplicates (same text, other id),
   near duplicates (a few words changed: MinHash), boilerplate lines repeated across documents (line
   dedup) and short documents (length filter).
2. Recipe: ``length`` -> slow pass-through -> ``exact_dedup`` -> slow -> ``minhash_dedup`` -> slow ->
   ``line_dedup`` -> slow -> JSONL.gz output; 4 tasks, 2 workers (``--workers``). That compiles into 4 segments (each
   ending in an intermediate writer ``work/segNN/<rank>.jsonl`` written as ``.<rank>.jsonl.tmp`` then
   renamed, the last one in the final writer) and the dedup phases, chained. The slow step
   (tests/steps_for_tests.SlowPassThrough) makes every segment last long enough to be killed mid-write.
3. Reference: one uninterrupted run, watched, gives the reference output (id -> sha1 of text, as a
   multiset) and stats accounting, and the timeline of every job (segment or phase).
4. Kill points: ``python -m cuvee.cli run RECIPE --run-dir D`` is started in its own session and the whole
   process group gets SIGKILL when a trigger fires: right after start, after the plan is bound, when a
   job starts / is a fraction of its reference duration in / has k of its ranks complete, when an
   intermediate ``.tmp`` or the final output first appears, after the last job completes but before
   stats.json, plus seeded random times. The state at death (job running, .tmp files left, output
   files) is recorded. Then the same command resumes; the output is compared with the reference
   (duplicates = ids seen more than once, losses = reference ids missing, extras, changed texts) and
   stats.json must be balanced and equal the reference accounting. Every 4th point is killed twice
   (kill, resume, kill again, resume).
5. Refusals after a kill (exit != 0, expected message, nothing in the folder changed but the lock file):
   resume with another ``--tasks``; resume with an edited recipe (a length threshold changed); a second
   ``cuvee run`` on the folder while a resume is running (the resume must still finish correctly).

Exit status 1 if any duplicate, loss, extra, changed text, unbalanced / different accounting, or any
expected refusal that did not happen.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]  # tests/: the slow step, also for compile here

from _faults.common import (
    POLL_S,
    Proc,
    cuvee,
    env,
    finish,
    lock_held,
    snapshot,
    t_after_launch,
)
from _faults.common import run_until as run_argv_until
from _faults.jobs import (
    JobFolder as Folder,
)
from _faults.jobs import (
    all_done,
    job_in,
    job_ranks,
    output_appears,
    plan_bound,
    tmp_in,
    watch_timeline,
)
from cuvee.pipeline.io import iter_documents

TASKS = 4
ACCOUNT_KEYS = ("records_read", "kept", "dropped", "balanced", "by_reason", "inputs")


# --------------------------------------------------------------------------------------------- input
def make_input(folder: Path, seed: int, n_files: int = 6, per_file: int = 60) -> int:
    rng = random.Random(seed)
    vocab = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in ("n", "r", "s", "l", "m", "")]
    boiler = [" ".join(rng.choice(vocab) for _ in range(9)) + "." for _ in range(8)]

    def sentence():
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 16))).capitalize() + "."

    folder.mkdir(parents=True, exist_ok=True)
    originals: list[str] = []
    n = 0
    for f in range(n_files):
        with gzip.open(folder / f"part{f:02d}.jsonl.gz", "wt") as fh:
            for i in range(per_file):
                r = rng.random()
                if r < 0.08:
                    text = "too short."  # dropped by `length`
                elif r < 0.18 and originals:
                    text = rng.choice(originals)  # exact duplicate
                elif r < 0.28 and originals:
                    words = rng.choice(originals).split(" ")  # near duplicate: 2 words replaced
                    for _ in range(2):
                        words[rng.randrange(len(words))] = rng.choice(vocab)
                    text = " ".join(words)
                else:
                    lines = [sentence() for _ in range(rng.randint(4, 9))]
                    if rng.random() < 0.5:  # boilerplate lines shared by many documents
                        lines.insert(rng.randrange(len(lines) + 1), rng.choice(boiler))
                    text = "\n".join(lines)
                    originals.append(text)
                fh.write(json.dumps({"text": text, "id": f"f{f}-d{i}", "metadata": {"url": f"https://x{f}.example/{i}"}})
                         + "\n")
                n += 1
    return n


def make_recipe(path: Path, inp: Path, delay_s: float, workers: int, min_chars: int = 40) -> Path:
    slow = {"stage": "datatrove", "step": "steps_for_tests.SlowPassThrough", "kwargs": {"delay_s": delay_s}}
    data = {
        "name": "fault_injection",
        "input": {"paths": [str(inp / "*.jsonl.gz")], "format": "jsonl"},
        "stages": [
            {"stage": "length", "min_chars": min_chars},
            slow,
            {"stage": "exact_dedup"},
            slow,
            {"stage": "minhash_dedup"},
            slow,
            {"stage": "line_dedup", "min_occurrences": 3, "min_words": 5},
            slow,
        ],
        "output": {"format": "jsonl"},
        "executor": {"kind": "local", "tasks": TASKS, "workers": workers},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------- run folder
def job_names(recipe: Path, run_dir: Path) -> list[tuple[str, str, int]]:
    """(name, kind, tasks) of every compiled job, in run order."""
    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import load_recipe

    r = load_recipe(str(recipe), {"run_dir": str(run_dir)})
    return [(j.name, j.kind, j.tasks) for j in compile_recipe(r, run_dir)]


def cmd(recipe: Path, run_dir: Path, extra=()) -> list[str]:
    return cuvee("run", recipe, "--run-dir", run_dir, *extra)


def launch(recipe, run_dir, log: Path, extra=()) -> Proc:
    return Proc(cmd(recipe, run_dir, extra), log)


# ------------------------------------------------------------------------------------- comparison
def read_output(run_dir: Path) -> Counter:
    out = run_dir / "output"
    if not out.exists():
        return Counter()
    return Counter((d.id, hashlib.sha1(d.text.encode()).hexdigest()) for d in iter_documents(out))


def accounting(run_dir: Path) -> dict | None:
    try:
        s = json.loads((run_dir / "stats.json").read_text())
    except (OSError, ValueError):
        return None
    return {k: s["accounting"].get(k) for k in ACCOUNT_KEYS} | {"documents": s["output"]["documents"]}


def compare(ref: Counter, ref_acc: dict, run_dir: Path) -> dict:
    got = read_output(run_dir)
    ids = Counter(i for i, _h in got.elements())
    ref_ids = {i: h for i, h in ref}
    dup = sum(c - 1 for c in ids.values() if c > 1)
    loss = sum(1 for i in ref_ids if i not in ids)
    extra = sum(1 for i in ids if i not in ref_ids)
    changed = sum(1 for (i, h) in got if i in ref_ids and h != ref_ids[i])
    acc = accounting(run_dir)
    return {"dup": dup, "loss": loss, "extra": extra, "changed": changed,
            "balanced": bool(acc and acc["balanced"]), "acc_eq": acc == ref_acc}


# ---------------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=24, help="kill points (>= 20 for the benchmark)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.004, help="seconds per document in each slow step")
    ap.add_argument("--workers", type=int, default=2, help="executor.workers (2: datatrove's process pool)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t_start = time.monotonic()

    tmp = Path(tempfile.mkdtemp(prefix="cuvee-fault-"))
    print(f"work folder: {tmp}")
    n_docs = make_input(tmp / "in", args.seed)
    recipe = make_recipe(tmp / "recipe.yaml", tmp / "in", args.delay, args.workers)
    logs = tmp / "logs"
    logs.mkdir()

    # ---- reference: uninterrupted, watched for the timeline of every job
    ref_dir = tmp / "ref"
    jobs = job_names(recipe, ref_dir)
    print(f"input: {n_docs} documents in 6 files; {len(jobs)} jobs: {', '.join(n for n, _k, _t in jobs)}")
    f = Folder(ref_dir, jobs)
    p = launch(recipe, ref_dir, logs / "ref.log")
    t0 = time.monotonic()
    start, end = {}, {}
    while p.poll() is None:
        watch_timeline(f, time.monotonic() - t0, start, end)
        time.sleep(POLL_S)
    ref_wall = time.monotonic() - t0
    if p.popen.returncode != 0:
        print((logs / "ref.log").read_text()[-3000:])
        print("reference run failed")
        return 2
    ref = read_output(ref_dir)
    ref_acc = accounting(ref_dir)
    print(f"reference: {sum(ref.values())} documents out, accounting {json.dumps({k: ref_acc[k] for k in ('records_read', 'kept', 'dropped', 'balanced')})}, "
          f"wall {ref_wall:.1f} s")
    for name, _k, _t in jobs:
        s, e = start.get(name), end.get(name)
        print(f"  {name:32s} {'?' if s is None else f'{s:6.2f}'} .. {'?' if e is None else f'{e:6.2f}'} s")
    dur = {n: max(0.05, end.get(n, ref_wall) - start.get(n, 0.0)) for n, _k, _t in jobs}

    # a second uninterrupted run: the output must be deterministic, or the comparison means nothing
    det_dir = tmp / "det"
    launch(recipe, det_dir, logs / "det.log").finish()
    det = compare(ref, ref_acc, det_dir)
    print(f"determinism check (2nd clean run): {det}")

    # ---- triggers: cover every job, mid-write of intermediate and final files, startup and finish
    triggers = [t_after_launch(0.3), plan_bound()]
    for name, kind, _tasks in jobs:
        triggers.append(job_in(name, 0.0, dur[name]))
        triggers.append(job_in(name, 0.5, dur[name]))
        if kind == "segment":
            triggers.append(job_ranks(name, 1))
    segs = [n for n, k, _t in jobs if k == "segment"]
    for s in segs[:-1]:
        triggers.append(tmp_in(f"work/{s}"))
    triggers += [output_appears(1), output_appears(200), all_done(jobs)]
    # fill up (or thin out, keeping the spread) to --points
    if len(triggers) < args.points:
        total = end.get(jobs[-1][0], ref_wall)
        triggers += [t_after_launch(rng.uniform(0.5, total)) for _ in range(args.points - len(triggers))]
    elif len(triggers) > args.points:
        idx = sorted({round(i * (len(triggers) - 1) / max(1, args.points - 1)) for i in range(args.points)})
        triggers = [triggers[i] for i in idx]

    fails: list[str] = []
    rows = []
    totals = Counter()
    for i, trig in enumerate(triggers):
        d = tmp / f"p{i:02d}"
        fo = Folder(d, jobs)
        lg = logs / f"p{i:02d}.log"
        killed, st = run_argv_until(cmd(recipe, d), fo, trig, lg)
        kills = [st if killed else {"running": "finished before the trigger", "ranks": "", "tmp": [], "output": ""}]
        if i % 4 == 3 and killed:  # kill twice: resume, kill again at a random later moment, resume
            t2 = rng.uniform(0.3, max(0.6, ref_wall * 0.6))
            killed2, st2 = run_argv_until(cmd(recipe, d), fo, t_after_launch(t2), lg)
            kills.append(st2 if killed2 else {"running": "resume finished before 2nd kill", "ranks": "", "tmp": [],
                                              "output": ""})
        rc = launch(recipe, d, lg).finish()
        c = compare(ref, ref_acc, d)
        c["rc"] = rc
        ok = rc == 0 and not (c["dup"] or c["loss"] or c["extra"] or c["changed"]) and c["balanced"] and c["acc_eq"]
        totals["points"] += 1
        totals["kills"] += sum(1 for k in kills if "rc" not in k and "finished" not in k["running"])
        for k in ("dup", "loss", "extra", "changed"):
            totals[k] += c[k]
        if not ok:
            fails.append(f"point {i} ({trig.label}): {c}; state at kill: {kills}; log {lg}")
        rows.append((i, trig.label, kills, c, ok))
        what = " | then ".join(f"{k['running']} {k['ranks']}".strip() + (f"; tmp: {','.join(k['tmp'])}" if k['tmp'] else "")
                               + (f"; out: {k['output']}" if k.get('output') not in ("-", "") else "") for k in kills)
        print(f"{i:3d}  {trig.label:42s}  {what}\n     -> rc {rc} dup {c['dup']} loss {c['loss']} extra {c['extra']} "
              f"changed {c['changed']} balanced {c['balanced']} accounting==ref {c['acc_eq']}  {'OK' if ok else 'FAIL'}",
              flush=True)

    # ---- refusals after a kill
    print("\nrefusals after a kill:")
    refusals = []
    d = tmp / "refuse"
    fo = Folder(d, jobs)
    lg = logs / "refuse.log"
    killed, st = run_argv_until(cmd(recipe, d), fo, job_in(segs[1], 0.5, dur[segs[1]]), lg)
    print(f"  killed at: {st}")
    edited = make_recipe(tmp / "recipe_edited.yaml", tmp / "in", args.delay, args.workers, min_chars=41)

    def refused(label, argv, needle):
        before = snapshot(d)
        r = subprocess.run(argv, check=False, capture_output=True, text=True, env=env(), cwd=REPO, timeout=300)
        after = snapshot(d)
        msg = (r.stdout + r.stderr).strip()
        ok = r.returncode != 0 and needle in msg and before == after
        first = next((ln for ln in msg.splitlines() if needle in ln), msg.splitlines()[-1] if msg else "")
        refusals.append((label, ok))
        print(f"  {label:40s} rc {r.returncode}  folder unchanged {before == after}  {'REFUSED' if ok else 'NOT REFUSED'}"
              f"\n      {first.strip()[:150]}")

    refused("resume with --tasks 3", cmd(recipe, d, ["--tasks", "3"]), "different plan")
    refused("resume with length.min_chars 40 -> 41", cmd(edited, d), "different plan")
    # concurrent: resume in the background, a second run on the same folder while it runs
    p = launch(recipe, d, lg)
    lock = d / ".cuvee.lock"
    while p.poll() is None and not lock_held(lock):
        time.sleep(POLL_S)
    running_then = p.poll() is None
    r = subprocess.run(cmd(recipe, d), check=False, capture_output=True, text=True, env=env(), cwd=REPO, timeout=300)
    first_alive = p.poll() is None
    rc = p.finish()
    c = compare(ref, ref_acc, d)
    msg = (r.stdout + r.stderr)
    ok = (r.returncode != 0 and "in use by another cuvee process" in msg and running_then and first_alive and rc == 0
          and not (c["dup"] or c["loss"] or c["extra"] or c["changed"]) and c["balanced"] and c["acc_eq"])
    refusals.append(("concurrent 2nd run during a resume", ok))
    line = next((ln for ln in msg.splitlines() if "in use" in ln), msg.strip().splitlines()[-1] if msg.strip() else "")
    print(f"  {'concurrent 2nd run during a resume':40s} rc {r.returncode}  first still running {first_alive}  "
          f"{'REFUSED' if ok else 'NOT REFUSED'}\n      {line.strip()[:150]}"
          f"\n      first run: rc {rc} dup {c['dup']} loss {c['loss']} extra {c['extra']} changed {c['changed']} "
          f"balanced {c['balanced']} accounting==ref {c['acc_eq']}")
    # after the refusals the folder still resumes to the reference (already finished above: rerun is a no-op)
    for label, ok in refusals:
        if not ok:
            fails.append(f"refusal not observed: {label}")
    det_ok = not (det["dup"] or det["loss"] or det["extra"] or det["changed"]) and det["acc_eq"]
    if not det_ok:
        fails.append(f"two clean runs differ: {det}")

    # ---- table and totals
    print("\n| # | kill trigger | state at kill (job running, ranks done; .tmp left) | dup | loss | extra | changed text | balanced | = ref accounting |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, label, kills, c, _ok in rows:
        what = " ⟶ ".join(f"{k['running']} {k['ranks']}".strip() + (f" (.tmp: {len(k['tmp'])})" if k['tmp'] else "")
                          for k in kills)
        print(f"| {i} | {label} | {what} | {c['dup']} | {c['loss']} | {c['extra']} | {c['changed']} | "
              f"{'yes' if c['balanced'] else 'NO'} | {'yes' if c['acc_eq'] else 'NO'} |")
    n_ref_ok = sum(ok for _l, ok in refusals)
    print(f"\nkill points: {totals['points']} ({totals['kills']} kills, {sum(len(r[2]) > 1 for r in rows)} points killed twice); "
          f"duplicates: {totals['dup']}; losses: {totals['loss']}; extras: {totals['extra']}; changed texts: "
          f"{totals['changed']}; refusals expected {len(refusals)}, observed {n_ref_ok}; "
          f"wall {time.monotonic() - t_start:.0f} s")
    return finish(fails, args.keep, tmp)


if __name__ == "__main__":
    sys.exit(main())
