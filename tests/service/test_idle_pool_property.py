"""Properties of the idle pool over random runs of the service on a clock the test moves
(hypothesis drives the reconciler, the cluster worker and the pool loop on the simulated
fleet, with a tenant cluster beside the pool): after every step

- no node is in two clusters, or in the pool and a cluster at once, and no job runs on
  another tenant's cluster or the pool (the pool's jobs run only on the pool's nodes);
- no pool job is ever evicted without its grace period: every eviction of a pool job by a
  reclaim follows its checkpoint signal by at least the pool's grace;
- the pool never holds more than maxNodes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from idle_pool_world import PoolWorld, job
from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.store.tables import ClusterNodeRow, Job, JobEvent, Tenant

GRACE = 30.0
MAX_NODES = 3


class PoolRun(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        tmp = Path(self.tmp.name)
        self.app = create_app(make_settings(f"sqlite:///{tmp}/db.sqlite", tmp))
        self.client = TestClient(self.app)
        self.client.__enter__()
        self.world = PoolWorld(Api(self.client, ADMIN_TOKEN), tmp, now=1_000_000.0)
        self.world.build(maxNodes=MAX_NODES, settleSeconds=5, graceSeconds=GRACE)
        allowance = {"flavors": ["h100"], "nodeLimit": 1}
        self.world.ok("PUT", "/v1/tenants/acme/cluster-allowance", json=allowance)
        boss = self.world.member("acme", "boss", "tenant-admin")
        body = {"name": "bm", "kind": "baremetal",
                "pools": [{"name": "gpu", "flavor": "h100", "count": 1}]}  # fmt: skip
        self.world.ok("POST", "/v1/tenants/acme/clusters", boss, json=body)
        self.jobs: list[tuple[str, str, int]] = []  # (user, tenant, id)
        # the runs start with the pool full (the free nodes idle past the settle time)
        self.world.run_until(lambda: len(self.world.pool()["nodes"]) == MAX_NODES, limit=20)
        # and busy: a two-node and a one-node pool job on its three nodes
        self.pool_job(2)
        self.pool_job(1)
        spot = [j for _, t, j in self.jobs if t == "marketplace"]
        self.world.run_until(lambda: all(self.world.state(j) == "Running" for j in spot), limit=10)

    def teardown(self) -> None:
        self.world.reconciler.stop()
        self.client.__exit__(None, None, None)
        self.tmp.cleanup()

    @rule(pods=st.integers(1, 3))
    def tenant_job(self, pods: int) -> None:
        self.jobs.append(("ann", "acme", self.world.submit("ann", "acme", job("t", pods=pods))))

    @rule()
    def cluster_job(self) -> None:
        spec = job("c", cluster="bm")
        self.jobs.append(("ann", "acme", self.world.submit("ann", "acme", spec)))

    @rule(pods=st.integers(1, 2))
    def pool_job(self, pods: int) -> None:
        spec = job("s", pods=pods, cluster="spot")
        user = "nvcf-agent"
        self.jobs.append((user, "marketplace", self.world.submit(user, "marketplace", spec)))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.jobs:
            return
        user, tenant, job_id = data.draw(st.sampled_from(self.jobs))
        self.world.api.as_(self.world.tokens[user]).post(
            f"/v1/tenants/{tenant}/jobs/{job_id}/cancel"
        )

    @rule(seconds=st.sampled_from([1.0, 3.0, 7.0, 13.0]), times=st.integers(1, 8))
    def wait(self, seconds: float, times: int) -> None:
        for _ in range(times):
            self.world.step(seconds)
            self.exclusive()

    @invariant()
    def exclusive(self) -> None:
        w = self.world
        w.check_exclusive()
        with w.db.sessions() as s:
            pool_tenant = s.scalar(select(Tenant.id).where(Tenant.name == "marketplace"))
            held = {r.node for r in s.scalars(select(ClusterNodeRow))}
            active = Job.state.in_(["Admitted", "Running"])
            for j in s.scalars(select(Job).where(Job.tenant_id == pool_tenant, active)):
                for pod in j.placement or []:
                    assert pod["node"] in held, (j.id, pod["node"])  # pool jobs: pool nodes

    @invariant()
    def pool_within_max(self) -> None:
        view = self.world.ok("GET", "/v1/idle-pools/spot")
        staying = set(view["nodes"]) - {r["node"] for r in view["reclaiming"]}
        assert len(staying) <= MAX_NODES

    @invariant()
    def never_evicted_without_grace(self) -> None:
        w = self.world
        signalled = {}
        for job_id, grace, at in w.backend.signals:
            assert grace >= GRACE
            signalled.setdefault(job_id, []).append(at)
        with w.db.sessions() as s:
            pool_tenant = s.scalar(select(Tenant.id).where(Tenant.name == "marketplace"))
            evictions = s.execute(
                select(JobEvent.job_id, JobEvent.at)
                .join(Job, Job.id == JobEvent.job_id)
                .where(Job.tenant_id == pool_tenant, JobEvent.reason_code == "NodeDrained")
            ).all()
        for job_id, at in evictions:
            times = [t for t in signalled.get(job_id, []) if t <= at]
            assert times, f"pool job {job_id} evicted at {at} without a signal"
            assert at - max(times) >= GRACE, (job_id, at, times)


PoolRun.TestCase.settings = settings(
    max_examples=6,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TestPoolRun = PoolRun.TestCase
