"""The cluster autoscaler in the service, on the simulated fleet: a cluster scales out when its
jobs wait for capacity and back in when they end (each decision an event with its reason, the
cluster view showing them), max is held (ScaleOutAtMax), a node given back is not re-added
within the cooldown (ScaleOutShort when nothing else is free), two autoscalers and a manual
scale at once never take a pool above its max, and bad autoscale input is a 422 naming the
field with nothing stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from fixed_readings import Readings
from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.autoscaler import Autoscaler
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.tables import ClusterNodeRow, ClusterRow, Job

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuaasTestKeyOnly alice@example"
FAST = {"unneededSeconds": 0, "cooldownSeconds": 0, "disruptionBudget": 1}


def node(name: str, rack: str) -> dict[str, Any]:
    return {
        "name": name,
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "H100-80GB", "count": 8},
        "labels": {"gpuaas.io/pool": "h100"},
        "topology": {"rack": rack},
    }


class World:
    def __init__(self, api: Api, nodes: int) -> None:
        self.api = api
        self.db = api.client.app.state.db
        self.settings = api.client.app.state.settings
        self.reconciler = Reconciler(self.db, self.settings)
        self.tokens: dict[str, str] = {}
        self.build(nodes)

    def ok(self, method: str, url: str, token: str | None = None, **kw: Any) -> Any:
        r = self.api.as_(token or ADMIN_TOKEN).request(method, url, **kw)
        assert r.status_code < 300, (url, r.status_code, r.text)
        return r.json() if r.content else None

    def build(self, nodes: int) -> None:
        flavor = {"name": "h100", "spec": {"nodeLabels": {"gpuaas.io/pool": "h100"}}}
        self.ok("POST", "/v1/flavors", json=flavor)
        fleet = [node(f"n{i}", f"r{i}") for i in range(1, nodes + 1)]
        self.ok("POST", "/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                           "nodes": fleet})  # fmt: skip
        capacity = {"h100": {"nvidia.com/gpu": "64", "cpu": "1000", "memory": "10Ti"}}
        self.ok("POST", "/v1/tenants", json={"name": "acme", "capacity": capacity})
        for role in ("tenant-admin", "tenant-user"):
            self.ok("PUT", f"/v1/tenants/acme/members/{role}", json={"role": role})
            body = self.ok("POST", f"/v1/tenants/acme/members/{role}/tokens", json={"name": "t"})
            self.tokens[role] = body["token"]
        self.ok("PUT", "/v1/tenants/acme/cluster-allowance",
                json={"flavors": ["h100"], "nodeLimit": nodes})  # fmt: skip

    def create(self, count: int, lo: int, hi: int, **autoscale: Any) -> dict[str, Any]:
        body = {
            "name": "auto",
            "kind": "baremetal",
            "pools": [{"name": "gpu", "flavor": "h100", "count": count, "min": lo, "max": hi}],
            "sshKeys": [KEY],
            "autoscale": autoscale,
        }
        out = self.ok("POST", "/v1/tenants/acme/clusters", self.tokens["tenant-admin"], json=body)
        self.settle(lambda: self.cluster()["state"] == "Ready")
        return out

    def cluster(self) -> dict[str, Any]:
        return self.ok("GET", "/v1/tenants/acme/clusters/auto", self.tokens["tenant-admin"])

    def events(self) -> list[dict[str, Any]]:
        return self.ok("GET", "/v1/tenants/acme/clusters/auto/events",
                       self.tokens["tenant-admin"])  # fmt: skip

    def submit(self, gpus: int = 8) -> int:
        spec = {
            "name": "train",
            "cluster": "auto",
            "command": ["sleep", "600"],
            "duration": 3600,
            "podSets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": gpus}}],
        }
        return self.ok("POST", "/v1/tenants/acme/jobs", self.tokens["tenant-user"], json=spec)["id"]

    def cancel(self, job_id: int) -> None:
        self.ok("POST", f"/v1/tenants/acme/jobs/{job_id}/cancel", self.tokens["tenant-user"])

    def job(self, job_id: int) -> Job:
        with self.db.sessions() as s:
            row = s.get(Job, job_id)
            assert row is not None
            s.expunge(row)
            return row

    def waits(self, job_id: int) -> bool:
        """Whether the job waits with a reason the admission engine gave."""
        return world_code(self.job(job_id)) not in ("", "Submitted", "WaitingForAdmission")

    def settle(self, until: Any, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while True:
            self.reconciler.step(time.time())
            self.reconciler.clusters.advance(time.time())
            if until():
                return
            assert time.monotonic() < deadline, "not settled"
            time.sleep(0.01)

    def held(self) -> tuple[int, int]:
        """(nodes held and staying, nodes leaving) by the cluster's pool."""
        with self.db.sessions() as s:
            rows = list(s.scalars(select(ClusterNodeRow)))
            return sum(not r.releasing for r in rows), sum(r.releasing for r in rows)


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    app = create_app(make_settings(sqlite_url, tmp_path))
    with TestClient(app) as client:
        w = World(Api(client, ADMIN_TOKEN), nodes=4)
        yield w
        w.reconciler.stop()


