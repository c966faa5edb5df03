"""A tenant's Slurm cluster on the real slurmctld of the tests (three 8-GPU nodes, see
conftest.py): a partition of its own, its jobs run there only on its nodes, scale-out and
scale-in change the partition (a busy node is drained and its job requeued first), delete
gives the nodes back, and another tenant's jobs never touch them."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from slurm_cluster import Cluster
from slurm_world import backend, build, job, settings, spec, submit

from gpuaas.backends.provisioners.slurm import SlurmProvisioner, partition_name
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.model.cluster import CLUSTER_LABEL, ClusterKind
from gpuaas.service.clusters import create_cluster, delete_cluster, scale_cluster, set_allowance
from gpuaas.service.errors import ApiError
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.clusters import AllowanceIn, ClusterIn, ScaleIn
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.provisioners import Provisioners, availability
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterRow, NodeRow, Tenant, User

PARTITION = partition_name("acme", "hpc")
SLEEP = ["sleep", "600"]


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


def squeue(cluster: Cluster, slurm_id: int) -> tuple[str, str, str]:
    """(state, partition, nodes) of a Slurm job."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", str(slurm_id), "-o", "%T|%P|%N"],
        env=cluster.env, capture_output=True, text=True,
    )  # fmt: skip
    state, partition, nodes = [*out.stdout.strip().split("|"), "", "", ""][:3]
    return state, partition, nodes


