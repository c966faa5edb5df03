"""The cluster autoscaler and the idle pool together, on the simulated fleet and a clock the
test moves: a tenant cluster's scale-out finds no free node (the pool holds them), asks the
pool for one (nodes_for_scale_out, reclaim_nodes: its pool job gets the checkpoint signal
and the grace period), says so in a ScaleOutShort event, asks no more while that reclaim is
in flight, and carves the node once the pool has given it back: the waiting job starts
within grace + 30 s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from idle_pool_world import PoolWorld, job

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.autoscaler import Autoscaler

GRACE = 30.0
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuaasTestKeyOnly alice@example"


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[PoolWorld]:
    app = create_app(make_settings(sqlite_url, tmp_path))
    with TestClient(app) as client:
        w = PoolWorld(Api(client, ADMIN_TOKEN), tmp_path, now=1_000_000.0)
        yield w
        w.reconciler.stop()


def test_a_scale_out_short_of_free_nodes_takes_them_back_from_the_idle_pool(
    world: PoolWorld,
) -> None:
    world.build(maxNodes=3, graceSeconds=GRACE)
    boss = world.member("acme", "boss", "tenant-admin")
    world.ok("PUT", "/v1/tenants/acme/cluster-allowance",
             json={"flavors": ["h100"], "nodeLimit": 2})  # fmt: skip
    body = {
        "name": "elastic",
        "kind": "baremetal",
        "sshKeys": [KEY],
        "pools": [{"name": "gpu", "flavor": "h100", "count": 1, "min": 1, "max": 2}],
        "autoscale": {"unneededSeconds": 600, "cooldownSeconds": 0},
    }
    world.ok("POST", "/v1/tenants/acme/clusters", boss, json=body)
    world.run_until(lambda: len(world.pool()["nodes"]) == 3, limit=30)
    world.run_until(lambda: world.pool()["state"] == "Ready", limit=5)
    spot = world.submit("nvcf-agent", "marketplace", job("spot", pods=3, cluster="spot"))
    world.run_until(lambda: world.state(spot) == "Running", limit=10)

    first = world.submit("ann", "acme", job("a", cluster="elastic"))
    world.run_until(lambda: world.state(first) == "Running", limit=10)
    second = world.submit("ann", "acme", job("b", cluster="elastic"))
    world.run_until(lambda: world.job(second).reason_code not in ("Submitted",
                    "WaitingForAdmission"), limit=5)  # fmt: skip
    scaler = Autoscaler(world.db, world.settings, world.reconciler.utilisation)
    asked = world.now
    (decision,) = scaler.step(world.now)
    assert decision.reason.code.value == "ScaledOutPending" and decision.count == 1
    reclaiming = world.pool()["reclaiming"]
    assert len(reclaiming) == 1  # one node asked back, not more
    events = world.ok("GET", "/v1/tenants/acme/clusters/elastic/events", boss)
    (short,) = [e for e in events if e["code"] == "ScaleOutShort"]
    assert short["fields"]["fields"]["missing"] == 1
    assert "being reclaimed from the idle pool" in short["reason"]

    def step() -> bool:
        scaler.step(world.now)
        return world.state(second) == "Running"

    world.run_until(step, limit=GRACE + 30)
    assert world.now - asked <= GRACE + 30
    assert len(world.ok("GET", "/v1/tenants/acme/clusters/elastic", boss)["nodes"]) == 2
    assert world.backend.signals and world.backend.signals[0][1] == GRACE
    events = world.ok("GET", "/v1/tenants/acme/clusters/elastic/events", boss)
    assert [e["code"] for e in events].count("ScaleOutShort") == 1
    world.check_exclusive()
