"""One driver for every command: an uninterrupted reference, kill -9 at the scenario's points and rerun,
changed input refused, a concurrent second process refused. The scenario (one module per command) says how
to run the command, where to kill it and how to compare two outputs.

A scenario provides:

``name``                     the command, as a user types it (``dedup run``)
``argv(out)``                the command line writing into ``out`` (a folder, or the annotations file)
``watch(out)``               an object with ``state() -> dict`` (what a kill left) and ``tick(t)`` (called on
                             every poll of the reference run, to learn its timeline)
``fixed_triggers(ref_watch)``  the kill points, from the reference run's timeline (thinned by the driver,
                             which adds one ``random_trigger``)
``compare(ref, out)``        {"dup", "loss", "extra", "changed": int, "checks": {name: bool}}
``changes()``                the changed-input cases: (label, apply() -> restore callable, argv(out) or None)
``refuse_after``             the states the changed-input refusals are tried in: "killed" and/or "done"
``mid_trigger(ref_watch)``   where to kill before the changed-input refusals
``random_trigger(rng)``      a random point inside the work (also the second kill of every 3rd point)
``busy(out)``                the moment a first process is known to be at work (its lock held)
``footprint(out)``           the folder whose files must not change on a refusal
``out(tmp, tag)``            where one attempt writes (a folder; annotate: a file in its own folder)
``summary(ref)``             one line on the reference output

and may change the defaults of :class:`Scenario`: ``fresh_flag`` (the command's start-over flag, None when it has
none), ``output_is_file`` (the command writes one user-named file, not a folder), ``foreign_cases(tmp)`` (what a
user may hand the command that cuvee did not create: each must be refused in one line, untouched).
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from _faults.common import (
    POLL_S,
    Proc,
    one_line_refusal,
    run_once,
    run_until,
    snapshot,
    snapshot_diff,
    t_into_work,
    thin,
)

NOT_KILLED = {"running": "finished before the trigger"}
CHANGE_WORDS = re.compile(r"chang|differ|plan|modif|rewrit|other|stamp|mismatch", re.IGNORECASE)
FOREIGN_WORDS = re.compile(r"did not create|not written by cuvee|not a cuvee|no \.cuvee-owner|not created by|"
                           r"not an? [a-z]+ folder", re.IGNORECASE)
USER_BYTES = b"a user's own file: cuvee must not touch it\n"
# command -> (scenario, its reference output) of the drives of this process: the kernel-proof test
# (tests/test_kernel_seams.py) looks there before running a command once more
REFERENCES: dict[str, tuple] = {}


class Scenario:
    """Defaults shared by the scenarios (see the module docstring for what each one adds)."""

    refuse_after = ("killed", "done")
    fresh_flag: str | None = "--fresh"
    output_is_file = False
    other_kind = "eval"  # the kind of the cuvee folder of another command in foreign_cases

    def triggers(self, w, n: int, rng: random.Random) -> list:
        """The scenario's fixed kill points thinned to n - 1, then one random point inside the work."""
        picked = thin(self.fixed_triggers(w), max(1, n - 1))
        return picked + [self.random_trigger(rng)] if n > 1 else picked

    def random_trigger(self, rng: random.Random):
        """A random point inside the work, timed from the reference run (``self.work_s``, set by fixed_triggers)."""
        x = rng.uniform(0.0, self.work_s)
        return t_into_work(x, f"{x:.2f}s into the work (random)")

    def out(self, tmp: Path, tag) -> Path:
        return tmp / str(tag)

    def footprint(self, out: Path) -> Path:
        return out

    def names_change(self, line: str) -> bool:
        """A refusal of changed input says so (not any one-line failure)."""
        return bool(CHANGE_WORDS.search(line))

    def foreign_cases(self, tmp: Path) -> list[tuple[str, list[str], Path]]:
        """(label, argv, folder that must stay as it was): the command pointed at a folder (or, for a file
        output, a file) a user made, with the start-over flag (the first case: the one CI runs) and without, and at
        a cuvee folder (file) of another kind. Each must be refused in one line, untouched."""
        cases = []
        for tag, marked in (("foreign", False), ("other_kind", True)):
            out = self.out(tmp, tag)
            if self.output_is_file:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(USER_BYTES)
                if marked:
                    Path(f"{out}.json").write_text(json.dumps({"kind": "another-command", "plan": {}}))
                what, keep = ("a file another cuvee command wrote" if marked else "a file cuvee did not write"), out.parent
            else:
                out.mkdir(parents=True, exist_ok=True)
                (out / "notes.txt").write_bytes(USER_BYTES)
                if marked:
                    (out / ".cuvee-owner.json").write_text(json.dumps({"kind": self.other_kind}))
                what = f"a cuvee {self.other_kind} folder" if marked else "a folder cuvee did not create"
                keep = out
            flagged = [*self.argv(out), self.fresh_flag] if self.fresh_flag else self.argv(out)
            cases.append((f"{what} as the output" + (f", with {self.fresh_flag}" if self.fresh_flag else ""),
                          flagged, keep))
            if self.fresh_flag and not marked:
                cases.append((f"{what} as the output", self.argv(out), keep))
        return cases


