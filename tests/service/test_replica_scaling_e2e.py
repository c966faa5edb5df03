"""Workload autoscaling end to end on the simulated fleet (docs/workload-autoscaling.md): an
inference job in tenant cluster ``a`` listing cluster ``b`` scales up when its replicas are
busy (each new replica a job admitted through the same queue and quota, or waiting with its
reason), spills to ``b`` when ``a`` is full, scales down when they idle (the removed replicas
stopped with the decision's reason, ``b``'s first), and its replicas end with it; bad input
is refused naming the field and stores nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from test_clusters_api import KEY, World, node

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.backends.base import DEFAULT_GRACE
from gpuaas.model.job_state import JobState
from gpuaas.model.telemetry import UtilSummary
from gpuaas.service.app import create_app
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.utilisation import Utilisation
from gpuaas.store.db import Database
from gpuaas.store.tables import REQUEST_LOGS, Base, Job

NODES = [node(f"n{i}", "r1", f"d{i}") for i in range(1, 5)]


class SpreadLoad(Utilisation):
    """The service's windows (fed by the simulated fleet as always) with ``job`` read from a
    load the test sets: ``total`` replicas' worth (2.5 = two and a half replicas fully busy)
    spread evenly over the job's running replicas, each reading ``min(1, total / running)``,
    so the test can make the load rise and fall (a declared profile is fixed at submission)."""

    def __init__(self, db: Database, clock: Any) -> None:
        super().__init__(window=10.0, clock=clock)
        self.db = db
        self.total = 0.0

    def _running(self, job_id: int) -> list[int]:
        with self.db.sessions() as s:
            job = s.get(Job, job_id)
            if job is None or job.state != JobState.RUNNING:
                return []
            root = int(job.spec.get("replicaOf", job.id))
            rows = s.scalars(select(Job).where(Job.state == JobState.RUNNING.value)).all()
            return [j.id for j in rows if int(j.spec.get("replicaOf", j.id)) == root]

    def job(self, job_id: int) -> UtilSummary | None:
        running = self._running(job_id)
        if not running:
            return None
        util = min(1.0, self.total / len(running))
        return UtilSummary(util, util, 10, 10.0, self.clock())


class Fleet(World):
    def __init__(self, api: Api, tmp_path: Path) -> None:
        super().__init__(api, tmp_path)
        self.clock = time.time()
        self.load = SpreadLoad(self.db, lambda: self.clock)
        self.reconciler = Reconciler(self.db, self.settings, utilisation=self.load)

    def measured(self) -> None:
        """Read the utilisation the simulated fleet synthesises instead of the test's load."""
        self.reconciler.utilisation.job = super(SpreadLoad, self.load).job  # type: ignore[method-assign]

    def build(self) -> None:
        super().build()  # six 8-GPU nodes, tenants acme and globex, acme may carve 4
        for name in ("a", "b"):  # one node each
            body = {"name": name, "kind": "baremetal", "sshKeys": [KEY],
                    "pools": [{"name": "gpu", "flavor": "h100", "count": 1}]}  # fmt: skip
            self.ok("POST", "/v1/tenants/acme/clusters", self.admin(), json=body)
        self.settle(lambda: all(self.cluster(c)["state"] == "Ready" for c in ("a", "b")))

    def tick(self, steps: int = 1, seconds: float = 5.0) -> None:
        """Advance the reconciler's clock (the simulated fleet runs on it)."""
        for _ in range(steps):
            self.clock = max(self.clock + seconds, time.time())
            self.reconciler.step(self.clock)

    def view(self, job_id: int) -> dict[str, Any]:
        return self.ok("GET", f"/v1/tenants/acme/jobs/{job_id}", self.user())

    def replicas(self, job_id: int) -> dict[str, Any]:
        return self.view(job_id)["replicas"]

    def until(self, check: Any, steps: int = 40) -> None:
        for _ in range(steps):
            if check():
                return
            self.tick()
        raise AssertionError("not reached")


