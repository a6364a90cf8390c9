"""Fault injection for every command that writes, through one driver: kill -9 each at a few points, rerun,
compare with an uninterrupted run; a changed input, a concurrent second process and a folder (or file) cuvee did
not create must each be refused in one line, leaving everything as it was.

    python benchmarks/fault_injection_commands.py                       # every command, 5 kill points each
    python benchmarks/fault_injection_commands.py --commands mix,train --points 3 --keep

Commands (one scenario module each in benchmarks/_faults/, one driver: _faults/driver.py): run, dedup run,
classify annotate|train (fastText file and transformer head folder)|apply, mix, tokenizer train|extend, train,
train --export-hf, anneal, mix search (its proxies in worker processes), rephrase, card, stats.

Everything is real and local: each command runs as a subprocess through the CLI (`python -m cuvee.cli ...`) on
inputs the scenarios write into a temporary folder (no network, no ../shared): JSONL documents with planted
duplicates (run, dedup), JSONL sources (mix, tokenizer, mix search: the bundled lingua sentences), byte-level
shards from the bundled WCXB texts (train, anneal, export: a ~10k-parameter model on CPU), the shipped demo
fastText model and MiniLM encoder (classify), and for annotate and rephrase an OpenAI-compatible server on
127.0.0.1 (`cuvee.classifiers.llm_server`) with a scripted, deterministic model.

Per command:

1. Reference: one uninterrupted run, watched for its timeline; a second one must give the same output.
2. Kill points: the command is started in its own session and its process group gets SIGKILL when a trigger
   fires (start, mid-work, near the end: which file appeared, which step / record / job was reached, a time into
   the work); every 3rd point is killed twice. The same command then reruns to the end and its output is compared
   with the reference: duplicates, losses, extras, changed records, plus each command's own checks.
3. Changed input (an input file rewritten at the same size, another input or config), after a kill and after a
   finished run: the rerun must be refused with one line on stderr and a non-zero exit, with no file of the
   folder changed; with the original input put back, the killed folder must still resume to the reference.
4. Concurrent: while a first process holds the folder (paused with SIGSTOP once its lock is taken, so the
   check does not depend on timing), a second one must be refused in one line; the first, continued, must
   finish with the reference output.
5. Foreign: the output pointed at a folder (or file) a user made, with and without --fresh, and at a cuvee folder
   of another kind: refused in one line, untouched.

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
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests")]  # tests/: the run scenario's slow step

from _faults.common import finish
from _faults.driver import drive, report

# command -> (module in _faults/, scenario class): every command that writes, one driver
COMMANDS = {
    "run": ("run", "Run"),
    "dedup": ("dedup", "Dedup"),
    "annotate": ("annotate", "Annotate"),
    "classify-train": ("classify", "ClassifyTrain"),
    "classify-head": ("classify", "ClassifyHead"),
    "classify-apply": ("classify", "ClassifyApply"),
    "mix": ("mix", "Mix"),
    "tokenizer-train": ("tokenizer", "TokenizerTrain"),
    "tokenizer-extend": ("tokenizer", "TokenizerExtend"),
    "train": ("train", "Train"),
    "export-hf": ("export", "ExportHF"),
    "anneal": ("anneal", "Anneal"),
    "mix-search": ("search", "MixSearch"),
    "rephrase": ("rephrase", "Rephrase"),
    "card": ("runfolder", "Card"),
    "stats": ("runfolder", "Stats"),
}


def scenario(name: str, tmp: Path, seed: int, quick: bool = False):
    """The scenario of one command (imported here so each command's setup cost is paid only when asked);
    ``quick``: its CI-sized input, where it has one."""
    import importlib

    module, cls = COMMANDS[name]
    return getattr(importlib.import_module(f"_faults.{module}"), cls)(tmp, seed, quick=quick)


def run(commands: list[str], points: int, seed: int, tmp: Path, say=print, quick: bool = False) -> tuple[list, list[str]]:
    """Drive each command; returns (results, failures). ``quick``: see driver.drive."""
    results, fails = [], []
    for name in commands:
        scn = scenario(name, tmp / name, seed, quick)
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
