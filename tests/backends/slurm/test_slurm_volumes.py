"""Volumes on the real Slurm cluster: a job writes into a volume on the nodes (the data dir is the
file system they share), a later job reads it, through the link at its mount path
and through ``$GPUAAS_VOLUME_<NAME>``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import Cluster
from slurm_world import backend, build, job, settings, spec, state_is, step_until, submit

from gpuaas.backends.logs import LogLayout
from gpuaas.model.cluster import VolumeSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.storage import create_volume
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


def test_a_volume_written_by_one_slurm_job_is_read_by_the_next(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    world = build(db, slurm_cluster, 16)
    reconciler = Reconciler(db, settings(db, tmp_path), backend=backend(slurm_cluster, tmp_path))
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        row = create_volume(
            s, settings(db, tmp_path), tenant, VolumeSpec("results", 1 << 20), "1Mi", ""
        )
        volume = Path(row.path)
    write = ["bash", "-c", 'echo "$SLURMD_NODENAME" > out/dir/who && ls "$GPUAAS_VOLUME_RESULTS"']
    first = submit(
        db, world, spec("writer", write, volumes=[{"name": "results", "mountPath": "/out/dir"}])
    )
    step_until(reconciler, state_is(db, first, "Succeeded", "Failed"))
    assert job(db, first).state == "Succeeded", job(db, first).reason
    writer_node = (volume / "who").read_text().strip()
    assert writer_node  # written on a Slurm node, seen in the volume's directory here
    read = ["bash", "-c", 'cat in/who "$GPUAAS_VOLUME_RESULTS/who"']
    mounts = [{"name": "results", "mountPath": "/in", "readOnly": True}]
    second = submit(db, world, spec("reader", read, volumes=mounts))
    step_until(reconciler, state_is(db, second, "Succeeded", "Failed"))
    assert job(db, second).state == "Succeeded", job(db, second).reason
    out = LogLayout(tmp_path / "logs").stdout(second, 0, 0).read_text()
    assert out == f"{writer_node}\n{writer_node}\n"
