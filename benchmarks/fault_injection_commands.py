"""Fault injection for every command that writes: kill -9 `cuvee dedup run`, `cuvee classify annotate`, `cuvee mix`
and `cuvee train` at a few points, rerun, compare with an uninterrupted run; changed input and a concurrent
second process must be refused in one line.

    python benchmarks/fault_injection_commands.py                       # all four, 5 kill points each
    python benchmarks/fault_injection_commands.py --commands mix,train --points 3 --keep

Everything is real and local: each command runs as a subprocess through the CLI (`python -m cuvee.cli ...`) on
inputs this script writes into a temporary folder (no network, no ../shared): JSONL documents with planted
duplicates (dedup), JSONL sources (mix), byte-level shards from the bundled WCXB texts (train, a ~10k-parameter
model on CPU), and for annotate an OpenAI-compatible server on 127.0.0.1 (`cuvee.classifiers.llm_server`) with
a scripted, deterministic annotator.

Per command (the driver is benchmarks/_faults/driver.py, one module per command beside it):

1. Reference: one uninterrupted run, watched for its timeline; a second one must give the same output.
2. Kill points: the command is started in its own session and its process group gets SIGKILL when a trigger
   fires (start, mid-work, near the end: which file appeared, which step / record count was reached); every
   3rd point is killed twice. The same command then reruns to the end and its output is compared with the
   reference: duplicates, losses, extras, changed records, plus each command's own checks.
3. Changed input (an input file rewritten at the same size, another input), after a kill and after a finished
   run: the rerun must be refused with one line on stderr and a non-zero exit, with no file of the folder
   changed; with the original input put back, the killed folder must still resume to the reference.
4. Concurrent: while a first process holds the folder (paused with SIGSTOP once its lock is taken, so the
   check does not depend on timing), a second one must be refused in one line; the first, continued, must
   finish with the reference output.

Exit status 1 if any check fails; the markdown report (tables) is printed at the end (--report FILE writes it).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from _faults.common import finish
from _faults.driver import drive, report

COMMANDS = ("dedup", "annotate", "mix", "train")


def scenario(name: str, tmp: Path, seed: int):
    """The scenario of one command (imported here so each command's setup cost is paid only when asked)."""
    if name == "dedup":
        from _faults.dedup import Dedup

        return Dedup(tmp, seed)
    if name == "annotate":
        from _faults.annotate import Annotate

        return Annotate(tmp, seed)
    if name == "mix":
        from _faults.mix import Mix

        return Mix(tmp, seed)
    from _faults.train import Train

    return Train(tmp, seed)


def run(commands: list[str], points: int, seed: int, tmp: Path, say=print, quick: bool = False) -> tuple[list, list[str]]:
    """Drive each command; returns (results, failures). ``quick``: see driver.drive."""
    results, fails = [], []
    for name in commands:
        scn = scenario(name, tmp / name, seed)
        try:
            res = drive(scn, tmp / name, points, random.Random(seed), say, quick)
        finally:
            close = getattr(scn, "close", None)
            if close:
                close()
        results.append(res)
        fails += res.failures()
    return results, fails


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated, of {', '.join(COMMANDS)}")
    ap.add_argument("--points", type=int, default=5, help="kill points per command")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--report", help="also write the markdown report to this file")
    args = ap.parse_args(argv)
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        ap.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="cuvee-faults-"))
    print(f"work folder: {tmp}", flush=True)
    results, fails = run(commands, args.points, args.seed, tmp, lambda s: print(s, flush=True))
    md = report(results)
    print("\n" + md)
    print(f"\nwall {time.monotonic() - t0:.0f} s")
    if args.report:
        Path(args.report).write_text(md + "\n")
    return finish(fails, args.keep, tmp)


if __name__ == "__main__":
    sys.exit(main())
