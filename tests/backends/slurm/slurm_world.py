"""A gpuaas world on the test Slurm cluster: its nodes imported, a tenant with a queue, a
reconciler driving a :class:`SlurmBackend`, and a loop that steps it until something holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from job_world import kueue_objects
from slurm_cluster import Cluster

from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm import SlurmBackend
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.backends.slurm.inventory import inventory_entries
from gpuaas.backends.slurm.rest import SlurmRest
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent, Tenant, User


def backend(cluster: Cluster, root: Path, **options: Any) -> SlurmBackend:
    rest = SlurmRest(socket=str(cluster.socket))
    return SlurmBackend(
        LogLayout(root / "logs"), root / "state", rest=rest, cli=SlurmCli(str(cluster.conf)),
        **options,
    )  # fmt: skip


def build(db: Database, cluster: Cluster, quota_gpus: int) -> dict[str, int]:
    """Tenant acme, user alice, a queue with ``quota_gpus``, the cluster's nodes imported."""
    db.upgrade()
    listing = SlurmRest(socket=str(cluster.socket)).nodes()
    with db.session() as s:
        tenant = Tenant(name="acme", display_name="Acme", capacity={}, created_at=0.0)
        user = User(name="alice", created_at=0.0)
        s.add_all([tenant, user])
        s.flush()
        put_objects(s, [(doc, None, None) for doc in kueue_objects(quota_gpus)], 0.0)
        register_nodes(s, inventory_entries(listing, partitions=["gpu"]), 0.0)
        return {"tenant": tenant.id, "alice": user.id}


def settings(db: Database, root: Path) -> Settings:
    return Settings(db_url=db.url, data_dir=root, backend="slurm")


def submit(db: Database, world: dict[str, int], spec: dict[str, Any]) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), time.time())
        return job.id


def spec(name: str, command: list[str], pods: int = 1, gpus: int = 1, **extra: Any) -> dict:
    return {
        "name": name,
        "queue": "default",
        "command": command,
        "podSets": [{"name": "main", "count": pods,
                     "resources": {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": gpus}}],
        **extra,
    }  # fmt: skip


def job(db: Database, job_id: int) -> Job:
    with db.sessions() as s:
        row = s.get(Job, job_id)
        assert row is not None
        s.expunge(row)
        return row


def path(db: Database, job_id: int) -> list[tuple[str | None, str, str]]:
    with db.sessions() as s:
        rows = s.query(JobEvent).filter(JobEvent.job_id == job_id).order_by(JobEvent.id)
        return [(e.from_state, e.to_state, e.reason) for e in rows]


def step_until(
    reconciler: Reconciler, holds: Callable[[], bool], timeout: float = 30.0, every: float = 0.3
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconciler.step(time.time())
        if holds():
            return
        time.sleep(every)
    raise AssertionError(f"not reached in {timeout}s")


def state_is(db: Database, job_id: int, *states: str) -> Callable[[], bool]:
    return lambda: job(db, job_id).state in states