def partition_nodes(cluster: Cluster) -> str | None:
    done = subprocess.run(
        ["scontrol", "show", "partition", PARTITION], env=cluster.env, capture_output=True,
        text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    for word in done.stdout.split():
        if word.startswith("Nodes="):
            return word.removeprefix("Nodes=")
    return ""


class World:
    def __init__(self, db: Database, cluster: Cluster, tmp_path: Path) -> None:
        self.db = db
        self.cluster = cluster
        self.ids = build(db, cluster, quota_gpus=24)
        with db.session() as s:
            globex = Tenant(name="globex", display_name="Globex", capacity={}, created_at=0.0)
            bob = User(name="bob", created_at=0.0)
            s.add_all([globex, bob])
            s.flush()
            self.ids.update(globex=globex.id, bob=bob.id)
            queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": "default", "namespace": "globex"},
                     "spec": {"clusterQueue": "cq"}}  # fmt: skip
            put_objects(s, [(queue, None, None)], 0.0)
            acme = s.get(Tenant, self.ids["tenant"])
            assert acme is not None
            set_allowance(s, acme, AllowanceIn(flavors=["gpu"], nodeLimit=3), 0.0)
        self.slurm = backend(cluster, tmp_path)
        self.settings = settings(db, tmp_path)
        self.reconciler = Reconciler(db, self.settings, backend=self.slurm)
        provisioner = SlurmProvisioner(SlurmCli(str(cluster.conf)))
        self.reconciler.clusters.provisioners = Provisioners(
            self.settings, {ClusterKind.SLURM: provisioner}
        )

    def acme(self, s: object) -> Tenant:
        tenant = s.get(Tenant, self.ids["tenant"])  # type: ignore[attr-defined]
        assert tenant is not None
        return tenant

    def step_until(self, holds: Callable[[], bool], timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.reconciler.step(time.time())
            self.reconciler.clusters.advance(time.time())
            if holds():
                return
            time.sleep(0.3)
        raise AssertionError(f"not reached in {timeout}s")

    def state(self) -> str | None:
        with self.db.sessions() as s:
            row = s.query(ClusterRow).filter(ClusterRow.name == "hpc").one_or_none()
            return None if row is None else row.state

    def submit_globex(self, name: str, command: list[str], gpus: int) -> int:
        with self.db.session() as s:
            tenant = s.get(Tenant, self.ids["globex"])
            assert tenant is not None
            body = JobSpec.model_validate(spec(name, command, gpus=gpus))
            created, _ = submit_job(s, tenant, self.ids["bob"], body, time.time())
            return created.id

    def nodes(self, job_id: int) -> set[str]:
        return {p["node"] for p in job(self.db, job_id).placement or []}

    def labelled(self) -> set[str]:
        with self.db.sessions() as s:
            return {
                r.name for r in s.query(NodeRow) if CLUSTER_LABEL in (r.spec.get("labels") or {})
            }


def test_a_tenant_slurm_cluster_is_a_partition_of_its_own(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    w = World(db, slurm_cluster, tmp_path)
    try:
        _lifecycle(w, slurm_cluster)
    finally:
        w.reconciler.stop()
        w.slurm.close()
        subprocess.run(["scontrol", "delete", f"PartitionName={PARTITION}"],
                       env=slurm_cluster.env, capture_output=True)  # fmt: skip


def _lifecycle(w: World, slurm_cluster: Cluster) -> None:
    db = w.db
    body = ClusterIn.model_validate({
        "name": "hpc", "kind": "slurm",
        "pools": [{"name": "h100", "flavor": "gpu", "count": 2, "min": 1, "max": 3}],
    })  # fmt: skip
    with db.session() as s:
        create_cluster(s, w.acme(s), body, time.time(), replace(w.settings, backend="slurm"),
                       availability())  # fmt: skip
    w.step_until(lambda: w.state() == "Ready")
    assert partition_nodes(slurm_cluster) == "n[1-2]"
    assert w.labelled() == {"n1", "n2"}

    # a user's job naming the cluster runs in its partition, on its two nodes only
    # (two pods of 5 GPUs: one per node, 3 GPUs left free on each)
    a = submit(db, w.ids, spec("a", SLEEP, pods=2, gpus=5, cluster="hpc", queue=None))
    w.step_until(lambda: job(db, a).state == "Running")
    slurm_a = w.slurm.slurm_id(a)
    assert slurm_a is not None
    state, partition, nodes = squeue(slurm_cluster, slurm_a)
    assert (state, partition, nodes) == ("RUNNING", PARTITION, "n[1-2]")

    # another tenant's jobs never touch the cluster's nodes, though they have GPUs free
    theirs = [w.submit_globex(f"g{i}", ["sleep", "2"], gpus=1) for i in range(3)]
    w.step_until(lambda: all(job(db, j).state == "Succeeded" for j in theirs), timeout=60)
    assert set().union(*(w.nodes(j) for j in theirs)) == {"n3"}

    # scale to 3: the partition takes n3
    with db.session() as s:
        scale_cluster(s, w.acme(s), "hpc", ScaleIn.model_validate(
            {"pools": [{"name": "h100", "count": 3}]}), time.time(), "slurm")  # fmt: skip
    w.step_until(lambda: w.state() == "Ready")
    assert partition_nodes(slurm_cluster) == "n[1-3]"
    b = submit(db, w.ids, spec("b", SLEEP, gpus=8, cluster="hpc", queue=None))
    w.step_until(lambda: job(db, b).state == "Running")
    assert w.nodes(b) == {"n3"}
    slurm_b = w.slurm.slurm_id(b)
    assert slurm_b is not None and squeue(slurm_cluster, slurm_b)[1:] == (PARTITION, "n3")

    # back to 2 with b running on the node to go: b is drained (cancelled in Slurm,
    # requeued in gpuaas) before the partition lets n3 go
    with db.session() as s:
        scale_cluster(s, w.acme(s), "hpc", ScaleIn.model_validate(
            {"pools": [{"name": "h100", "count": 2}]}), time.time(), "slurm")  # fmt: skip
    w.step_until(lambda: w.state() == "Ready")
    row = job(db, b)
    assert row.state == "Pending" and row.attempts == 1, (row.state, row.reason)
    assert squeue(slurm_cluster, slurm_b)[0] in ("CANCELLED", "COMPLETING", "")
    assert partition_nodes(slurm_cluster) == "n[1-2]"
    assert w.labelled() == {"n1", "n2"}
    assert job(db, a).state == "Running"  # the staying nodes' job was left alone

    # delete: refused while a runs, then forced; the partition goes, the nodes come back
    with db.session() as s, pytest.raises(ApiError) as refused:
        delete_cluster(s, w.acme(s), "hpc", False, time.time())
    assert refused.value.status == 409 and refused.value.field == "force"
    with db.session() as s:
        delete_cluster(s, w.acme(s), "hpc", True, time.time())
    w.step_until(lambda: w.state() is None, timeout=60)
    assert job(db, a).state == "Cancelled" and job(db, b).state == "Cancelled"
    assert partition_nodes(slurm_cluster) is None
    assert w.labelled() == set()
    back = w.submit_globex("back", ["sleep", "1"], gpus=8)
    w.step_until(lambda: job(db, back).state == "Succeeded", timeout=60)
