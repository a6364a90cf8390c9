"""Fault injection for `cuvee run`: kill -9 a real run at many points, resume it, count duplicates / losses /
refusals. The scenario is one of the commands of the one driver (benchmarks/_faults/run.py, driven by
benchmarks/_faults/driver.py); this script is `fault_injection_commands.py --commands run` with more kill points.

    python benchmarks/fault_injection.py                  # 24 kill points, seed 0
    python benchmarks/fault_injection.py --points 40 --seed 1 --keep

What the run scenario holds (no network, no shared data): 6 JSONL files of synthetic documents with planted exact
and near duplicates, boilerplate lines and short documents; the recipe length -> slow -> exact_dedup -> slow ->
minhash_dedup -> slow -> line_dedup -> slow, 4 tasks, 2 workers, which compiles into 4 segments and the dedup
phases. Kill points: right after start, the plan bound, each job started / half through / with a rank complete, an
intermediate .tmp or the final output first seen, the last job complete before stats.json, and random points;
every 3rd point is killed twice. Each resume is compared with an uninterrupted run (duplicates, losses, extras,
changed texts; stats.json balanced and equal to the reference's accounting). Refused in one line with the folder
unchanged: an input file rewritten at the same size, another --tasks, an edited recipe (after a kill and after
the end), a second `cuvee run` while one works, and a folder cuvee did not create (with and without --fresh) or
of another kind. Exit status 1 if anything fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from fault_injection_commands import main

if __name__ == "__main__":
    sys.exit(main(["--commands", "run", "--points", "24", *sys.argv[1:]]))
