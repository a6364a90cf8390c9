"""Is a SLURM job this folder submitted still alive? One answer for every command that records job ids.

``cuvee run --no-wait`` and ``cuvee mix search --slurm`` record the ids of what they submitted; a rerun must not
start over, sweep or resubmit while any of them is pending, running or completing. When ``squeue`` is not on
this machine the answer is unknown (:func:`alive` returns None and the caller says so); when it is here but
fails, that is an error, never a silent "nothing runs".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from cuvee.kernel.atomic import write_json
from cuvee.kernel.errors import UserError


class SlurmQueryError(UserError, RuntimeError):
    """SLURM could not be asked whether recorded jobs still run."""


def alive(ids: list[str], timeout_s: float = 60) -> list[str] | None:
    """The ids among ``ids`` still pending, running or completing; None when ``squeue`` is not here."""
    ids = [str(i) for i in ids if str(i).strip()]
    if not ids:
        return []
    if not shutil.which("squeue"):
        return None
    try:
        r = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], capture_output=True, text=True,
                           timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        raise SlurmQueryError(f"cannot ask SLURM whether job(s) {', '.join(ids)} still run: {e}") from None
    if r.returncode != 0:
        if "invalid job id" in r.stderr.lower():  # every one of them finished and was purged
            return []
        raise SlurmQueryError(f"cannot ask SLURM whether job(s) {', '.join(ids)} still run: squeue: "
                              f"{' '.join(r.stderr.split())[:300]}")
    return sorted({line.strip().split("_")[0] for line in r.stdout.splitlines() if line.strip()})


def wait_until_done(ids: list[str], poll_s: float = 2.0) -> None:
    while alive(ids):
        time.sleep(poll_s)


def record(path: Path, ids: list[str], **extra) -> None:
    """Remember submitted job ids (atomically), beside what the caller wants to keep with them."""
    write_json(path, {"job_ids": [str(i) for i in ids], **extra})


def recorded(path: Path) -> list[str]:
    try:
        return [str(i) for i in json.loads(Path(path).read_text())["job_ids"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
