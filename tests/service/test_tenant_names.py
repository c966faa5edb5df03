# ruff: noqa: E501 (requests read best one to a line)
"""A tenant names its own ClusterQueues, Cohorts and HardwareProfiles without learning anything
about other tenants' names (service/governance_kinds.py): a name another tenant holds is no 409;
the object is stored as ``<tenant>.<name>`` and the tenant reads, lists and refers to it by the
name it gave, while the engine's ids and the Kueue export stay valid and distinct."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from job_world import node_entries

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance_kinds import in_tenant_terms
from gpuaas.service.reconciler import Reconciler
from gpuaas.supply.kueue import load_objects

GPU = "nvidia.com/gpu"


def cq_spec(gpus: int, cohort: str) -> dict[str, Any]:
    return {
        "cohortName": cohort,
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ],
    }


def profile_spec() -> dict[str, Any]:
    return {
        "displayName": "Small",
        "localQueue": "main",
        "resources": [{"name": GPU, "min": 1, "default": 1, "max": 1}],
    }


def admin_of(api: Api, tenant: str) -> Api:
    assert api.put(f"/v1/tenants/{tenant}/members/{tenant}-admin", json={"role": "tenant-admin"}).status_code in (200, 201)  # fmt: skip
    made = api.post(f"/v1/tenants/{tenant}/members/{tenant}-admin/tokens", json={"name": "t"})
    return api.as_(made.json()["token"])


def build_tenant(admin: Api, tenant: str, gpus: int) -> list[Any]:
    """Its cohort ``team``, ClusterQueue ``gpus`` in it, LocalQueue ``main`` and profile
    ``small``: the same names in every tenant. Returns the answers."""
    base = f"/v1/tenants/{tenant}"
    return [
        admin.post(f"{base}/cohorts", json={"name": "team", "spec": {}}),
        admin.post(f"{base}/cluster-queues", json={"name": "gpus", "spec": cq_spec(gpus, "team")}),
        admin.post(f"{base}/local-queues", json={"name": "main", "clusterQueue": "gpus"}),
        admin.post(f"{base}/hardware-profiles", json={"name": "small", "spec": profile_spec()}),
    ]


def world(api: Api) -> tuple[Api, Api]:
    assert api.post("/v1/flavors", json={"name": "h100", "spec": {}}).status_code == 201
    for tenant in ("acme", "globex"):
        body = {"name": tenant, "capacity": {"h100": {GPU: 8}}}
        assert api.post("/v1/tenants", json=body).status_code == 201
    return admin_of(api, "globex"), admin_of(api, "acme")


def test_a_name_another_tenant_holds_is_created_and_read_as_the_tenants_own(api: Api) -> None:
    globex, acme = world(api)
    for answer in build_tenant(globex, "globex", 8):
        assert answer.status_code == 201, answer.text
    for answer in build_tenant(acme, "acme", 2):  # the same names: no 409, nothing said of globex
        assert answer.status_code == 201, answer.text
        assert "globex" not in answer.text
    made = build_tenant(acme, "acme", 2)[1]
    assert made.status_code == 409 and "acme" in made.text and "globex" not in made.text

    queue = acme.get("/v1/tenants/acme/cluster-queues/gpus").json()
    assert queue["name"] == "gpus" and queue["spec"]["cohortName"] == "team"
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 2
    other = globex.get("/v1/tenants/globex/cluster-queues/gpus").json()
    assert other["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 8
    listed = acme.get("/v1/tenants/acme/cluster-queues").json()["items"]
    assert [q["name"] for q in listed] == ["gpus"]
    assert acme.get("/v1/tenants/acme/cohorts/team").json()["name"] == "team"
    assert acme.get("/v1/tenants/acme/local-queues/main").json()["clusterQueue"] == "gpus"
    assert acme.get("/v1/tenants/acme/hardware-profiles/small").json()["name"] == "small"
    assert "small" in [p["name"] for p in acme.get("/v1/tenants/acme/hardware-profiles").json()["items"]]  # fmt: skip

    # the provider sees both under their stored names, each with its owner
    owners = {(q["name"], q["tenant"]) for q in api.get("/v1/cluster-queues").json()["items"]}
    assert {("gpus", "globex"), ("acme.gpus", "acme")} <= owners
    assert api.get("/v1/cohorts/acme.team").json()["tenant"] == "acme"

    # the export is a valid Kueue configuration holding both, the LocalQueue pointing at its own
    exported = list(yaml.safe_load_all(api.get("/v1/kueue/export").text))
    load_objects(exported)
    lq = next(
        d for d in exported
        if d["kind"] == "LocalQueue" and d["metadata"] == {"name": "main", "namespace": "acme"}
    )  # fmt: skip
    assert lq["spec"]["clusterQueue"] == "acme.gpus"
    cq = next(d for d in exported if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "acme.gpus")  # fmt: skip
    assert cq["spec"]["cohortName"] == "acme.team"

    # a job asking for the profile gets the tenant's own
    acme_user = api.put("/v1/tenants/acme/members/ann", json={"role": "tenant-user"})
    assert acme_user.status_code in (200, 201)
    token = api.post("/v1/tenants/acme/members/ann/tokens", json={"name": "t"}).json()["token"]
    job = {"name": "j", "command": ["x"],
           "podSets": [{"name": "m", "count": 1, "hardwareProfile": "small"}]}  # fmt: skip
    r = api.as_(token).post("/v1/tenants/acme/jobs", json=job)
    assert r.status_code == 201, r.text
    assert r.json()["queue"] == "main"

    # deleting its own leaves the other tenant's
    assert acme.delete("/v1/tenants/acme/hardware-profiles/small").status_code == 204
    assert globex.get("/v1/tenants/globex/hardware-profiles/small").status_code == 200
    assert acme.get("/v1/tenants/acme/hardware-profiles/small").status_code == 404


def test_a_tenant_gives_its_objects_labels_and_the_provider_keeps_to_tenants_prefixes(
    api: Api,
) -> None:
    _, acme = world(api)
    r = acme.post("/v1/tenants/acme/cohorts", json={"name": "globex.team", "spec": {}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "name", r.text
    # the provider may not put another tenant's object where acme's own go
    body = {"name": "acme.gpus", "spec": cq_spec(1, "globex"), "tenant": "globex"}
    r = api.post("/v1/cluster-queues", json=body)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "name", r.text
    body["tenant"] = "acme"
    body["spec"] = cq_spec(1, "acme")
    assert api.post("/v1/cluster-queues", json=body).status_code == 201
    # now acme's own "gpus" (stored as acme.gpus, made by the provider) is a conflict of its own
    r = acme.post("/v1/tenants/acme/cluster-queues", json={"name": "gpus", "spec": cq_spec(1, "acme")})  # fmt: skip
    assert r.status_code == 409 and "globex" not in r.text


def test_a_job_reads_its_tenants_own_names(db_url: str, tmp_path: Path) -> None:
    """A job in a ClusterQueue stored as ``acme.gpus`` shows ``gpus`` to acme: its
    ``clusterQueue``, its reason (sentence and fields), its events and the workloads view; the
    provider's ``/v1/jobs`` lists the stored name, as its ClusterQueue list does."""
    app = create_app(make_settings(db_url, tmp_path))
    with TestClient(app) as client:
        api = Api(client, ADMIN_TOKEN)
        globex, acme = world(api)
        for answer in [*build_tenant(globex, "globex", 8), *build_tenant(acme, "acme", 2)]:
            assert answer.status_code == 201, answer.text
        assert api.get("/v1/cluster-queues/acme.gpus").json()["tenant"] == "acme"
        job = {"name": "j", "queue": "main", "command": ["x"], "duration": 600,
               "podSets": [{"name": "w", "count": 1, "resources": {GPU: 1}}]}  # fmt: skip
        made = acme.post("/v1/tenants/acme/jobs", json=job)
        assert made.status_code == 201, made.text
        now = time.time()
        with app.state.db.session() as session:
            register_nodes(session, node_entries(1), now)
        job_id = made.json()["id"]
        reconciler = Reconciler(app.state.db, make_settings(db_url, tmp_path))
        try:
            reconciler.step(now + 1)  # admitted: the reason names the ClusterQueue
            reason = acme.get(f"/v1/tenants/acme/jobs/{job_id}").json()["reason"]
            assert reason["message"].startswith("admitted by ClusterQueue gpus "), reason
            reconciler.step(now + 2)
        finally:
            reconciler.stop()
        stored = api.get("/v1/jobs", params={"tenant": "acme"}).json()["items"][0]
        assert "acme.gpus" in json.dumps(stored), stored  # the provider's: as stored
        seen = [
            acme.get(f"/v1/tenants/acme/jobs/{job_id}").json(),
            acme.get("/v1/tenants/acme/jobs").json(),
            acme.get(f"/v1/tenants/acme/jobs/{job_id}/events").json(),
            acme.get("/v1/tenants/acme/workloads").json(),
        ]
        for answer in seen:
            assert "acme." not in json.dumps(answer), answer
        view, _, events, _ = seen
        assert view["clusterQueue"] == "gpus", view
        said = [e["reason"] for e in events["items"]]
        assert any(r.startswith("admitted by ClusterQueue gpus ") for r in said), said


def test_only_the_tenants_own_qualified_names_are_rewritten() -> None:
    """A tenant named like a resource's domain keeps its resources' names whole."""
    said = in_tenant_terms(
        "nvidia",
        {
            "message": "needs 8 nvidia.com/gpu in ClusterQueue nvidia.gpus",
            "fields": {"clusterQueue": "nvidia.gpus", "resource": "nvidia.com/gpu"},
            "causes": ["cohort nvidia.pool is full", "other.gpus", "xnvidia.gpus"],
        },
    )
    assert said == {
        "message": "needs 8 nvidia.com/gpu in ClusterQueue gpus",
        "fields": {"clusterQueue": "gpus", "resource": "nvidia.com/gpu"},
        "causes": ["cohort pool is full", "other.gpus", "xnvidia.gpus"],
    }
