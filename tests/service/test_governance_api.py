"""Flavors, cohorts, queues, priority classes and hardware profiles through the REST API."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conftest import Api
from gpuaas.model.errors import InvalidValue
from gpuaas.service.governance import (
    document,
    load_governance,
    priority_value,
    put_object,
    usable_profile,
)
from gpuaas.store.tables import Job, Meta, Tenant, User

GPU = "nvidia.com/gpu"


def quota_spec(flavor: str, gpus: int, cohort: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    return spec


def member_token(api: Api, tenant: str, user: str, role: str) -> Api:
    api.put(f"/v1/tenants/{tenant}/members/{user}", json={"role": role})
    made = api.post(f"/v1/tenants/{tenant}/members/{user}/tokens", json={"name": "t"})
    return api.as_(made.json()["token"])


def errors_of(response: Any) -> list[str]:
    assert response.headers["content-type"].startswith("application/problem+json")
    return [e["field"] for e in response.json().get("errors", [])]


def version(api: Api) -> int:
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        row = session.get(Meta, "governance.version")
        return int(row.value) if row else 0


def test_flavors_and_cohorts(api: Api) -> None:
    before = version(api)
    h100 = {"name": "h100", "spec": {"nodeLabels": {"gpuaas.io/pool": "training"}}}
    assert api.post("/v1/flavors", json=h100).status_code == 201
    assert api.post("/v1/flavors", json={"name": "a100", "spec": {}}).status_code == 201
    assert api.post("/v1/cohorts", json={"name": "org", "spec": {}}).status_code == 201
    assert version(api) == before + 3
    assert api.post("/v1/flavors", json=h100).status_code == 409
    r = api.post("/v1/flavors", json={"name": "x", "spec": {"nodeLabel": {}}})
    assert r.status_code == 422 and "spec.nodeLabel" in r.json()["detail"]
    assert errors_of(api.post("/v1/flavors", json={"name": "X_1", "spec": {}})) == ["name"]
    bad_label = {"name": "x", "spec": {"nodeLabels": {"pool": "a\u0000b"}}}
    assert errors_of(api.post("/v1/flavors", json=bad_label)) == ["spec.nodeLabels.pool"]
    r = api.put("/v1/flavors/h100", json={"name": "other", "spec": {}})
    assert r.status_code == 422 and errors_of(r) == ["name"]
    assert api.put("/v1/flavors/nope", json={"spec": {}}).status_code == 404

    page = api.get("/v1/flavors", params={"limit": 1}).json()
    assert [f["name"] for f in page["items"]] == ["a100"] and page["next"] == "a100"
    page = api.get("/v1/flavors", params={"after": page["next"]}).json()
    assert page["items"][0]["spec"] == {"nodeLabels": {"gpuaas.io/pool": "training"}}
    updated = api.put("/v1/flavors/h100", json={"spec": {}}).json()
    assert updated["spec"] == {}

    # Any authenticated user reads; only the provider writes.
    api.post("/v1/tenants", json={"name": "acme"})
    user = member_token(api, "acme", "alice", "tenant-user")
    assert [c["name"] for c in user.get("/v1/cohorts").json()["items"]] == ["org"]
    assert user.get("/v1/flavors/h100").status_code == 200
    assert user.post("/v1/flavors", json={"name": "z", "spec": {}}).status_code == 403
    assert user.delete("/v1/flavors/h100").status_code == 403

    # A flavor in use cannot go.
    api.post("/v1/cluster-queues", json={"name": "main", "spec": quota_spec("h100", 8, "org")})
    r = api.delete("/v1/flavors/h100")
    assert r.status_code == 409 and "ClusterQueue main" in r.json()["detail"]
    assert api.delete("/v1/flavors/a100").status_code == 204
    assert api.delete("/v1/cohorts/org").status_code == 204  # the cohort stays implicit


def test_cluster_queues_and_capacity(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "h100", "spec": {}})
    api.post("/v1/tenants", json={"name": "acme", "capacity": {"h100": {GPU: 16}}})
    api.post("/v1/tenants", json={"name": "beta"})
    admin = member_token(api, "acme", "ann", "tenant-admin")
    beta_admin = member_token(api, "beta", "bo", "tenant-admin")

    assert admin.post(
        "/v1/tenants/acme/cluster-queues", json={"name": "acme-a", "spec": quota_spec("h100", 10)}
    ).status_code == 201  # fmt: skip
    r = admin.post(
        "/v1/tenants/acme/cluster-queues", json={"name": "acme-b", "spec": quota_spec("h100", 8)}
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == f"spec.resourceGroups: flavor h100 resource {GPU}"
    assert "nominal quota of 18 GPUs, above its capacity of 16 GPUs" in r.json()["detail"]
    r = admin.put("/v1/tenants/acme/cluster-queues/acme-a", json={"spec": quota_spec("h100", 16)})
    assert r.status_code == 200, r.text
    r = admin.post(
        "/v1/tenants/acme/cluster-queues", json={"name": "acme-c", "spec": quota_spec("gone", 1)}
    )
    assert r.status_code == 422 and "unknown ResourceFlavor 'gone'" in r.json()["detail"]

    # The provider's view and filters; tenants see their own only.
    api.post("/v1/cluster-queues", json={"name": "shared", "spec": quota_spec("h100", 64)})
    names = [q["name"] for q in api.get("/v1/cluster-queues").json()["items"]]
    assert names == ["acme-a", "shared"]
    owned = api.get("/v1/cluster-queues", params={"tenant": "acme"}).json()["items"]
    assert [(q["name"], q["tenant"]) for q in owned] == [("acme-a", "acme")]
    assert admin.get("/v1/cluster-queues").status_code == 403
    assert [q["name"] for q in admin.get("/v1/tenants/acme/cluster-queues").json()["items"]] == [
        "acme-a"
    ]
    assert beta_admin.get("/v1/tenants/beta/cluster-queues/acme-a").status_code == 404
    assert beta_admin.get("/v1/tenants/acme/cluster-queues").status_code == 404
    assert beta_admin.delete("/v1/tenants/beta/cluster-queues/shared").status_code == 404
    r = beta_admin.post("/v1/tenants/beta/cluster-queues", json={"name": "shared", "spec": {}})
    assert r.status_code == 409  # names are cluster-wide
    # The provider assigns a queue to a tenant; the grant still bounds it (beta has no h100).
    r = api.put(
        "/v1/cluster-queues/shared", json={"spec": quota_spec("h100", 64), "tenant": "beta"}
    )
    assert r.status_code == 422 and "h100 is not granted to tenant beta" in r.json()["detail"]
    assert errors_of(r) == ["spec.resourceGroups[0].flavors[0].name"]
    r = api.put("/v1/cluster-queues/shared", json={"spec": quota_spec("h100", 1), "tenant": "zzz"})
    assert r.status_code == 404 and errors_of(r) == ["tenant"]  # valid, names no tenant
    assert admin.delete("/v1/tenants/acme/cluster-queues/acme-a").status_code == 204


def test_local_queues(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "h100", "spec": {}})
    for tenant in ("acme", "beta"):
        api.post("/v1/tenants", json={"name": tenant, "capacity": {"h100": {GPU: 8}}})
    api.post("/v1/cluster-queues", json={"name": "shared", "spec": quota_spec("h100", 64)})
    admin = member_token(api, "acme", "ann", "tenant-admin")
    viewer = member_token(api, "acme", "vic", "viewer")
    beta = member_token(api, "beta", "bo", "tenant-admin")
    beta.post(
        "/v1/tenants/beta/cluster-queues", json={"name": "beta-q", "spec": quota_spec("h100", 8)}
    )

    r = admin.post(
        "/v1/tenants/acme/local-queues",
        json={"name": "default", "clusterQueue": "shared", "userLimit": 2},
    )
    assert r.status_code == 201, r.text
    assert r.json() == {**r.json(), "tenant": "acme", "clusterQueue": "shared", "userLimit": 2}
    r = admin.post("/v1/tenants/acme/local-queues", json={"name": "x", "clusterQueue": "beta-q"})
    assert r.status_code == 404 and errors_of(r) == ["clusterQueue"]
    assert "tenant beta" not in r.text  # another tenant's queue reads like a missing one
    r = admin.post("/v1/tenants/acme/local-queues", json={"name": "x", "clusterQueue": "nope"})
    assert r.status_code == 404 and errors_of(r) == ["clusterQueue"]
    assert "(available: shared)" in r.json()["detail"]
    r = admin.post(
        "/v1/tenants/acme/local-queues",
        json={"name": "x", "clusterQueue": "shared", "userLimit": 0},
    )
    assert r.status_code == 422 and errors_of(r) == ["userLimit"]
    r = admin.post("/v1/tenants/acme/local-queues", json={"name": "a.b", "clusterQueue": "shared"})
    assert r.status_code == 422 and errors_of(r) == ["name"]  # a namespaced name is a DNS label
    assert viewer.post(
        "/v1/tenants/acme/local-queues", json={"name": "v", "clusterQueue": "shared"}
    ).status_code == 403  # fmt: skip
    assert beta.get("/v1/tenants/acme/local-queues/default").status_code == 404

    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        _, config = load_governance(session)
        assert config.user_limits == {"acme/default": 2}
        tenant = session.query(Tenant).filter_by(name="acme").one()
        user = session.query(User).filter_by(name="ann").one()
        for state in ("Pending", "Running", "Running", "Succeeded"):
            session.add(
                Job(
                    tenant_id=tenant.id, user_id=user.id, name="j", kind="batch",
                    local_queue="default", spec={}, state=state, created_at=0.0, updated_at=0.0,
                )
            )  # fmt: skip
    one = viewer.get("/v1/tenants/acme/local-queues/default").json()
    assert (one["pending"], one["admitted"], one["running"]) == (1, 0, 2)
    assert [q["name"] for q in viewer.get("/v1/tenants/acme/local-queues").json()["items"]] == [
        "default"
    ]

    r = api.delete("/v1/cluster-queues/shared")
    assert r.status_code == 409 and "LocalQueue acme/default" in r.json()["detail"]
    r = admin.delete("/v1/tenants/acme/local-queues/default")
    assert r.status_code == 409 and "unfinished jobs" in r.json()["detail"]
    r = admin.put("/v1/tenants/acme/local-queues/default", json={"clusterQueue": "shared"})
    assert r.status_code == 200 and r.json()["userLimit"] is None
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        session.query(Job).update({"state": "Succeeded"})
    assert admin.delete("/v1/tenants/acme/local-queues/default").status_code == 204
    assert api.delete("/v1/cluster-queues/shared").status_code == 204


def test_priority_classes(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    admin = member_token(api, "acme", "ann", "tenant-admin")
    user = member_token(api, "acme", "alice", "tenant-user")
    assert api.post("/v1/priority-classes", json={"name": "high", "value": 1000}).status_code == 201
    assert api.post("/v1/priority-classes", json={"name": "low", "value": 10}).status_code == 201
    assert user.get("/v1/priority-classes").status_code == 200
    assert admin.post("/v1/priority-classes", json={"name": "x", "value": 1}).status_code == 403
    r = api.post("/v1/priority-classes", json={"name": "big", "value": 2**40})
    assert r.status_code == 422 and errors_of(r) == ["value"]

    r = admin.post("/v1/tenants/acme/priority-classes", json={"name": "high", "value": 5})
    assert r.status_code == 201 and r.json()["tenant"] == "acme"
    assert (
        user.post("/v1/tenants/acme/priority-classes", json={"name": "y", "value": 1}).status_code
        == 403
    )
    listed = user.get("/v1/tenants/acme/priority-classes").json()["items"]
    assert [(c["name"], c["value"], c["tenant"]) for c in listed] == [
        ("high", 5, "acme"),
        ("low", 10, None),
    ]
    assert user.get("/v1/tenants/acme/priority-classes/low").json()["value"] == 10
    assert api.get("/v1/priority-classes/high").json()["value"] == 1000  # the global one stays
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        tenant = session.query(Tenant).filter_by(name="acme").one()
        assert priority_value(session, tenant.id, "high") == 5
        assert priority_value(session, tenant.id, "low") == 10
        try:
            priority_value(session, tenant.id, "urgent")
        except InvalidValue as exc:
            assert exc.field == "priorityClass"
        else:
            raise AssertionError("an unknown priority class must be refused")
    assert admin.delete("/v1/tenants/acme/priority-classes/high").status_code == 204
    assert admin.delete("/v1/tenants/acme/priority-classes/low").status_code == 404


def test_hardware_profiles(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "h100", "spec": {}})
    for tenant in ("acme", "beta"):
        api.post("/v1/tenants", json={"name": tenant})
    api.post("/v1/cluster-queues", json={"name": "shared", "spec": quota_spec("h100", 64)})
    admin = member_token(api, "acme", "ann", "tenant-admin")
    beta = member_token(api, "beta", "bo", "tenant-admin")
    admin.post("/v1/tenants/acme/local-queues", json={"name": "gpu", "clusterQueue": "shared"})
    spec = {
        "displayName": "One H100",
        "localQueue": "gpu",
        "resources": [{"name": GPU, "min": 1, "default": 1, "max": 8}],
    }
    assert (
        api.post("/v1/hardware-profiles", json={"name": "h100-1x", "spec": spec}).status_code == 201
    )
    bad = {**spec, "resources": [{"name": GPU, "min": 2, "default": 1}]}
    r = api.post("/v1/hardware-profiles", json={"name": "bad", "spec": bad})
    assert r.status_code == 422 and r.json()["errors"][0]["field"].endswith(
        "spec.resources[0].default"
    )
    assert admin.get("/v1/hardware-profiles").status_code == 403

    astray = {"name": "astray", "spec": {**spec, "localQueue": "nope"}}
    r = admin.post("/v1/tenants/acme/hardware-profiles", json=astray)
    assert errors_of(r) == ["spec.localQueue"] and "(its queues: gpu)" in r.text
    own = admin.post("/v1/tenants/acme/hardware-profiles", json={"name": "acme-big", "spec": spec})
    assert own.status_code == 201 and own.json()["spec"]["allowedTenants"] == ["acme"]
    listed = admin.get("/v1/tenants/acme/hardware-profiles").json()["items"]
    assert [p["name"] for p in listed] == ["acme-big", "h100-1x"]
    assert beta.get("/v1/tenants/beta/hardware-profiles").json()["items"] == []  # no LocalQueue
    assert beta.get("/v1/tenants/beta/hardware-profiles/acme-big").status_code == 404
    beta.post("/v1/tenants/beta/local-queues", json={"name": "gpu", "clusterQueue": "shared"})
    both = {"name": "pair", "spec": {**spec, "allowedTenants": ["acme", "beta"]}}
    assert api.post("/v1/hardware-profiles", json=both).status_code == 201
    seen = admin.get("/v1/tenants/acme/hardware-profiles/pair")
    assert seen.json()["spec"]["allowedTenants"] == ["acme"] and "beta" not in seen.text
    assert api.get("/v1/hardware-profiles/pair").json()["spec"]["allowedTenants"] == [
        "acme",
        "beta",
    ]
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        acme = session.query(Tenant).filter_by(name="acme").one()
        beta_row = session.query(Tenant).filter_by(name="beta").one()
        assert usable_profile(session, acme, "h100-1x").local_queue == "gpu"
        try:
            usable_profile(session, beta_row, "acme-big")
        except InvalidValue as exc:
            assert exc.field == "hardwareProfile"
            assert exc.problem.endswith("available to tenant beta (available: h100-1x, pair)")
        else:
            raise AssertionError("beta may not use acme's profile")

    r = admin.delete("/v1/tenants/acme/local-queues/gpu")
    assert r.status_code == 409 and "HardwareProfile" in r.json()["detail"]
    assert beta.delete("/v1/tenants/beta/hardware-profiles/acme-big").status_code == 404
    assert admin.delete("/v1/tenants/acme/hardware-profiles/acme-big").status_code == 204


def test_concurrent_writes_take_turns(api: Api) -> None:
    """Writers validate against each other's committed state and lose no version bump."""
    db = api.client.app.state.db  # type: ignore[attr-defined]
    before = version(api)

    def create(worker: int) -> None:
        for n in range(5):
            with db.session() as session:
                doc = document("ResourceFlavor", f"f-{worker}-{n}", {"spec": {}})
                put_object(session, doc, None, 0.0)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(4)))
    assert version(api) == before + 20
    assert len(api.get("/v1/flavors").json()["items"]) == 20