@pytest.fixture
def fleet(sqlite_url: str, tmp_path: Path) -> Iterator[Fleet]:
    app = create_app(make_settings(sqlite_url, tmp_path, telemetry_interval=1.0))
    with TestClient(app) as client:
        f = Fleet(Api(client, ADMIN_TOKEN), tmp_path)
        f.build()
        yield f
        f.reconciler.stop()


def inference(**autoscale: Any) -> dict[str, Any]:
    return {
        "name": "serve",
        "kind": "inference",
        "cluster": "a",
        "command": ["serve"],
        "duration": 10**6,
        "podSets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 4}}],
        "autoscale": {"minReplicas": 1, "maxReplicas": 4, "targetUtilization": 50,
                      "clusters": ["b"], "cooldownSeconds": 10, **autoscale},
    }  # fmt: skip


def test_replicas_scale_up_spill_to_the_next_cluster_and_scale_down(fleet: Fleet) -> None:
    stopped_on_backend: dict[int, float] = {}
    backend = fleet.reconciler.backend
    cancel = backend.cancel

    def recording(job_id: int, grace: float = DEFAULT_GRACE) -> None:
        stopped_on_backend[job_id] = grace
        cancel(job_id, grace)

    backend.cancel = recording  # type: ignore[method-assign]
    job_id = fleet.submit("acme", inference())
    fleet.load.total = 0.5  # one replica at 50 %: on target
    fleet.until(lambda: fleet.view(job_id)["state"] == "Running")
    fleet.tick(4)
    r = fleet.replicas(job_id)
    assert (r["desired"], r["current"], r["pending"]) == (1, 1, 0)
    assert r["lastDecision"] is None and r["jobs"] == [job_id]

    # busy: 3.2 replicas' worth on one -> ceil(1 x 100 % / 50 %) = 2, then 4 (the max)
    fleet.load.total = 3.2
    fleet.until(lambda: fleet.replicas(job_id)["desired"] == 2)
    r = fleet.replicas(job_id)
    assert r["lastDecision"]["code"] == "ReplicasScaledUp"
    assert r["lastDecision"]["fields"] == {"current": 1, "desired": 2, "utilization": 100.0,
                                           "target": 50.0}  # fmt: skip
    second = r["jobs"][1]
    replica = fleet.view(second)
    assert replica["name"] == "serve-r1" and replica["spec"]["replicaOf"] == job_id
    assert replica["spec"]["cluster"] == "a" and "autoscale" not in replica["spec"]
    fleet.until(lambda: fleet.replicas(job_id)["current"] == 2)
    # cluster a (one 8-GPU node) holds two 4-GPU replicas: the next ones wait there for
    # capacity, then spill to b
    fleet.until(lambda: fleet.replicas(job_id)["desired"] == 4)
    fleet.until(lambda: fleet.replicas(job_id)["current"] == 4, steps=80)
    r = fleet.replicas(job_id)
    by_cluster = {c["cluster"]: (c["running"], c["pending"]) for c in r["clusters"]}
    assert by_cluster == {"a": (2, 0), "b": (2, 0)}
    spilled = [j for j in r["jobs"] if any(e["code"] == "ReplicaSpilled" for e in fleet.events(j))]
    assert spilled == [], "a spilled replica is stopped; its successor runs in b"
    stopped = fleet.stopped(job_id)
    assert any(e["code"] == "ReplicaSpilled" for e in stopped.values())
    waited = [j for j in stopped if fleet.events(j)[-2]["toState"] == "Pending"]
    assert waited, "the spilled replica waited in a with its reason"
    with fleet.db.sessions() as s:
        row = s.get(Job, waited[0])
        assert row is not None and row.reason_code == "ReplicaSpilled"
        cause = row.reason_fields["fields"]["cause"]  # type: ignore[index]
    assert cause in ("UnusedQuotaShort", "InsufficientGpu", "FlavorNodesFull")
    # at the max: busy still, nothing more
    fleet.load.total = 8.0
    fleet.tick(6)
    r = fleet.replicas(job_id)
    assert r["current"] == 4 and r["lastDecision"]["code"] == "ReplicasAtMax"

    # idle: 0.3 over four -> ceil(4 x 7.5 % / 50 %) = 1: b's replicas go first, never the job
    fleet.load.total = 0.3
    fleet.until(lambda: fleet.replicas(job_id)["desired"] == 1)
    fleet.tick(2)
    r = fleet.replicas(job_id)
    assert r["jobs"] == [job_id] and r["current"] == 1
    assert r["lastDecision"]["code"] == "ReplicasScaledDown"
    for j, e in fleet.stopped(job_id).items():
        assert fleet.view(j)["state"] == "Cancelled"
        assert e["code"] in ("ReplicasScaledDown", "ReplicaSpilled"), e
        if e["code"] == "ReplicasScaledDown":  # it ran: stopped on the backend, with its grace
            assert e["fromState"] == "Running" and stopped_on_backend[j] == DEFAULT_GRACE

    # the job ends: so do its replicas (scale up again first)
    fleet.load.total = 1.6
    fleet.until(lambda: fleet.replicas(job_id)["current"] >= 2)
    fleet.ok("POST", f"/v1/tenants/acme/jobs/{job_id}/cancel", fleet.user())
    fleet.tick(3)
    for j in fleet.stopped(job_id):
        assert fleet.view(j)["state"] == "Cancelled"
    assert fleet.replicas(job_id)["jobs"] == []


