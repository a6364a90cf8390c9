import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """`cuvee demo --run-dir demo` run once, as a user runs it (a subprocess, in a folder that is not the
    checkout), for the tests that read what it wrote: (the folder it ran in, its CompletedProcess)."""
    import subprocess
    import sys

    tmp = tmp_path_factory.mktemp("demo_run")
    r = subprocess.run([sys.executable, "-m", "cuvee.cli", "demo", "--run-dir", "demo"], cwd=tmp,
                       capture_output=True, text=True, timeout=900)
    return tmp, r


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real one-node SLURM cluster on loopback for the module's tests (tests/slurm_cluster.py); skipped
    with the reason when this machine cannot start one. Yields the SLURM_CONF path."""
    from slurm_cluster import one_node_cluster, slurm_available

    why = slurm_available()
    if why:
        pytest.skip(why)
    with one_node_cluster(tmp_path_factory.mktemp("slurm")) as conf:
        yield conf
