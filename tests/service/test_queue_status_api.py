"""A ClusterQueue's status in the API (Kueue's ``flavorsUsage``, pending and admitted
workloads): what the reconciler's engine charged, read back from the jobs table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from job_world import build_world, job_spec

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.model.resources import format_amount
from gpuaas.service.app import create_app
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant

T0 = 1_000_000.0


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)  # ClusterQueue cq: 8 GPUs; 2 nodes x 4


@pytest.fixture
def reconciler(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Reconciler]:
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    yield r
    r.stop()


@pytest.fixture
def api(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Api]:
    with TestClient(create_app(make_settings(db.url, tmp_path))) as client:
        yield Api(client, ADMIN_TOKEN)


def submit(db: Database, world: dict[str, int], name: str, gpus: int) -> None:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        spec = JobSpec.model_validate(job_spec(name, gpus=gpus, duration=100_000))
        submit_job(s, tenant, world["alice"], spec, T0)


def usage_of(status: dict[str, Any]) -> dict[tuple[str, str], tuple[str, str]]:
    return {
        (f["name"], r["name"]): (r["total"], r["borrowed"])
        for f in status["flavorsUsage"]
        for r in f["resources"]
    }


def test_status_is_what_the_engine_charged(
    db: Database, world: dict[str, int], reconciler: Reconciler, api: Api
) -> None:
    empty = api.get("/v1/cluster-queues/cq").json()["status"]
    assert empty == {
        "flavorsUsage": [
            {
                "name": "gpu",
                "resources": [
                    {"name": "cpu", "total": "0", "borrowed": "0"},
                    {"name": "memory", "total": "0", "borrowed": "0"},
                    {"name": "nvidia.com/gpu", "total": "0", "borrowed": "0"},
                ],
            }
        ],
        "pendingWorkloads": 0,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
    }
    for name, gpus in (("a", 2), ("b", 2), ("c", 4), ("d", 2)):  # d does not fit: 8 GPUs
        submit(db, world, name, gpus)
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)

    status = api.get("/v1/cluster-queues/cq").json()["status"]
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (1, 3)
    assert status["reservingWorkloads"] == 3
    assert reconciler.engine is not None
    charged = reconciler.engine.tree.cqs["cq"].usage
    assert usage_of(status) == {
        fr: (format_amount(fr[1], amount), "0") for fr, amount in charged.items()
    }
    assert usage_of(status)[("gpu", "nvidia.com/gpu")] == ("8", "0")
    assert usage_of(status)[("gpu", "cpu")] == ("6", "0")  # three pods of 2 CPUs
    assert usage_of(status)[("gpu", "memory")] == ("24Gi", "0")
    listed = api.get("/v1/cluster-queues").json()["items"]
    assert [q["status"] for q in listed if q["name"] == "cq"] == [status]

    # quota lowered under what is held: the part above the nominal quota reads as borrowed
    spec = api.get("/v1/cluster-queues/cq").json()["spec"]
    for r in spec["resourceGroups"][0]["flavors"][0]["resources"]:
        if r["name"] == "nvidia.com/gpu":
            r["nominalQuota"] = 5
    r = api.put("/v1/cluster-queues/cq", json={"spec": spec})
    assert r.status_code == 200, r.text
    assert usage_of(r.json()["status"])[("gpu", "nvidia.com/gpu")] == ("8", "3")


def admin_of(api: Api, tenant: str) -> Api:
    api.post("/v1/tenants", json={"name": tenant, "capacity": {"h100": {"nvidia.com/gpu": 8}}})
    api.put(f"/v1/tenants/{tenant}/members/{tenant}-admin", json={"role": "tenant-admin"})
    made = api.post(f"/v1/tenants/{tenant}/members/{tenant}-admin/tokens", json={"name": "t"})
    return api.as_(made.json()["token"])


def test_a_tenant_reads_its_own_queue_by_the_name_it_gave(
    db: Database, world: dict[str, int], api: Api
) -> None:
    api.post("/v1/flavors", json={"name": "h100", "spec": {}})
    quota = {"name": "nvidia.com/gpu", "nominalQuota": 4}
    flavor = {"name": "h100", "resources": [quota]}
    group = {"coveredResources": ["nvidia.com/gpu"], "flavors": [flavor]}
    spec = {"resourceGroups": [group]}
    gamma, beta = admin_of(api, "gamma"), admin_of(api, "beta")
    r = gamma.post("/v1/tenants/gamma/cluster-queues", json={"name": "q", "spec": spec})
    assert r.status_code == 201, r.text
    r = beta.post("/v1/tenants/beta/cluster-queues", json={"name": "q", "spec": spec})
    assert r.status_code == 201, r.text  # stored as beta.q: gamma holds the name
    assert r.json()["name"] == "q" and r.json()["status"]["admittedWorkloads"] == 0
    beta.post("/v1/tenants/beta/local-queues", json={"name": "main", "clusterQueue": "q"})
    one_gpu = {"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}
    with db.session() as s:
        tenant = s.query(Tenant).filter_by(name="beta").one()
        for name in ("p1", "p2"):
            body = {**job_spec(name), "queue": "main", "podSets": [one_gpu]}
            submit_job(s, tenant, world["alice"], JobSpec.model_validate(body), T0)
    one = beta.get("/v1/tenants/beta/cluster-queues/q").json()
    assert one["status"]["pendingWorkloads"] == 2
    assert beta.get("/v1/tenants/beta/cluster-queues").json()["items"][0]["status"] == one["status"]
    # gamma's queue of the same name counts only the jobs of its own LocalQueues
    assert gamma.get("/v1/tenants/gamma/cluster-queues/q").json()["status"]["pendingWorkloads"] == 0
    assert api.get("/v1/cluster-queues/beta.q").json()["status"] == one["status"]
