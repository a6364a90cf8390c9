"""fastText training in a fresh child process whose large buffers are fresh zero pages.

Why: the fastText 0.9.2 build cuvee installs leaves most of its input matrix (the word n-gram bucket rows that
``DenseMatrix::uniform`` does not reach with few threads) as whatever the allocator hands back. In a fresh
process that memory is new zero pages and training is deterministic; after the host process has allocated and
freed large buffers (a transformer trained earlier, a previous fastText model) it is reused heap holding old
bytes, so the same data, settings and seed gave another model, or stopped with "Encountered NaN.". Measured on
the test data: in one fresh process the 4th of 5 identical trainings differed; after a transformer was trained
in the same process all 5 differed; with a child process and ``MALLOC_MMAP_THRESHOLD_`` fixed (every buffer
over 4 KiB a fresh mapping) all were identical. So cuvee trains in a child, with that setting.

The child reads one JSON argument (the ``train_supervised`` keyword arguments, optional ``quantize`` keyword
arguments and the output path), saves the model there and exits 0; any failure is one line on stderr and exit 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ENV = {"MALLOC_MMAP_THRESHOLD_": "4096"}  # fixed threshold: glibc no longer raises it, so big buffers stay fresh


def train_in_child(train_kwargs: dict, quantize_kwargs: dict | None, out: str) -> None:
    """Train (and quantize) in a fresh process and save the model at ``out``; RuntimeError with the child's line."""
    arg = json.dumps({"train": train_kwargs, "quantize": quantize_kwargs, "out": out})
    proc = subprocess.run([sys.executable, "-m", "cuvee.classifiers.fasttext_child", arg], capture_output=True,
                          text=True, env={**os.environ, **ENV}, check=False)
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        raise RuntimeError(lines[-1] if lines else f"fastText training process exited with {proc.returncode}")


def main(arg: str) -> int:
    spec = json.loads(arg)
    try:
        import fasttext

        model = fasttext.train_supervised(**spec["train"])
        if spec.get("quantize"):
            model.quantize(**spec["quantize"])
        model.save_model(spec["out"])
    except Exception as e:  # noqa: BLE001 - the child's failure becomes the parent's one line
        print(" ".join(str(e).split()) or type(e).__name__, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
