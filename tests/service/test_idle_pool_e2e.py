"""The idle-capacity pool end to end on the simulated fleet, on a clock the test moves: the
provider registers the pool; idle nodes settle into it after the settle time (within
maxNodes); the marketplace's jobs run only there; a tenant job that needs capacity makes the
pool give back the nodes that disturb the fewest pool jobs: they get the checkpoint signal
with the grace, are not evicted before it is over, then are requeued in the pool; the
tenant job starts within grace + 30 s; events, the API and /metrics say so. And who may do
what: tenants never create or change the pool, bad settings are 422s naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from idle_pool_world import PoolWorld, job

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app

GRACE = 30.0


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[PoolWorld]:
    app = create_app(make_settings(sqlite_url, tmp_path))
    with TestClient(app) as client:
        w = PoolWorld(Api(client, ADMIN_TOKEN), tmp_path, now=1_000_000.0)
        yield w
        w.reconciler.stop()


def test_the_pool_takes_idle_nodes_and_gives_them_back_for_a_tenant_job(world: PoolWorld) -> None:
    created = world.build(maxNodes=3)
    assert created["tenant"] == "marketplace" and created["nodes"] == []
    assert created["graceSeconds"] == GRACE

    # idle nodes settle after 10 s, within maxNodes: 3 of the 4
    world.step()
    assert world.pool()["nodes"] == []
    world.run_until(lambda: len(world.pool()["nodes"]) == 3, limit=15)
    world.run_until(lambda: world.pool()["state"] == "Ready", limit=5)
    pool_nodes = set(world.pool()["nodes"])
    (free,) = {"n1", "n2", "n3", "n4"} - pool_nodes
    world.check_exclusive()

    # the marketplace's jobs run on the pool's nodes only: a one-node job and a two-node one
    agent = "nvcf-agent"
    single = world.submit(agent, "marketplace", job("spot-1", cluster="spot"))
    double = world.submit(agent, "marketplace", job("spot-2", pods=2, cluster="spot"))
    world.run_until(lambda: world.state(single) == world.state(double) == "Running", limit=10)
    assert world.nodes_of(single) | world.nodes_of(double) == pool_nodes
    world.check_exclusive()

    # a tenant job needing three whole nodes: the free one and two of the pool's; the pool
    # gives back the two-node job's nodes (one job disturbed, not two)
    tenant_job = world.submit("ann", "acme", job("train", pods=3))
    asked = world.now
    world.run_until(lambda: world.pool()["reclaiming"], limit=10)
    reclaiming = world.pool()["reclaiming"]
    assert {r["node"] for r in reclaiming} == world.nodes_of(double)
    assert all(r["jobs"] == [double] for r in reclaiming)
    world.run_until(lambda: world.backend.signals, limit=5)
    ((signalled, grace, at),) = world.backend.signals
    assert (signalled, grace) == (double, GRACE)

    # never evicted before the grace is over: still Running, holding its nodes
    world.run_until(lambda: world.now >= at + GRACE - 1, limit=GRACE)
    assert world.state(double) == "Running" and world.state(single) == "Running"
    assert world.state(tenant_job) == "Pending"

    # then evicted (requeued in the pool), the nodes given back, the tenant job started
    took = world.run_until(lambda: world.state(tenant_job) == "Running", limit=GRACE + 30)
    assert world.now - asked <= GRACE + 30, (world.now - asked, took)
    assert world.nodes_of(tenant_job) == {free} | {r["node"] for r in reclaiming}
    evicted = world.job(double)
    assert evicted.state == "Pending" and evicted.attempts == 1
    codes = [e.reason_code for e in world.events(double)]
    assert codes[-2:] == ["NodeDrained", "Requeued"]
    preempted = next(e for e in world.events(double) if e.reason_code == "NodeDrained")
    assert preempted.at >= at + GRACE
    assert world.state(single) == "Running"
    world.check_exclusive()

    # the pool's view, events and metrics
    world.run_until(lambda: world.pool()["reclaims"] == 2, limit=5)
    view = world.pool()
    assert len(view["nodes"]) == 1 and view["reclaiming"] == []
    assert all(0 < s <= GRACE + 30 for s in view["reclaimSeconds"])
    events = world.ok("GET", "/v1/tenants/marketplace/clusters/spot/events")
    codes = [e["code"] for e in events]
    for code in ("PoolRegistered", "PoolSettled", "PoolGraceStarted", "PoolEvicting",
                 "PoolReclaimed"):  # fmt: skip
        assert code in codes, code
    assert (
        codes.index("PoolGraceStarted") < codes.index("PoolEvicting") < codes.index("PoolReclaimed")
    )
    text = world.api.get("/metrics").text
    assert 'gpuaas_idle_pool_nodes{pool="spot",status="held"} 1.0' in text
    metrics = world.reconciler.telemetry.registry
    assert metrics.get_sample_value("gpuaas_idle_pool_reclaims_total") == 2
    assert metrics.get_sample_value("gpuaas_idle_pool_reclaim_seconds_count") == 2

    # the requeued pool job waits in the pool's queue; nodes that go idle again settle back
    assert world.state(double) == "Pending"


def test_tenants_cannot_create_or_change_the_pool(world: PoolWorld) -> None:
    world.build()
    world.ok(
        "PUT", "/v1/tenants/acme/cluster-allowance", json={"flavors": ["h100"], "nodeLimit": 4}
    )
    admin = world.member("acme", "boss", "tenant-admin")
    body = {"name": "mine", "kind": "baremetal", "idlePool": {"graceSeconds": 60},
            "pools": [{"name": "gpu", "flavor": "h100", "count": 1}]}  # fmt: skip
    r = world.api.as_(admin).post("/v1/tenants/acme/clusters", json=body)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "idlePool"
    # not even the provider through a tenant's clusters API
    r = world.api.post("/v1/tenants/acme/clusters", json=body)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "idlePool"
    # a tenant-admin reaches none of /v1/idle-pools
    for method, url in (("GET", "/v1/idle-pools"), ("GET", "/v1/idle-pools/spot"),
                        ("DELETE", "/v1/idle-pools/spot")):  # fmt: skip
        assert world.api.as_(admin).request(method, url).status_code == 403, url
    r = world.api.as_(admin).post("/v1/idle-pools", json={"name": "x"})
    assert r.status_code == 403
    # the marketplace's own admin cannot scale or delete the pool through the clusters API:
    # well-formed requests, refused by what the cluster is (409, as a cluster being deleted)
    mp = world.member("marketplace", "mp-admin", "tenant-admin")
    r = world.api.as_(mp).post("/v1/tenants/marketplace/clusters/spot/scale",
                               json={"pools": [{"name": "idle", "count": 4}]})  # fmt: skip
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "name"
    r = world.api.as_(mp).delete("/v1/tenants/marketplace/clusters/spot?force=true")
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "name"
    # acme sees nothing of the pool tenant, and cannot submit to the pool
    assert world.api.as_(admin).get("/v1/tenants/marketplace/clusters").status_code == 404
    r = world.api.as_(admin).post("/v1/tenants/acme/jobs", json=job("x", cluster="spot"))
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "cluster"
    # a second pool is refused
    r = world.api.post("/v1/idle-pools", json={"name": "other", "tenant": "other"})
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "name"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"graceSeconds": -5}, "graceSeconds"),
        ({"graceSeconds": 29.9}, "graceSeconds"),
        ({"settleSeconds": -1}, "settleSeconds"),
        ({"maxNodes": -1}, "maxNodes"),
        ({"kind": "mainframe"}, "kind"),
        ({"name": "Bad_Name"}, "name"),
        ({"tenant": "acme"}, "tenant"),  # a tenant with other business
    ],
)
def test_bad_settings_are_refused_naming_the_field(
    world: PoolWorld, body: dict, field: str
) -> None:
    world.build()
    world.ok("DELETE", "/v1/idle-pools/spot")
    before = world.ok("GET", "/v1/idle-pools")
    r = world.api.post("/v1/idle-pools", json={"name": "p2", **body})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"].split(".")[-1] == field, r.json()
    assert world.ok("GET", "/v1/idle-pools") == before  # nothing stored
    # an update with a bad grace is refused the same way
    world.ok("POST", "/v1/idle-pools", json={"name": "p3", "tenant": "mp3"})
    r = world.api.put("/v1/idle-pools/p3", json={"name": "p3", "tenant": "mp3",
                                                 "graceSeconds": 10})  # fmt: skip
    assert r.status_code == 422 and r.json()["errors"][0]["field"].endswith("graceSeconds")
    # and through a tenant's clusters API the same fields are refused before idlePool is
    bad = {"name": "c", "kind": "baremetal", "pools": [{"name": "g", "flavor": "h100", "count": 1}],
           "idlePool": {"graceSeconds": -5}}  # fmt: skip
    r = world.api.post("/v1/tenants/acme/clusters", json=bad)
    assert r.status_code == 422 and "idlePool" in r.json()["errors"][0]["field"]


def test_reclaim_for_gives_the_autoscaler_pool_nodes_after_the_grace(world: PoolWorld) -> None:
    """The cluster autoscaler's way in: ``reclaim_for`` in its own transaction marks the
    nodes, the pool signals their jobs, and they are free once the grace is over."""
    from gpuaas.service.idle_pool import reclaim_for

    world.build(maxNodes=2)
    world.run_until(lambda: len(world.pool()["nodes"]) == 2, limit=15)
    world.run_until(lambda: world.pool()["state"] == "Ready", limit=5)
    busy = world.submit("nvcf-agent", "marketplace", job("spot-1", cluster="spot"))
    world.run_until(lambda: world.state(busy) == "Running", limit=10)
    assert len(world.nodes_of(busy)) == 1
    with world.db.session() as s:
        assert reclaim_for(s, 0, lambda n: True, world.now) == []
        assert reclaim_for(s, 5, lambda n: n == "nope", world.now) == []
        got = reclaim_for(s, 2, lambda n: True, world.now, {"cluster": "acme.bm"})
    assert sorted(got) == sorted(world.pool()["nodes"])  # both, never more than the pool has
    asked = world.now
    world.run_until(lambda: world.backend.signals, limit=5)
    assert world.backend.signals[0][:2] == (busy, GRACE)
    world.run_until(lambda: world.pool()["nodes"] == [], limit=GRACE + 30)
    assert world.now - asked >= GRACE  # the busy node waited for its job's grace
    assert world.state(busy) == "Pending"
    with world.db.session() as s:  # the nodes are free: none left to reclaim
        assert reclaim_for(s, 1, lambda n: True, world.now) == []


def test_a_node_given_back_does_not_settle_back_within_the_flap_window(world: PoolWorld) -> None:
    """A pool flap (a node reclaimed from the pool and given back to it within 10 min) is held
    off: once the tenant job that took the node ends, the node stays free, settle time or
    not, until 10 min after its reclaim; then it settles as any idle node."""
    world.build()
    world.run_until(lambda: len(world.pool()["nodes"]) == 4, limit=15)
    world.run_until(lambda: world.pool()["state"] == "Ready", limit=5)
    tenant_job = world.submit("ann", "acme", {**job("short"), "duration": 60})
    asked = world.now
    world.run_until(lambda: world.state(tenant_job) == "Running", limit=GRACE + 30)
    (taken,) = world.nodes_of(tenant_job)
    world.run_until(lambda: world.state(tenant_job) == "Succeeded", limit=120, seconds=5)
    # free and idle far longer than the settle time (10 s), still out of the pool
    world.run_until(lambda: world.now - asked >= 540, limit=600, seconds=10)
    assert taken not in world.pool()["nodes"] and len(world.pool()["nodes"]) == 3
    world.run_until(lambda: taken in world.pool()["nodes"], limit=90, seconds=5)
    assert world.now - asked > 600
    world.check_exclusive()