def test_the_simulated_fleets_utilisation_follows_the_replicas_and_settles(
    fleet: Fleet,
) -> None:
    """The declared load (``utilization.total``: 1.5 replicas' worth) spread by the simulated
    fleet over the running replicas, read through the service's windows: one replica reads
    100 % -> 2 (75 % each) -> 3 (50 % each, on target), the third spilled to b, then steady."""
    fleet.measured()
    spec = inference(cooldownSeconds=20)
    spec["utilization"] = {"total": 150}
    job_id = fleet.submit("acme", spec)
    fleet.until(lambda: fleet.replicas(job_id)["current"] == 3, steps=120)
    fleet.tick(12)  # a minute on target: nothing changes
    r = fleet.replicas(job_id)
    assert (r["desired"], r["current"], r["pending"]) == (3, 3, 0), r
    by_cluster = {c["cluster"]: (c["running"], c["pending"]) for c in r["clusters"]}
    assert by_cluster == {"a": (2, 0), "b": (1, 0)}
    for j in r["jobs"]:
        measured = fleet.reconciler.utilisation.job(j)
        assert measured is not None and measured.known
        assert abs(measured.mean - 0.5) < 0.05, (j, measured)
    codes = [e["code"] for j in fleet.stopped(job_id) for e in fleet.events(j)]
    assert "ReplicaSpilled" in codes


def _events(fleet: Fleet, job_id: int) -> list[dict[str, Any]]:
    return fleet.ok("GET", f"/v1/tenants/acme/jobs/{job_id}/events", fleet.user())["items"]


def _stopped(fleet: Fleet, job_id: int) -> dict[int, dict[str, Any]]:
    """Every replica job of ``job_id`` that was stopped, with its last event."""
    with fleet.db.sessions() as s:
        rows = s.scalars(select(Job).where(Job.state == JobState.CANCELLED.value)).all()
        ids = [j.id for j in rows if j.spec.get("replicaOf") == job_id]
    return {j: _events(fleet, j)[-1] for j in ids}


