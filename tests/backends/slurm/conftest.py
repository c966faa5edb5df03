"""A real Slurm cluster for the whole session (3 nodes of 8 fake H100s, slurmrestd on a unix
socket), started once and stopped after; tests that need it skip, saying why, only when the
Slurm binaries are absent (``make test`` installs them) or we are not root (munged and the
slurmrestd user need it)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "service"))  # job_world

from slurm_cluster import Cluster, missing_binaries

NODES = 3


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Slurm is not installed here (missing {', '.join(missing)}): "
            "`make test-deps` installs slurm-wlm, slurmrestd and munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (munged, slurmd, a slurmrestd user)")
    base = Path(tempfile.mkdtemp(prefix="gpuaas-slurm-", dir="/tmp"))
    cluster = Cluster(base, NODES)
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
    shutil.rmtree(base, ignore_errors=True)
