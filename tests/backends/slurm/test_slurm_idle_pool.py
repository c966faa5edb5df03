"""The idle-capacity pool on the real slurmctld of the tests (three 8-GPU nodes), as a Slurm
partition of its own: idle nodes settle into the partition; a pool job runs there; a tenant
job needing capacity makes the pool reclaim a node: the pool job receives SIGTERM (``scancel
--signal=TERM``) and keeps running through its grace period, then is cancelled in
Slurm and requeued in gpuaas; the partition lets the node go and the tenant job starts
within grace + 30 s of its submission."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import Cluster
from slurm_world import backend, build, job, settings, spec, submit
from sqlalchemy import select

from gpuaas.backends.logs import LogLayout
from gpuaas.backends.provisioners.slurm import SlurmProvisioner, partition_name
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.model.cluster import ClusterKind
from gpuaas.service.auth import Principal, Role
from gpuaas.service.idle_pool import pool_row, pool_view, register_pool
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.idle_pool import IdlePoolIn
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.provisioners import Provisioners, availability
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterEvent, Tenant, User

GRACE = 30.0
PARTITION = partition_name("marketplace", "spot")
PROVIDER = Principal(user_id=0, user="provider", platform_role=Role.PROVIDER_ADMIN)


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


def squeue_state(cluster: Cluster, slurm_id: int) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(slurm_id), "-o", "%T"],
                         env=cluster.env, capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


def partition_nodes(cluster: Cluster) -> str | None:
    done = subprocess.run(["scontrol", "show", "partition", PARTITION], env=cluster.env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        return None
    words = [w for w in done.stdout.split() if w.startswith("Nodes=")]
    return words[0].removeprefix("Nodes=") if words else ""


def test_the_pool_is_a_partition_and_gives_a_node_back_after_the_grace(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    ids = build(db, slurm_cluster, quota_gpus=24)
    slurm = backend(slurm_cluster, tmp_path)
    config = settings(db, tmp_path)
    reconciler = Reconciler(db, config, backend=slurm)
    reconciler.clusters.provisioners = Provisioners(
        config, {ClusterKind.SLURM: SlurmProvisioner(SlurmCli(str(slurm_cluster.conf)))}
    )

    def step_until(holds, timeout: float) -> float:  # type: ignore[no-untyped-def]
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            reconciler.step(time.time())
            reconciler.clusters.advance(time.time())
            if holds():
                return time.monotonic() - start
            time.sleep(0.3)
        raise AssertionError(f"not reached in {timeout}s")

    def view():  # type: ignore[no-untyped-def]
        with db.sessions() as s:
            row = pool_row(s)
            assert row is not None
            return pool_view(s, row)

    try:
        with db.session() as s:
            body = IdlePoolIn(name="spot", tenant="marketplace", kind=ClusterKind.SLURM,
                              settleSeconds=0, graceSeconds=GRACE, maxNodes=2)  # fmt: skip
            register_pool(s, PROVIDER, body, time.time(), availability())
            agent = User(name="nvcf-agent", created_at=0.0)
            s.add(agent)
            s.flush()
            agent_id = agent.id

        # two idle nodes settle into the pool's partition (maxNodes 2), the third stays free
        step_until(lambda: len(view().nodes) == 2 and view().state == "Ready", timeout=30)
        assert partition_nodes(slurm_cluster) == "n[1-2]"

        # a pool job on both pool nodes, trapping the checkpoint signal
        script = "trap 'echo checkpoint-signal; sleep 300' TERM; echo up; sleep 600 & wait"
        with db.session() as s:
            tenant = s.scalar(select(Tenant).where(Tenant.name == "marketplace"))
            assert tenant is not None
            pool_spec = spec("spot", ["bash", "-c", script], pods=2, gpus=8, cluster="spot",
                             queue=None)  # fmt: skip
            pool_job, _ = submit_job(s, tenant, agent_id, JobSpec.model_validate(pool_spec),
                                     time.time())  # fmt: skip
            pool_id = pool_job.id
        step_until(lambda: job(db, pool_id).state == "Running", timeout=60)
        slurm_pool = slurm.slurm_id(pool_id)
        assert slurm_pool is not None
        out = LogLayout(tmp_path / "logs").stdout(pool_id, 0, 0)
        step_until(lambda: out.exists() and "up" in out.read_text(), timeout=20)  # trap set

        # a tenant job for two whole nodes: the free one and one of the pool's
        asked = time.monotonic()
        tenant_job = submit(db, ids, spec("train", ["sleep", "600"], pods=2, gpus=8))
        step_until(lambda: bool(view().reclaiming), timeout=20)
        step_until(lambda: "checkpoint-signal" in out.read_text(), timeout=15)  # SIGTERM came
        signalled = time.monotonic()
        assert squeue_state(slurm_cluster, slurm_pool) == "RUNNING"  # it keeps running

        # through its grace: not evicted, still running in Slurm
        step_until(lambda: time.monotonic() - signalled >= GRACE - 5, timeout=GRACE)
        assert job(db, pool_id).state == "Running"
        assert squeue_state(slurm_cluster, slurm_pool) == "RUNNING"
        assert job(db, tenant_job).state == "Pending"

        # then cancelled in Slurm, requeued in gpuaas; the tenant job runs within grace + 30 s
        step_until(lambda: job(db, tenant_job).state == "Running", timeout=GRACE + 30)
        assert time.monotonic() - asked <= GRACE + 30
        row = job(db, pool_id)
        assert row.state == "Pending" and row.attempts == 1, (row.state, row.reason)
        assert squeue_state(slurm_cluster, slurm_pool) in ("CANCELLED", "COMPLETING", "")
        step_until(lambda: view().reclaims == 1, timeout=10)
        assert len(view().nodes) == 1 and partition_nodes(slurm_cluster) == view().nodes[0]
        with db.sessions() as s:
            codes = list(s.scalars(select(ClusterEvent.reason_code).order_by(ClusterEvent.id)))
        assert {"PoolSettled", "PoolGraceStarted", "PoolEvicting", "PoolReclaimed"} <= set(codes)
        assert view().reclaimSeconds[0] <= GRACE + 30
    finally:
        reconciler.stop()
        slurm.close()
        subprocess.run(["scancel", "--partition", PARTITION], env=slurm_cluster.env,
                       capture_output=True)  # fmt: skip
        subprocess.run(["scancel", "--partition", "gpu"], env=slurm_cluster.env,
                       capture_output=True)  # fmt: skip
        subprocess.run(["scontrol", "delete", f"PartitionName={PARTITION}"],
                       env=slurm_cluster.env, capture_output=True)  # fmt: skip