@dataclass
class PointRow:
    index: int
    label: str
    kills: list[dict]
    rc: int
    cmp: dict

    @property
    def ok(self) -> bool:
        c = self.cmp
        return self.rc == 0 and not (c["dup"] or c["loss"] or c["extra"] or c["changed"]) and all(c["checks"].values())


@dataclass
class RefusalRow:
    label: str
    expected: str
    ok: bool
    rc: int
    line: str
    detail: str = ""


@dataclass
class CommandResult:
    name: str
    argv: str
    ref_wall: float
    ref_summary: str
    points: list[PointRow] = field(default_factory=list)
    refusals: list[RefusalRow] = field(default_factory=list)
    wall: float = 0.0
    ref: Path | None = None  # the reference run's output

    def failures(self) -> list[str]:
        out = [f"{self.name} point {p.index} ({p.label}): rc {p.rc} {fmt_cmp(p.cmp)}; killed at: "
               f"{' | then '.join(describe(k) for k in p.kills)}" for p in self.points if not p.ok]
        out += [f"{self.name}: {r.label}: expected {r.expected}; got rc {r.rc}: {r.line[:200]}"
                + (f" ({r.detail})" if r.detail else "") for r in self.refusals if not r.ok]
        return out


def describe(state: dict) -> str:
    """A kill's state in a table cell."""
    if "rc" in state:
        return f"finished before the kill (rc {state['rc']})"
    parts = [f"{state.get('running', '')} {state.get('ranks', '')}".strip()]
    parts += [f"{k}: {v}" for k, v in state.items() if k not in ("running", "ranks") and v not in ("", "-", [], None)]
    return "; ".join(p if not isinstance(p, list) else ",".join(p) for p in parts if p)


def fmt_cmp(c: dict) -> str:
    bad = [k for k, v in c["checks"].items() if not v]
    return (f"dup {c['dup']} loss {c['loss']} extra {c['extra']} changed {c['changed']}"
            + (f" failed checks: {', '.join(bad)}" if bad else ""))


def _wait(p: Proc, pred, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(POLL_S)
    return False


def drive(scn, tmp: Path, points: int, rng: random.Random, say=print, quick: bool = False) -> CommandResult:
    """The reference, the kill points, the changed-input refusals, a concurrent process, the foreign outputs.

    ``quick`` (for CI): no second reference run; one kill at the scenario's mid-work trigger, whose folder then
    serves every check: the changed-input refusals right after the kill (or, for a scenario that refuses only
    after the end, after the rerun), and the rerun itself is the first process a second one must be refused by;
    the foreign output only with the start-over flag."""
    t_start = time.monotonic()
    tmp.mkdir(parents=True, exist_ok=True)
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)

    # ---- reference: uninterrupted, watched for its timeline
    ref = scn.out(tmp, "ref")
    w = scn.watch(ref)
    p = Proc(scn.argv(ref), logs / "ref.log")
    while p.poll() is None:
        w.tick(p.elapsed())
        time.sleep(POLL_S)
    ref_wall = p.elapsed()
    if p.popen.returncode != 0:
        raise RuntimeError(f"{scn.name}: reference run failed (rc {p.popen.returncode}); see {logs / 'ref.log'}")
    triggers = scn.triggers(w, points, rng)
    if points == 1:  # one point: the scenario's own mid-work trigger (a count or a job, never a race)
        triggers = [scn.mid_trigger(w)]
    res = CommandResult(scn.name, " ".join(map(str, scn.argv(ref))), ref_wall, scn.summary(ref), ref=ref)
    REFERENCES[scn.name] = (scn, ref)
    say(f"[{scn.name}] reference: {res.ref_summary}; wall {ref_wall:.1f} s")
    if quick:
        _quick(scn, tmp, ref, triggers[0], logs, res, say)
    else:
        d = scn.out(tmp, "det")  # a second clean run: if two differ, comparing with the reference means nothing
        det = PointRow(-1, "second uninterrupted run", [], Proc(scn.argv(d), logs / "det.log").finish(), scn.compare(ref, d))
        res.refusals.append(RefusalRow("a second uninterrupted run equals the reference", "rc 0, = reference", det.ok,
                                       det.rc, fmt_cmp(det.cmp)))
        _kill_points(scn, tmp, ref, triggers, rng, logs, res, say)
        d, lg = scn.out(tmp, "refuse"), logs / "refuse.log"
        for state in scn.refuse_after:
            if state == "killed":
                killed, st = run_until(scn.argv(d), scn.watch(d), scn.mid_trigger(w), lg)
                _refusals(scn, d, lg, f"after a kill ({describe(st)})" if killed else "after a run the kill missed",
                          res, say)
                rc = Proc(scn.argv(d), lg).finish()  # the original input, put back, still resumes to the reference
                row = PointRow(-1, "resume after the refusals", [], rc, scn.compare(ref, d))
                res.refusals.append(RefusalRow("original input resumes after the refusals", "rc 0, = reference",
                                               row.ok, rc, fmt_cmp(row.cmp)))
            else:
                rc = Proc(scn.argv(d), lg).finish()
                _refusals(scn, d, lg, f"after a finished run (rc {rc})", res, say)
        _concurrent(scn, scn.out(tmp, "concurrent"), ref, logs / "concurrent.log", res, say)
    cases = scn.foreign_cases(tmp / "foreign")
    _foreign(cases[:1] if quick else cases, logs / "foreign.log", res, say)
    res.wall = time.monotonic() - t_start
    return res