Fleet.events = _events  # type: ignore[attr-defined]
Fleet.stopped = _stopped  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"autoscale": {"minReplicas": 3, "maxReplicas": 2}}, "autoscale.maxReplicas"),
        ({"autoscale": {"minReplicas": 0, "maxReplicas": 2}}, "autoscale.minReplicas"),
        ({"autoscale": {"minReplicas": 1, "maxReplicas": 2, "targetUtilization": 0}},
         "autoscale.targetUtilization"),
        ({"autoscale": {"minReplicas": 1, "maxReplicas": 2, "targetUtilization": 120}},
         "autoscale.targetUtilization"),
        ({"kind": "training"}, "autoscale"),
        ({"autoscale": {"minReplicas": 1, "maxReplicas": 2, "clusters": ["b", "nope"]}},
         "autoscale.clusters[1]"),
    ],
)  # fmt: skip
def test_bad_autoscale_is_refused_naming_the_field_and_stores_nothing(
    fleet: Fleet, change: dict[str, Any], field: str
) -> None:
    with fleet.db.engine.connect() as conn:
        before = {t.name: conn.execute(select(t)).all() for t in Base.metadata.sorted_tables
                  if t.name not in REQUEST_LOGS}  # fmt: skip
    body = {**inference(), **change}
    r = fleet.api.as_(fleet.user()).post("/v1/tenants/acme/jobs", json=body)
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == [field], r.json()
    r = fleet.api.as_(fleet.user()).post("/v1/tenants/acme/jobs/batch", json={"jobs": [body]})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == field, r.json()
    with fleet.db.engine.connect() as conn:
        after = {t.name: conn.execute(select(t)).all() for t in Base.metadata.sorted_tables
                 if t.name not in REQUEST_LOGS}  # fmt: skip
    assert after == before


SCHEMAS = Path(__file__).resolve().parents[2] / ".." / "shared" / "schemas"


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent (the Kubernetes schemas)")
def test_the_kubernetes_manifests_of_a_replica_set_count_its_replicas(fleet: Fleet) -> None:
    """minReplicas 3 with 2 pods each: three replicas at once (two in a, one spilled to b),
    each a Job of 2 pods pinned to its nodes, all labelled with the job they replicate and
    valid against the schemas."""
    from gpuaas.backends.kubernetes.manifests import REPLICA_OF
    from gpuaas.backends.kubernetes.schemas import validate

    spec = inference(minReplicas=3)
    spec["podSets"] = [{"name": "main", "count": 2, "resources": {"nvidia.com/gpu": 2}}]
    job_id = fleet.submit("acme", spec)
    fleet.until(lambda: fleet.replicas(job_id)["current"] == 3, steps=80)
    r = fleet.replicas(job_id)
    assert r["lastDecision"] is not None
    objects: list[dict[str, Any]] = []
    for target in ("kueue", "kai", "volcano"):
        for j in r["jobs"]:
            docs = fleet.ok("GET", f"/v1/tenants/acme/jobs/{j}/manifest?target={target}",
                            fleet.user())  # fmt: skip
            validate(docs, SCHEMAS)
            objects.extend(docs if target == "kueue" else [])
    workloads = [o for o in objects if o["metadata"]["labels"].get(REPLICA_OF) == str(job_id)]
    assert len(workloads) == 3  # one Job per replica: the set's replica count
    for o in workloads:
        assert o["kind"] == "Job" and o["spec"]["parallelism"] == 2
        affinity = o["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        assert affinity  # pinned to the nodes the replica was admitted on


def test_a_replica_never_takes_an_idempotency_key_the_user_took(fleet: Fleet) -> None:
    job_id = fleet.submit("acme", inference())
    mine = {**inference(), "name": "other", "idempotencyKey": f"replica-{job_id}-1"}
    del mine["autoscale"]
    other = fleet.submit("acme", mine)
    fleet.load.total = 1.0  # one replica at 100 % against 50 %: two wanted
    fleet.until(lambda: fleet.replicas(job_id)["desired"] == 2)
    second = fleet.replicas(job_id)["jobs"][1]
    assert second != other and fleet.view(second)["name"] == "serve-r2"
