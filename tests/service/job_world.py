"""A small world for job tests: one tenant, two users, a queue with GPU quota, a few nodes.

Rows are written through the service's own functions (governance.put_objects,
fleet.register_nodes), so the reconciler sees what a server would.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.job_state import ACTIVE
from gpuaas.service.auth import Role, mint_token, user_scope
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance import put_objects
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent, Membership, Tenant, User

KUEUE = "kueue.x-k8s.io/v1beta2"
TOKENS = {"alice": "gpa_alice-token-0123456789", "bob": "gpa_bob-token-0123456789abc"}


def kueue_objects(gpus: int, tenant: str = "acme") -> list[dict[str, Any]]:
    """A flavor, a ClusterQueue with ``gpus`` GPUs of quota (preempting lower priority), the
    tenant's LocalQueue ``default``, and priority classes high and low."""
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gpu"}, "spec": {}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1000"},
                                    {"name": "memory", "nominalQuota": "10Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": tenant},
            "spec": {"clusterQueue": "cq"},
        },
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 1000},
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
         "value": 0},
    ]  # fmt: skip


def node_entries(nodes: int = 2, gpus: int = 4) -> list[dict[str, Any]]:
    return [
        {
            "name": "node-{i}",
            "count": nodes,
            "cpu": "64",
            "memory": "512Gi",
            "gpus": {"model": "H100-80GB", "count": gpus},
            "topology": {"zone": "z1", "rack": "rack-{i}"},
        }
    ]


def build_world(db: Database, quota_gpus: int = 8, nodes: int = 2) -> dict[str, int]:
    """Tenant acme, users alice and bob (tenant-users, tokens in TOKENS), governance, nodes.
    Returns {"tenant": id, "alice": id, "bob": id}."""
    db.upgrade()
    ids: dict[str, int] = {}
    with db.session() as s:
        tenant = Tenant(name="acme", display_name="Acme", capacity={}, created_at=0.0)
        s.add(tenant)
        s.flush()
        ids["tenant"] = tenant.id
        for name, token in TOKENS.items():
            user = User(name=name, created_at=0.0)
            s.add(user)
            s.flush()
            ids[name] = user.id
            s.add(
                Membership(
                    user_id=user.id, tenant_id=tenant.id, role=Role.TENANT_USER.value,
                    created_at=0.0,
                )
            )  # fmt: skip
            s.flush()
            mint_token(s, user.id, "t", user_scope(s, user.id), 0.0, secret=token)
        put_objects(s, [(doc, None, None) for doc in kueue_objects(quota_gpus)], 0.0)
        register_nodes(s, node_entries(nodes), 0.0)
    return ids


def job_spec(name: str, gpus: int = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "kind": "training",
        "queue": "default",
        "command": ["python", "train.py"],
        "podSets": [
            {"name": "main", "count": 1, "resources": {"cpu": "2", "memory": "8Gi",
                                                        "nvidia.com/gpu": gpus}}
        ],
    }  # fmt: skip
    spec.update(extra)
    return spec


def jobs(session: Session) -> dict[int, Job]:
    return {job.id: job for job in session.scalars(select(Job).order_by(Job.id))}


def events(session: Session, job_id: int) -> list[tuple[str | None, str, str]]:
    rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
    return [(e.from_state, e.to_state, e.reason) for e in rows]


def devices_given_twice(session: Session) -> list[tuple[str, int]]:
    """(node, GPU slot) pairs held by admitted/running jobs beyond 1000 milli-GPU."""
    held: Counter[tuple[str, int]] = Counter()
    for job in session.scalars(select(Job).where(Job.state.in_([s.value for s in ACTIVE]))):
        for pod in job.placement or []:
            for slot, milli in pod["assignment"]["gpus"]:
                held[(pod["node"], slot)] += milli
    return [key for key, milli in held.items() if milli > 1000]


def job_row(db: Database, job_id: int) -> Job:
    """The job's row as stored now."""
    with db.sessions() as s:
        job = s.scalar(select(Job).where(Job.id == job_id))
        assert job is not None
        return job


def step_until(reconciler: Reconciler, check: Callable[[], bool], seconds: float = 15.0) -> None:
    """Step ``reconciler`` on the wall clock until ``check()`` holds; fail after ``seconds``
    (a backend on its own thread reports between steps, so tests cannot count steps)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reconciler.step(time.time())
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")