def _quick(scn, tmp: Path, ref: Path, trig, logs: Path, res: CommandResult, say) -> None:
    """One kill, the refusals, and the rerun paused for a second process, all in one folder."""
    d, lg = scn.out(tmp, "quick"), logs / "quick.log"
    killed, st = run_until(scn.argv(d), scn.watch(d), trig, lg)
    where = f"after a kill ({describe(st)})" if killed else "after a run the kill missed"
    if scn.refuse_after[0] == "killed":
        _refusals(scn, d, lg, where, res, say)
    rc, c = _concurrent(scn, d, ref, lg, res, say, "the rerun after the kill")
    res.points.append(PointRow(0, trig.label, [st if killed else {**NOT_KILLED, **st}], rc, c))
    say(f"[{scn.name}]  0 {trig.label:40s} {describe(st)}\n           -> rc {rc} {fmt_cmp(c)}  "
        f"{'OK' if res.points[-1].ok else 'FAIL'}")
    if scn.refuse_after[0] == "done":
        _refusals(scn, d, lg, f"after a finished run (rc {rc})", res, say)


def _kill_points(scn, tmp: Path, ref: Path, triggers: list, rng, logs: Path, res: CommandResult, say) -> None:
    """Kill at each trigger (every 3rd point: rerun and kill again), rerun to the end, compare."""
    for i, trig in enumerate(triggers):
        d = scn.out(tmp, f"p{i:02d}")
        lg = logs / f"p{i:02d}.log"
        killed, st = run_until(scn.argv(d), scn.watch(d), trig, lg)
        kills = [st if killed else {**NOT_KILLED, **st}]
        if i % 3 == 2 and killed:
            killed2, st2 = run_until(scn.argv(d), scn.watch(d), scn.random_trigger(rng), lg)
            kills.append(st2 if killed2 else {"running": "rerun finished before the 2nd kill"})
        rc = Proc(scn.argv(d), lg).finish()
        row = PointRow(i, trig.label, kills, rc, scn.compare(ref, d))
        res.points.append(row)
        say(f"[{scn.name}] {i:2d} {trig.label:40s} {' | then '.join(describe(k) for k in kills)}\n"
            f"           -> rc {rc} {fmt_cmp(row.cmp)}  {'OK' if row.ok else 'FAIL'}")


def _refusals(scn, d: Path, lg: Path, where: str, res: CommandResult, say) -> None:
    """Each changed input refused in one line, nothing in the folder changed; the input is put back after."""
    for label, apply, argv_of in scn.changes():
        restore = apply()
        try:
            before = snapshot(scn.footprint(d))
            r = run_once((argv_of or scn.argv)(d), lg)
            after = snapshot(scn.footprint(d))
        finally:
            restore()
        one, line = one_line_refusal(r)
        line = line if r.returncode else "accepted: ran to the end (exit 0)"
        ok = one and before == after and scn.names_change(line)
        detail = "" if before == after else f"folder changed: {snapshot_diff(before, after)}"
        if r.returncode != 0 and not one:
            detail = (detail + "; " if detail else "") + "not one line on stderr"
        res.refusals.append(RefusalRow(f"{label}, {where}", "refused in one line, folder unchanged", ok,
                                       r.returncode, line, detail))
        say(f"[{scn.name}] {label}, {where}: rc {r.returncode} {'REFUSED' if ok else 'NOT REFUSED'}: {line[:160]}"
            + (f" [{detail}]" if detail else ""))