def world_code(job: Job) -> str:
    return job.reason_code


def codes(events: list[dict[str, Any]]) -> list[str]:
    return [e["code"] for e in events]


def test_a_cluster_scales_out_when_jobs_wait_and_back_in_when_they_end(world: World) -> None:
    readings = Readings()
    scaler = Autoscaler(world.db, world.settings, readings)
    world.create(count=1, lo=1, hi=3, **FAST)
    # jobs of 6 GPUs: one per 8-GPU node, and the cluster's quota (its max, 24 GPUs) holds 4
    first = world.submit(6)
    world.settle(lambda: world.job(first).state == "Running")
    waiting = [world.submit(6), world.submit(6)]
    world.settle(lambda: all(world.waits(j) for j in waiting))
    assert all(world.job(j).state == "Pending" for j in waiting)

    (decision,) = scaler.step(time.time())
    assert decision.reason.code.value == "ScaledOutPending" and decision.count == 2
    view = world.cluster()
    assert len(view["nodes"]) == 3 and view["state"] == "Scaling"
    last = view["autoscale"]["decisions"][0]["reason"]
    assert last["code"] == "ScaledOutPending" and last["fields"]["jobs"] == waiting
    assert last["message"] == "pool gpu: adding 2 node(s) for 2 waiting job(s)"
    assert view["autoscale"]["targetUtilization"] == 70.0
    # the new nodes provision (cordoned: not capacity, the planner asks no more for them)
    assert scaler.step(time.time()) == []
    world.settle(lambda: all(world.job(j).state == "Running" for j in [first, *waiting]))
    assert world.held() == (3, 0)

    # at max: one more job waits (quota left, no room), the autoscaler says so once, adds nothing
    extra = world.submit(6)
    world.settle(lambda: world.waits(extra))
    (at_max,) = scaler.step(time.time())
    assert at_max.reason.code.value == "ScaleOutAtMax" and at_max.count == 0
    scaler.step(time.time())
    assert codes(world.events()).count("ScaleOutAtMax") == 1
    assert world.held() == (3, 0)
    world.cancel(extra)

    # the jobs end; the nodes read idle (known telemetry) and go, one per step (budget 1)
    for j in [first, *waiting]:
        world.cancel(j)
    world.settle(lambda: all(world.job(j).state == "Cancelled" for j in [first, *waiting, extra]))
    nodes = world.cluster()["nodes"]
    readings.level = dict.fromkeys(nodes, None)  # no telemetry: nothing is idle
    assert scaler.step(time.time()) == []
    readings.level = dict.fromkeys(nodes, 0.0)
    (out1,) = scaler.step(time.time())
    assert out1.reason.code.value == "ScaledInUnneeded" and len(out1.nodes) == 1
    assert world.held() == (2, 1)
    world.settle(lambda: world.held() == (2, 0) and world.cluster()["state"] == "Ready")
    (out2,) = scaler.step(time.time())
    world.settle(lambda: world.held() == (1, 0) and world.cluster()["state"] == "Ready")
    assert scaler.step(time.time()) == []  # min 1
    events = world.events()
    assert codes(events).count("ScaledInUnneeded") == 2
    released = [e for e in events if e["code"] == "ClusterReleased"]
    assert {n for e in released for n in e["fields"]["fields"]["nodes"]} == {
        *out1.nodes,
        *out2.nodes,
    }
    status = world.cluster()["autoscale"]
    assert status["decisions"][0]["reason"]["code"] == "ScaledInUnneeded"
    assert status["lastScaleIn"] >= status["lastScaleOut"]


def test_busy_nodes_and_a_hot_pool(world: World) -> None:
    """A node with a job is not released; a pool above its utilisation target grows."""
    readings = Readings()
    scaler = Autoscaler(world.db, world.settings, readings)
    world.create(count=2, lo=1, hi=3, **FAST)
    running = world.submit(gpus=4)
    world.settle(lambda: world.job(running).state == "Running")
    busy = {p["node"] for p in world.job(running).placement or []}
    nodes = world.cluster()["nodes"]
    readings.level = dict.fromkeys(nodes, 0.0)  # reads idle, but holds a job
    (d,) = scaler.step(time.time())
    assert d.reason.code.value == "ScaledInUnneeded" and not set(d.nodes) & busy
    world.settle(lambda: world.held() == (1, 0))
    readings.level = dict.fromkeys(busy, 0.95)
    (hot,) = scaler.step(time.time())
    assert hot.reason.code.value == "ScaledOutUtilization" and hot.count == 1
    assert hot.reason.fields["utilization"] == 95.0


