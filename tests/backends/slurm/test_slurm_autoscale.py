"""The cluster autoscaler on the real slurmctld of the tests (three 8-GPU nodes): a tenant's
Slurm cluster (a partition of its own) grows when its jobs wait for capacity, the waiting jobs
then run in the partition on the new nodes, and when the jobs end the idle nodes go back one at
a time (disruption budget 1) down to the pool's min, the partition shrinking with them."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fixed_readings import Readings
from slurm_cluster import Cluster
from slurm_world import backend, build, job, settings, spec, submit

from gpuaas.backends.provisioners.slurm import SlurmProvisioner, partition_name
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.model.cluster import ClusterKind
from gpuaas.service.autoscaler import Autoscaler
from gpuaas.service.clusters import create_cluster, set_allowance
from gpuaas.service.jobs import cancel_job
from gpuaas.service.models.clusters import AllowanceIn, ClusterIn
from gpuaas.service.provisioners import Provisioners, availability
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterEvent, ClusterRow, Job, Tenant

PARTITION = partition_name("acme", "elastic")
SLEEP = ["sleep", "600"]


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


def partition_nodes(cluster: Cluster) -> str | None:
    done = subprocess.run(
        ["scontrol", "show", "partition", PARTITION], env=cluster.env, capture_output=True,
        text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    return next(
        (w.removeprefix("Nodes=") for w in done.stdout.split() if w.startswith("Nodes=")), ""
    )


def squeue_partition(cluster: Cluster, slurm_id: int) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", str(slurm_id), "-o", "%P"],
        env=cluster.env, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_a_slurm_cluster_scales_out_for_waiting_jobs_and_back_in(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    ids = build(db, slurm_cluster, quota_gpus=24)
    with db.session() as s:
        acme = s.get(Tenant, ids["tenant"])
        assert acme is not None
        set_allowance(s, acme, AllowanceIn(flavors=["gpu"], nodeLimit=3), 0.0)
    slurm = backend(slurm_cluster, tmp_path)
    config = settings(db, tmp_path)
    reconciler = Reconciler(db, config, backend=slurm)
    reconciler.clusters.provisioners = Provisioners(
        config, {ClusterKind.SLURM: SlurmProvisioner(SlurmCli(str(slurm_cluster.conf)))}
    )
    readings = Readings()
    scaler = Autoscaler(db, config, readings)

    def step_until(holds: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reconciler.step(time.time())
            reconciler.clusters.advance(time.time())
            if holds():
                return
            time.sleep(0.3)
        raise AssertionError(f"not reached in {timeout}s")

    def cluster() -> ClusterRow | None:
        with db.sessions() as s:
            row = s.query(ClusterRow).filter(ClusterRow.name == "elastic").one_or_none()
            if row is not None:
                s.expunge(row)
            return row

    def ready() -> bool:
        row = cluster()
        return row is not None and row.state == "Ready"

    def waits(job_id: int) -> bool:
        return job(db, job_id).reason_code not in ("", "Submitted", "WaitingForAdmission")

    def codes() -> list[str]:
        with db.sessions() as s:
            return [e.reason_code for e in s.query(ClusterEvent).order_by(ClusterEvent.id)]

    try:
        body = ClusterIn.model_validate({
            "name": "elastic", "kind": "slurm",
            "pools": [{"name": "h100", "flavor": "gpu", "count": 1, "min": 1, "max": 3}],
            "autoscale": {"unneededSeconds": 0, "cooldownSeconds": 0, "disruptionBudget": 1},
        })  # fmt: skip
        with db.session() as s:
            tenant = s.get(Tenant, ids["tenant"])
            create_cluster(s, tenant, body, time.time(), replace(config, backend="slurm"),
                           availability())  # fmt: skip
        step_until(ready)
        first_node = partition_nodes(slurm_cluster)
        assert first_node in ("n1", "n2", "n3")

        # three jobs of 6 GPUs: one runs, two wait for capacity
        jobs = [submit(db, ids, spec(f"j{i}", SLEEP, gpus=6, cluster="elastic", queue=None))
                for i in range(3)]  # fmt: skip
        step_until(lambda: job(db, jobs[0]).state == "Running" and all(waits(j) for j in jobs[1:]))
        (grow,) = scaler.step(time.time())
        assert grow.reason.code.value == "ScaledOutPending" and grow.count == 2
        step_until(lambda: all(job(db, j).state == "Running" for j in jobs), timeout=90)
        assert partition_nodes(slurm_cluster) == "n[1-3]"
        for j in jobs:  # each runs in the cluster's partition
            slurm_id = slurm.slurm_id(j)
            assert slurm_id is not None and squeue_partition(slurm_cluster, slurm_id) == PARTITION

        # the jobs end; idle nodes go back one per step down to the min of 1
        with db.session() as s:
            for j in jobs:
                row = s.get(Job, j)
                assert row is not None
                cancel_job(s, row, time.time())
        step_until(lambda: all(job(db, j).state == "Cancelled" for j in jobs), timeout=90)
        readings.level = {"n1": 0.0, "n2": 0.0, "n3": 0.0}
        for held in (2, 1):
            (shrink,) = scaler.step(time.time())
            assert shrink.reason.code.value == "ScaledInUnneeded" and len(shrink.nodes) == 1
            step_until(lambda held=held: ready() and partition_nodes(slurm_cluster) is not None
                       and len(_expand(partition_nodes(slurm_cluster) or "")) == held)  # fmt: skip
        assert scaler.step(time.time()) == []
        assert codes().count("ScaledOutPending") == 1 and codes().count("ScaledInUnneeded") == 2
        assert codes().count("ClusterReleased") == 2
    finally:
        reconciler.stop()
        slurm.close()
        subprocess.run(["scontrol", "delete", f"PartitionName={PARTITION}"],
                       env=slurm_cluster.env, capture_output=True)  # fmt: skip


def _expand(nodes: str) -> list[str]:
    """``n[1-3]`` / ``n[1,3]`` / ``n2`` -> node names."""
    if "[" not in nodes:
        return [nodes] if nodes else []
    prefix, rest = nodes.split("[", 1)
    out: list[str] = []
    for part in rest.rstrip("]").split(","):
        lo, _, hi = part.partition("-")
        out.extend(f"{prefix}{i}" for i in range(int(lo), int(hi or lo) + 1))
    return out
