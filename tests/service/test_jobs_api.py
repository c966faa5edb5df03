"""The jobs API: submission (validation, idempotency), visibility, cancellation, workloads."""

from __future__ import annotations

import time
from typing import Any

import pytest
from job_world import TOKENS, build_world, job_spec

from conftest import Api
from gpuaas.service.governance import put_objects
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant

PROFILE = "gpuaas.io/v1"


@pytest.fixture
def world(api: Api) -> Api:
    build_world(api.client.app.state.db)  # type: ignore[attr-defined]
    return api


def _db(api: Api) -> Database:
    return api.client.app.state.db  # type: ignore[attr-defined]


def _fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return [e["field"] for e in response.json().get("errors", [])]


def test_submit_returns_the_pending_job_and_its_first_event(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    r = alice.post("/v1/tenants/acme/jobs", json=job_spec("train", gpus=2, priorityClass="high"))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "Pending"
    assert job["user"] == "alice" and job["tenant"] == "acme" and job["queue"] == "default"
    assert job["priority"] == 1000
    assert job["spec"]["requests"] == {"main": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"}}
    events = alice.get(f"/v1/tenants/acme/jobs/{job['id']}/events").json()["items"]
    assert [(e["fromState"], e["toState"], e["reason"], e["code"]) for e in events] == [
        (None, "Pending", "submitted", "Submitted")
    ]


def test_the_same_idempotency_key_never_makes_two_jobs(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    spec = job_spec("once", idempotencyKey="7f3c")
    first = alice.post("/v1/tenants/acme/jobs", json=spec)
    again = alice.post("/v1/tenants/acme/jobs", json=spec)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other_user = world.as_(TOKENS["bob"]).post("/v1/tenants/acme/jobs", json=spec)
    assert other_user.status_code == 201
    assert other_user.json()["id"] != first.json()["id"]
    assert len(world.get("/v1/tenants/acme/jobs").json()["items"]) == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"queue": "nope"}, "queue"),
        ({"priorityClass": "urgent"}, "priorityClass"),
        ({"name": "Not_A_Name"}, "name"),
        ({"kind": "cooking"}, "kind"),
        ({"surprise": 1}, "surprise"),
        ({"container": {"image": "x"}}, "body"),  # command and container: two ways to run
        ({"maxRunTime": -5}, "maxRunTime"),
        ({"podSets": [{"name": "main", "count": 0, "resources": {"cpu": "1"}}]},
         "podSets.0.count"),
        ({"podSets": [{"name": "main", "resources": {"cpu": "lots"}}]},
         "podSets[0].resources.cpu"),
        ({"podSets": [{"name": "main", "resources": {"nvidia.com/gpu": 1.5}}]},
         "podSets[0].resources.nvidia.com/gpu"),
        ({"podSets": [{"name": "main", "resources": {"nvidia.com/gpu": 1,
                                                       "nvidia.com/mig-1g.10gb": 1}}]},
         "podSets[0].resources"),
        ({"podSets": [{"name": "main"}]}, "podSets.0"),
        ({"podSets": [{"name": "main", "resources": {"cpu": "1"},
                       "topology": {"level": "galaxy"}}]}, "podSets.0.topology.level"),
    ],
)  # fmt: skip
def test_bad_specs_get_422_naming_the_field_and_store_nothing(
    world: Api, change: dict[str, Any], field: str
) -> None:
    spec = job_spec("bad")
    spec.update(change)
    r = world.as_(TOKENS["alice"]).post("/v1/tenants/acme/jobs", json=spec)
    assert field in _fields(r), r.json()
    assert world.get("/v1/tenants/acme/jobs").json()["items"] == []


def test_hardware_profiles_fill_in_requests_and_the_queue(world: Api) -> None:
    profiles = [
        {
            "apiVersion": PROFILE,
            "kind": "HardwareProfile",
            "metadata": {"name": name},
            "spec": {
                "displayName": name,
                "localQueue": "default",
                "allowedTenants": tenants,
                "resources": [
                    {"name": "nvidia.com/gpu", "min": 1, "default": 1, "max": 4},
                    {"name": "cpu", "min": "1", "default": "8"},
                ],
            },
        }
        for name, tenants in (("h100-1x", []), ("reserved", ["beta"]))
    ]
    beta_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "beta"},
        "spec": {"clusterQueue": "cq"},
    }
    with _db(world).session() as s:
        s.add(Tenant(name="beta", capacity={}, created_at=0.0))
        s.flush()
        changes = [(beta_queue, None, None)] + [(p, None, None) for p in profiles]
        put_objects(s, changes, time.time())
    alice = world.as_(TOKENS["alice"])
    spec = job_spec("with-profile", queue=None)
    del spec["queue"]
    spec["podSets"] = [{"name": "main", "count": 2, "hardwareProfile": "h100-1x",
                        "resources": {"nvidia.com/gpu": 2}}]  # fmt: skip
    r = alice.post("/v1/tenants/acme/jobs", json=spec)
    assert r.status_code == 201, r.text
    assert r.json()["queue"] == "default"
    assert r.json()["spec"]["requests"] == {"main": {"nvidia.com/gpu": "2", "cpu": "8"}}
    spec["podSets"][0]["resources"] = {"nvidia.com/gpu": 8}
    assert "podSets[0].resources" in _fields(alice.post("/v1/tenants/acme/jobs", json=spec))
    spec["podSets"][0] = {"name": "main", "hardwareProfile": "reserved"}
    assert "podSets[0].hardwareProfile" in _fields(alice.post("/v1/tenants/acme/jobs", json=spec))
    spec["podSets"][0] = {"name": "main", "hardwareProfile": "missing"}
    assert "podSets[0].hardwareProfile" in _fields(alice.post("/v1/tenants/acme/jobs", json=spec))


