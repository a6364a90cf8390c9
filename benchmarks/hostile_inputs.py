"""Hostile inputs: the real CLI on inputs a hostile or careless user gives; each must end as the house rules ask
(a counted drop, one line and exit 1, or the right output) and in bounded time, never as a hang or a traceback.

    python benchmarks/hostile_inputs.py                 # every case
    python benchmarks/hostile_inputs.py --only 5,6 --keep

The cases (benchmarks/_faults/hostile.py, by issue #37's failure number): an lm-eval task whose include arrives
through a YAML merge key and names a !function (1), a Latin-1 eval file (2), quality_ensemble weights whose sum
overflows or underflows (3), an LLM answer with a lone surrogate (4), pages of 20,000 and 100,000 nested <div>
through extractor: resiliparse (5), a mix search asking more mixtures than fit 1e-3 apart, and as many as fit (6), a run out of disk on a small tmpfs
(as root) and past a file size limit (7), and the issue's "also" line as 0: rephrase --where on a field no
document has, CUVEE_EVAL_DATA holding $(. Exit status 1 if any case fails; the table is printed at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from _faults.common import finish
from _faults.hostile import CASES


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="failure numbers to run, e.g. 5,6 (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",") if x}
    tmp = Path(tempfile.mkdtemp(prefix="cuvee-hostile-"))
    log = tmp / "commands.log"
    rows, fails = [], []
    for number, name, case in CASES:
        if only and number not in only:
            continue
        folder = tmp / case.__name__
        folder.mkdir()
        print(f"#{number} {name} ...", flush=True)
        seen = case(folder, log)
        rows.append((number, name, seen))
        print(f"   {'ok' if seen.ok else 'FAIL'}: {seen.what} ({seen.seconds:.1f} s)", flush=True)
        if not seen.ok:
            fails.append(f"#{number} {name}: {seen.what}")
    print("\n| # | hostile input | observed | s | ok |\n|---|---|---|---|---|")
    for number, name, seen in rows:
        print(f"| {number} | {name} | {seen.what} | {seen.seconds:.1f} | {'yes' if seen.ok else '**no**'} |")
    print(f"\n{sum(s.ok for _, _, s in rows)} of {len(rows)} as the house rules ask; commands and outputs: {log}")
    return finish(fails, args.keep, tmp)


if __name__ == "__main__":
    sys.exit(main())
