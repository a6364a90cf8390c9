"""What ``cuvee classify train|apply`` write, as the kernel knows it, and the plans they are bound to.

A transformer head is a folder (:data:`HEAD_FOLDER`, opened by :mod:`cuvee.kernel.workdir`); a fastText model and
``classify apply -o FILE`` are user-named files cuvee owns (:data:`MODEL_FILE`, :data:`APPLY_FILE`, opened by
:mod:`cuvee.kernel.owned_file`, whose ``<file>.json`` marker records the plan). classify's own part is the plan:
the settings and the kernel stamps of the input (and model) files, so a rewritten input is another plan.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuvee.kernel.atomic import replacing
from cuvee.kernel.owned_file import OwnedFile
from cuvee.kernel.stamps import stamps
from cuvee.kernel.workdir import Workdir

HEAD_FOLDER = Workdir("classifier", "classifier folder")
MODEL_FILE = OwnedFile("fasttext", "classify train", "model file", companions=(".json", ".metrics.json"))
APPLY_FILE = OwnedFile("classify-apply", "classify apply", "output file")


def train_plan(sources: dict[str, list[str]], settings: dict) -> dict:
    """What decides a trained model: its settings and the stamped input files (folders and globs expanded)."""
    from cuvee.pipeline.io import expand_paths

    return {"command": "classify train", "settings": settings,
            "inputs": {k: stamps(expand_paths(v)) for k, v in sources.items() if v}}


def by_path(plan: dict) -> tuple[dict, dict]:
    """A train plan as a head folder binds it: the binding names the inputs by path and their stamps go to the
    workdir's changed-input check, which names a rewritten file in one line."""
    binding = {**plan, "inputs": {k: list(v) for k, v in plan["inputs"].items()}}
    return binding, {p: s for v in plan["inputs"].values() for p, s in v.items()}


def apply_plan(model: str, input_files: list[str], settings: dict) -> dict:
    """What decides ``classify apply``'s output: the model's files, the input files and the settings."""
    files = sorted(str(f) for f in Path(model).iterdir() if f.is_file()) if os.path.isdir(model) else [model]
    return {"command": "classify apply", "settings": settings, "model": stamps(files), "inputs": stamps(input_files)}


@contextmanager
def replacing_text(output: Path) -> Iterator[io.TextIOBase]:
    """A UTF-8 text stream (gzip for ``.gz``) that replaces ``output`` only when the block ends without an error."""
    with replacing(output) as tmp, open(tmp, "wb") as raw:
        gz = gzip.GzipFile(filename=output.name, mode="wb", fileobj=raw) if output.name.endswith(".gz") else None
        with io.TextIOWrapper(gz or raw, encoding="utf-8") as f:
            yield f