def test_tenant_users_see_and_cancel_only_their_own_jobs(world: Api) -> None:
    alice, bob = world.as_(TOKENS["alice"]), world.as_(TOKENS["bob"])
    mine = alice.post("/v1/tenants/acme/jobs", json=job_spec("mine")).json()
    theirs = bob.post("/v1/tenants/acme/jobs", json=job_spec("theirs")).json()
    assert [j["name"] for j in alice.get("/v1/tenants/acme/jobs").json()["items"]] == ["mine"]
    assert alice.get(f"/v1/tenants/acme/jobs/{theirs['id']}").status_code == 404
    assert alice.get(f"/v1/tenants/acme/jobs/{theirs['id']}/events").status_code == 404
    assert alice.post(f"/v1/tenants/acme/jobs/{theirs['id']}/cancel").status_code == 404
    assert alice.get("/v1/tenants/acme/jobs/999999").status_code == 404
    names = [j["name"] for j in world.get("/v1/tenants/acme/jobs").json()["items"]]
    assert names == ["mine", "theirs"]  # the provider admin sees everything
    assert world.get("/v1/tenants/acme/jobs?user=bob").json()["items"][0]["id"] == theirs["id"]
    assert world.get("/v1/tenants/acme/jobs?state=Running").json()["items"] == []
    assert "state" in _fields(world.get("/v1/tenants/acme/jobs?state=Sleeping"))
    # the platform list
    assert len(world.get("/v1/jobs?tenant=acme").json()["items"]) == 2
    assert world.get("/v1/jobs?tenant=nobody").json()["items"] == []
    assert alice.get("/v1/jobs").status_code == 403
    # cancel a pending job: at once, with its event; a second cancel is a conflict
    r = alice.post(f"/v1/tenants/acme/jobs/{mine['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "Cancelled"
    assert alice.post(f"/v1/tenants/acme/jobs/{mine['id']}/cancel").status_code == 409
    events = alice.get(f"/v1/tenants/acme/jobs/{mine['id']}/events").json()["items"]
    assert [e["toState"] for e in events] == ["Pending", "Cancelled"]


def test_pagination_of_jobs(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    for i in range(5):
        alice.post("/v1/tenants/acme/jobs", json=job_spec(f"j{i}"))
    page = alice.get("/v1/tenants/acme/jobs?limit=2").json()
    seen = [j["name"] for j in page["items"]]
    while page["next"]:
        page = alice.get(f"/v1/tenants/acme/jobs?limit=2&after={page['next']}").json()
        seen += [j["name"] for j in page["items"]]
    assert seen == [f"j{i}" for i in range(5)]
    assert "limit" in _fields(alice.get("/v1/tenants/acme/jobs?limit=0"))


def test_workloads_show_why_jobs_wait_and_where_they_run(world: Api, tmp_path: Any) -> None:
    alice = world.as_(TOKENS["alice"])
    spec = job_spec("big", gpus=4)
    spec["podSets"][0]["count"] = 2  # a gang of two 4-GPU pods: both nodes
    big = alice.post("/v1/tenants/acme/jobs", json=spec).json()
    waits = alice.post("/v1/tenants/acme/jobs", json=job_spec("waits", gpus=1)).json()
    settings = world.client.app.state.settings  # type: ignore[attr-defined]
    reconciler = Reconciler(_db(world), settings)
    try:
        assert reconciler.step(time.time())
    finally:
        reconciler.stop()
    items = {w["id"]: w for w in alice.get("/v1/tenants/acme/workloads").json()["items"]}
    assert items[big["id"]]["state"] == "Admitted"
    assert items[big["id"]]["clusterQueue"] == "cq"
    assert items[big["id"]]["flavors"] == {"main": {"cpu": "gpu", "memory": "gpu",
                                                    "nvidia.com/gpu": "gpu"}}  # fmt: skip
    assert items[big["id"]]["gpus"] == 8
    assert items[waits["id"]]["state"] == "Pending"
    why = items[waits["id"]]["reason"]
    assert "insufficient unused quota for nvidia.com/gpu" in why["message"]
    assert why["code"] == "UnusedQuotaShort"
    assert why["fields"] == {
        "flavor": "gpu", "resource": "nvidia.com/gpu", "needed": 1, "cohort": None, "lend": None
    }  # fmt: skip
    assert items[big["id"]]["reason"]["code"] == "Admitted"
    assert items[big["id"]]["reason"]["fields"]["cluster_queue"] == "cq"
    job = alice.get(f"/v1/tenants/acme/jobs/{big['id']}").json()
    assert sorted(job["nodes"]) == ["node-1", "node-2"]
    moved = alice.get(f"/v1/tenants/acme/jobs/{big['id']}/events").json()["items"]
    assert [e["code"] for e in moved] == ["Submitted", "Admitted"]
    # each pod with the devices it was given, named as the node publishes them
    assert [p["rank"] for p in job["pods"]] == [0, 1]
    assert sorted(p["node"] for p in job["pods"]) == ["node-1", "node-2"]
    for pod in job["pods"]:
        assert [d["name"] for d in pod["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        assert len({d["uuid"] for d in pod["devices"]}) == 4
