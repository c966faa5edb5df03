"""A control plane with an idle-capacity pool on the simulated fleet, on a clock the test
moves (the reconciler, the cluster worker and the pool loop all take ``now``): four 8-GPU
H100 nodes, tenant ``acme`` with a queue over them, and a marketplace tenant whose service
user submits the pool's jobs. Shared by the end-to-end and the property tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api
from gpuaas.backends.sim import SimBackend
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.tables import ClusterNodeRow, ClusterRow, Job, JobEvent, NodeRow, Tenant

NODES = [
    {
        "name": f"n{i}",
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "H100-80GB", "count": 8},
        "labels": {"gpuaas.io/pool": "h100"},
        "topology": {"rack": "r1", "nvlinkDomain": f"d{i}"},
    }
    for i in range(1, 5)
]


class RecordingSim(SimBackend):
    """The simulated fleet, recording each checkpoint signal: (job, grace, when)."""

    def __init__(self) -> None:
        super().__init__()
        self.signals: list[tuple[int, float, float]] = []
        self.clock = 0.0

    def checkpoint(self, job_id: int, grace: float) -> None:
        self.signals.append((job_id, grace, self.clock))
        self.cancel(job_id, grace)

    def poll(self, now: float) -> list[Any]:
        self.clock = now
        return super().poll(now)


def job(name: str, pods: int = 1, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "command": ["sleep", "600"],
        "duration": 36000,
        "podSets": [{"name": "main", "count": pods, "resources": {"nvidia.com/gpu": gpus}}],
        **extra,
    }
    if "cluster" not in spec:
        spec.setdefault("queue", "main")
    return spec


class PoolWorld:
    def __init__(self, api: Api, tmp_path: Path, now: float) -> None:
        self.api = api
        self.tmp_path = tmp_path
        self.db = api.client.app.state.db
        self.settings = api.client.app.state.settings
        self.backend = RecordingSim()
        self.reconciler = Reconciler(self.db, self.settings, backend=self.backend)
        self.now = now
        self.tokens: dict[str, str] = {}

    def ok(self, method: str, url: str, token: str | None = None, **kw: Any) -> Any:
        r = self.api.as_(token or ADMIN_TOKEN).request(method, url, **kw)
        assert r.status_code < 300, (url, r.status_code, r.text)
        return r.json() if r.content else None

    def member(self, tenant: str, user: str, role: str = "tenant-user") -> str:
        self.ok("PUT", f"/v1/tenants/{tenant}/members/{user}", json={"role": role})
        body = self.ok("POST", f"/v1/tenants/{tenant}/members/{user}/tokens", json={"name": "t"})
        self.tokens[user] = body["token"]
        return body["token"]

    def build(self, **pool: Any) -> dict[str, Any]:
        flavor = {"name": "h100", "spec": {"nodeLabels": {"gpuaas.io/pool": "h100"}}}
        self.ok("POST", "/v1/flavors", json=flavor)
        self.ok("POST", "/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                           "nodes": NODES})  # fmt: skip
        capacity = {"h100": {"nvidia.com/gpu": "32", "cpu": "1000", "memory": "10Ti"}}
        self.ok("POST", "/v1/tenants", json={"name": "acme", "capacity": capacity})
        quota = [{"name": "cpu", "nominalQuota": "1000"},
                 {"name": "memory", "nominalQuota": "10Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": 32}]  # fmt: skip
        cq = {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": "h100", "resources": quota}]}]}  # fmt: skip
        self.ok("POST", "/v1/tenants/acme/cluster-queues", json={"name": "acme-cq", "spec": cq})
        self.ok("POST", "/v1/tenants/acme/local-queues",
                json={"name": "main", "clusterQueue": "acme-cq"})  # fmt: skip
        self.member("acme", "ann")
        body = {"name": "spot", "tenant": "marketplace", "marketplace": "nvcf",
                "settleSeconds": 10, "graceSeconds": 30, **pool}  # fmt: skip
        created = self.ok("POST", "/v1/idle-pools", json=body)
        self.member("marketplace", "nvcf-agent")
        return created

    # --- time ---------------------------------------------------------------------------

    def step(self, seconds: float = 1.0) -> None:
        """Move the clock and run one pass of the reconciler (which steps the pool) and the
        cluster worker."""
        self.now += seconds
        self.reconciler.step(self.now)
        self.reconciler.clusters.advance(self.now)

    def run_until(self, done: Any, limit: float, seconds: float = 1.0) -> float:
        """Step until ``done()``; the seconds it took on the clock (fails past ``limit``)."""
        start = self.now
        while not done():
            assert self.now - start <= limit, "not done in time"
            self.step(seconds)
        return self.now - start

    # --- reading ------------------------------------------------------------------------

    def submit(self, user: str, tenant: str, spec: dict[str, Any]) -> int:
        return self.ok("POST", f"/v1/tenants/{tenant}/jobs", self.tokens[user], json=spec)["id"]

    def job(self, job_id: int) -> Job:
        with self.db.sessions() as s:
            row = s.get(Job, job_id)
            assert row is not None
            s.expunge(row)
            return row

    def state(self, job_id: int) -> str:
        return self.job(job_id).state

    def nodes_of(self, job_id: int) -> set[str]:
        return {p["node"] for p in self.job(job_id).placement or []}

    def pool(self) -> dict[str, Any]:
        return self.ok("GET", "/v1/idle-pools/spot")

    def events(self, job_id: int) -> list[JobEvent]:
        with self.db.sessions() as s:
            rows = list(
                s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
            )
            for r in rows:
                s.expunge(r)
            return rows

    def check_exclusive(self) -> None:
        """No node in two clusters, or in the pool and a cluster at once: each carved node's
        label names exactly the cluster whose row holds it, no other node has the label, and
        no job runs on a node of another tenant's cluster (the pool included)."""
        with self.db.sessions() as s:
            clusters = {
                c.id: (c.name, s.get(Tenant, c.tenant_id).name, c.tenant_id)  # type: ignore[union-attr]
                for c in s.scalars(select(ClusterRow))
            }
            held = {r.node: r.cluster_id for r in s.scalars(select(ClusterNodeRow))}
            for node in s.scalars(select(NodeRow)):
                label = (node.spec.get("labels") or {}).get(CLUSTER_LABEL)
                if node.name in held:
                    name, tenant, _ = clusters[held[node.name]]
                    assert label == f"{tenant}.{name}", (node.name, label)
                else:
                    assert label is None, (node.name, label)
            for j in s.scalars(select(Job).where(Job.state.in_(["Admitted", "Running"]))):
                for pod in j.placement or []:
                    owner = held.get(pod["node"])
                    if owner is not None:
                        assert clusters[owner][2] == j.tenant_id, (j.id, pod["node"])
