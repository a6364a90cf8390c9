import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO


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