def _concurrent(scn, d: Path, ref: Path, lg: Path, res: CommandResult, say, first_is: str = "") -> tuple[int, dict]:
    """A second process while the first works: the first is paused (SIGSTOP) with its lock held, the second must
    be refused in one line; the first then continues and must still give the reference output. Returns the
    first's (rc, comparison)."""
    first = Proc(scn.argv(d), lg)
    busy = _wait(first, lambda: scn.busy(d))
    first.pause()
    try:
        r = run_once(scn.argv(d), lg)
    finally:
        first.cont()
    rc = first.finish()
    c = scn.compare(ref, d)
    one, line = one_line_refusal(r)
    ok = busy and one and ("in use" in line or "another" in line) and rc == 0 and PointRow(-1, "", [], rc, c).ok
    res.refusals.append(RefusalRow("second process while the first works" + (f" ({first_is})" if first_is else ""),
                                   "refused in one line; first: rc 0, = reference", ok, r.returncode, line,
                                   f"first: {'busy' if busy else 'NOT SEEN BUSY'}, rc {rc}, {fmt_cmp(c)}"))
    say(f"[{scn.name}] concurrent: 2nd rc {r.returncode} {'REFUSED' if one else 'NOT REFUSED'}: {line[:160]}; "
        f"1st rc {rc} {fmt_cmp(c)}")
    return rc, c


def _foreign(cases: list, lg: Path, res: CommandResult, say) -> None:
    """What cuvee did not create is refused in one line and left as it was (also with --fresh)."""
    for label, argv, keep in cases:
        before = snapshot(keep)
        r = run_once(argv, lg)
        after = snapshot(keep)
        one, line = one_line_refusal(r)
        line = line if r.returncode else "accepted: ran to the end (exit 0)"
        ok = one and before == after and bool(FOREIGN_WORDS.search(line))
        detail = "" if before == after else f"changed: {snapshot_diff(before, after)}"
        res.refusals.append(RefusalRow(label, "refused in one line, untouched", ok, r.returncode, line, detail))
        say(f"[{res.name}] {label}: rc {r.returncode} {'REFUSED' if ok else 'NOT REFUSED'}: {line[:160]}"
            + (f" [{detail}]" if detail else ""))


# ------------------------------------------------------------------------------------------- report
def report(results: list[CommandResult]) -> str:
    """The markdown tables: a summary per command, then each command's kill points and refusals."""
    out = [("| command | kill points (kills, twice) | dup | loss | extra | changed | other checks failed | "
           "refusals expected / observed | wall s |"), "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        kills = sum(1 for p in r.points for k in p.kills if "rc" not in k and "finished" not in k.get("running", ""))
        twice = sum(len(p.kills) > 1 for p in r.points)
        other = sum(1 for p in r.points for v in p.cmp["checks"].values() if not v) + sum(p.rc != 0 for p in r.points)
        tot = {k: sum(p.cmp[k] for p in r.points) for k in ("dup", "loss", "extra", "changed")}
        out.append(f"| `{r.name}` | {len(r.points)} ({kills}, {twice}) | {tot['dup']} | {tot['loss']} | {tot['extra']} | "
                   f"{tot['changed']} | {other} | {len(r.refusals)} / {sum(x.ok for x in r.refusals)} | {r.wall:.0f} |")
    for r in results:
        out += ["", f"**`cuvee {r.name}`** — reference: {r.ref_summary} ({r.ref_wall:.1f} s)", "",
                "| # | kill trigger | state at kill | rc | dup | loss | extra | changed | failed checks | note |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for p in r.points:
            bad = ", ".join(k for k, v in p.cmp["checks"].items() if not v) or "-"
            out.append(f"| {p.index} | {p.label} | {' ⟶ '.join(describe(k) for k in p.kills)} | {p.rc} | {p.cmp['dup']} | "
                       f"{p.cmp['loss']} | {p.cmp['extra']} | {p.cmp['changed']} | {bad} | {p.cmp.get('note', '')} |")
        out += ["", "| attempt | expected | exit | message / result | ok |", "|---|---|---|---|---|"]
        for x in r.refusals:
            msg = (x.line + (f" ({x.detail})" if x.detail else "")).replace("|", "\\|")[:300]
            out.append(f"| {x.label} | {x.expected} | {x.rc} | {msg} | {'yes' if x.ok else '**NO**'} |")
    return "\n".join(out)