def test_a_node_given_back_is_not_re_added_within_the_cooldown(world: World) -> None:
    readings = Readings()
    scaler = Autoscaler(world.db, world.settings, readings)
    world.create(count=2, lo=1, hi=2, unneededSeconds=0, cooldownSeconds=600)
    # the other two fleet nodes go to a second tenant-less use: cordon them
    nodes = world.cluster()["nodes"]
    others = sorted({"n1", "n2", "n3", "n4"} - set(nodes))
    for name in others:
        world.ok("POST", f"/v1/nodes/{name}/cordon")
    readings.level = dict.fromkeys(nodes, 0.0)
    (d,) = scaler.step(time.time())
    (gone,) = d.nodes
    world.settle(lambda: world.held() == (1, 0) and world.cluster()["state"] == "Ready")
    # two jobs now: one fits the node kept, one waits; the only free node is the one given
    # back, which the cooldown keeps out: a shortfall, said once
    jobs = [world.submit(), world.submit()]
    world.settle(lambda: all(world.waits(j) for j in jobs))
    scaler.step(time.time())
    scaler.step(time.time())
    short = [e for e in world.events() if e["code"] == "ScaleOutShort"]
    assert len(short) == 1
    assert short[0]["fields"]["fields"]["pool"] == "gpu"
    assert short[0]["fields"]["fields"]["missing"] == 1
    assert gone not in world.cluster()["nodes"]
    # another node becomes free: that one is taken
    world.ok("POST", f"/v1/nodes/{others[0]}/uncordon")
    (grow,) = scaler.step(time.time())
    assert grow.count == 1
    assert others[0] in world.cluster()["nodes"] and gone not in world.cluster()["nodes"]


def test_the_stabilization_window_keeps_the_recent_peak(world: World) -> None:
    """With ``stabilizationSeconds`` a pool is not scaled in below the most nodes it needed
    within the window; the loop that has not seen a whole window keeps the pool's size."""
    readings = Readings()
    scaler = Autoscaler(world.db, world.settings, readings)
    world.create(count=2, lo=1, hi=2, stabilizationSeconds=600, **FAST)
    assert world.cluster()["autoscale"]["stabilizationSeconds"] == 600
    nodes = world.cluster()["nodes"]
    readings.level = dict.fromkeys(nodes, 0.0)
    t0 = time.time()
    assert scaler.step(t0) == []  # a window not yet seen whole: the size (2) is the peak
    assert scaler.step(t0 + 599) == []
    (d,) = scaler.step(t0 + 601)  # a whole window of 0 needed: down to the min
    assert d.reason.code.value == "ScaledInUnneeded" and len(d.nodes) == 1


def test_bad_autoscale_input_is_refused_naming_the_field(world: World) -> None:
    token = world.tokens["tenant-admin"]

    def refused(pool: dict[str, Any], autoscale: dict[str, Any], field: str) -> None:
        body = {"name": "bad", "kind": "baremetal", "sshKeys": [KEY], "autoscale": autoscale,
                "pools": [{"name": "gpu", "flavor": "h100", "count": 1, **pool}]}  # fmt: skip
        r = world.api.as_(token).post("/v1/tenants/acme/clusters", json=body)
        assert r.status_code == 422, r.text
        assert field in r.text, (field, r.text)

    refused({"min": 3, "max": 2}, {}, "pools[0].min")
    refused({}, {"targetUtilization": 120}, "targetUtilization")
    refused({}, {"targetUtilization": 0}, "targetUtilization")
    refused({}, {"scaleInBelow": 80}, "scaleInBelow")
    refused({}, {"cooldownSeconds": -1}, "cooldownSeconds")
    refused({}, {"unneededSeconds": -5}, "unneededSeconds")
    refused({}, {"disruptionBudget": 0}, "disruptionBudget")
    refused({}, {"stabilizationSeconds": -1}, "stabilizationSeconds")
    with world.db.sessions() as s:
        assert s.scalar(select(ClusterRow.id)) is None  # nothing stored


@pytest.fixture
def any_world(db_url: str, tmp_path: Path) -> Iterator[World]:
    app = create_app(make_settings(db_url, tmp_path))
    with TestClient(app) as client:
        w = World(Api(client, ADMIN_TOKEN), nodes=4)
        yield w
        w.reconciler.stop()


def test_two_autoscalers_and_a_manual_scale_never_exceed_max(any_world: World) -> None:
    """Two loops (as two leaders would, briefly) and a tenant-admin's scale at once: the
    transaction that carves reads the pool under the fleet's turn, so max holds."""
    world = any_world
    world.create(count=1, lo=1, hi=2, **FAST)
    first = world.submit()
    world.settle(lambda: world.job(first).state == "Running")
    jobs = [world.submit() for _ in range(3)]
    world.settle(lambda: all(world.waits(j) for j in jobs))
    scalers = [Autoscaler(world.db, world.settings, Readings()) for _ in range(2)]
    now = time.time()
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def run(f: Any) -> None:
        try:
            start.wait()
            f()
        except BaseException as exc:
            errors.append(exc)

    def manual() -> None:
        r = world.api.as_(world.tokens["tenant-admin"]).post(
            "/v1/tenants/acme/clusters/auto/scale", json={"pools": [{"name": "gpu", "count": 2}]}
        )
        assert r.status_code < 300 or r.status_code in (409, 422), r.text

    threads = [threading.Thread(target=run, args=(lambda s=s: s.step(now),)) for s in scalers]
    threads.append(threading.Thread(target=run, args=(manual,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    held, leaving = world.held()
    assert held + leaving <= 2
    assert len(world.cluster()["nodes"]) <= 2
