# ruff: noqa: E501 (tables of requests read best one to a line)
"""The tenancy boundary (gpuaas.service.tenancy): no tenant admits anything outside what the
provider granted plus what it explicitly lets the tenant borrow, through any write route.

The world: flavors ``h100`` (every node), ``h200``, ``a100-mig`` and ``cpu`` (no node); the
provider's cohort ``cloud``; tenant ``acme`` granted 8 H200 GPUs and 1 H100 GPU, placed under
``cloud`` with a borrowing limit of 1 H100 GPU (so at most 2 H100 GPUs, ever); tenant ``globex``
granted 8 H100 GPUs and 16 CPUs under ``cloud`` (it lends its idle grant) with its own cohort
``globex-team``. ``test_no_write_route_lets_a_tenant_out`` enumerates every write route of the
OpenAPI document, as the RBAC matrix does: a route must either carry escape attempts here or
say why it carries no governance, so a new write route without an entry fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.auth import hash_token, new_token
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.tables import GovernanceObject, Job, Tenant, Token, User

GPU = "nvidia.com/gpu"
KUEUE = "kueue.x-k8s.io/v1beta2"
KAI = "scheduling.run.ai/v2"
VOLCANO = "scheduling.volcano.sh/v1beta1"
ROLES = ("anonymous", "provider-admin", "platform-viewer", "tenant-admin", "tenant-user", "viewer")


def quota(flavor: str, amount: int | str, resource: str = GPU, **limits: Any) -> dict[str, Any]:
    entry = {"name": resource, "nominalQuota": amount, **limits}
    return {"coveredResources": [resource], "flavors": [{"name": flavor, "resources": [entry]}]}


def cq_spec(flavor: str, amount: int | str, cohort: str | None = None, **extra: Any) -> dict:
    spec: dict[str, Any] = {"resourceGroups": [quota(flavor, amount)], **extra}
    if cohort is not None:
        spec["cohortName"] = cohort
    return spec


def errors_of(r: httpx.Response) -> list[str]:
    return [e["field"] for e in r.json().get("errors", [])]


@dataclass
class World:
    api: Api
    tokens: dict[str, str | None]

    def as_(self, role: str) -> Api:
        return self.api.as_(self.tokens[role])

    def governance(self) -> list[tuple[Any, ...]]:
        """Every governance object and tenant row (a refused write must leave them as they were)."""
        db = self.api.client.app.state.db
        with db.sessions() as s:
            objects = [
                (r.kind, r.namespace, r.name, r.tenant_id, r.document, r.options)
                for r in s.scalars(select(GovernanceObject).order_by(GovernanceObject.id))
            ]
            tenants = [
                (t.name, t.capacity, t.parent_cohort, t.borrowing, t.lending, t.max_job)
                for t in s.scalars(select(Tenant).order_by(Tenant.id))
            ]
        return [*objects, *tenants]


def _mint(api: Api, user: str) -> str:
    secret = new_token()
    db = api.client.app.state.db
    with db.session() as s:
        user_id = s.scalar(select(User.id).where(User.name == user))
        s.add(
            Token(
                user_id=user_id,
                name="t",
                prefix=secret[:8],
                token_hash=hash_token(secret),
                created_at=time.time(),
            )
        )
    return secret


def build(api: Api) -> World:
    def ok(r: httpx.Response) -> Any:
        assert r.status_code in (200, 201), r.text
        return r.json()

    ok(api.post("/v1/flavors", json={"name": "h100", "spec": {}}))
    for name in ("h200", "a100-mig", "cpu"):
        ok(api.post("/v1/flavors", json={"name": name, "spec": {"nodeLabels": {"pool": name}}}))
    ok(api.post("/v1/cohorts", json={"name": "cloud", "spec": {}}))
    ok(api.post("/v1/priority-classes", json={"name": "top", "value": 1000}))
    for i in (1, 2):
        node = {"name": f"n{i}", "cpu": "64", "memory": "512Gi",
                "gpus": {"model": "H100-80GB", "count": 8}}  # fmt: skip
        ok(api.post("/v1/nodes", json=node))
    ok(
        api.post(
            "/v1/tenants",
            json={
                "name": "acme",
                "capacity": {"h200": {GPU: 8}, "h100": {GPU: 1}},
                "parentCohort": "cloud",
                "borrowing": {"h100": {GPU: 1}},
            },
        )
    )
    ok(
        api.post(
            "/v1/tenants",
            json={
                "name": "globex",
                "capacity": {"h100": {GPU: 8}, "cpu": {"cpu": 16}},
                "parentCohort": "cloud",
            },
        )
    )
    ok(api.post("/v1/tenants/globex/cohorts", json={"name": "globex-team", "spec": {}}))
    cpu = {"resourceGroups": [quota("cpu", 16, "cpu")], "cohortName": "globex-team"}
    ok(api.post("/v1/tenants/globex/cluster-queues", json={"name": "globex-cpu", "spec": cpu}))
    gspec = cq_spec("h100", 8, preemption={"reclaimWithinCohort": "Any"})  # the provider's field
    ok(
        api.post(
            "/v1/cluster-queues", json={"name": "globex-h100", "spec": gspec, "tenant": "globex"}
        )
    )
    ok(api.post("/v1/tenants/globex/local-queues", json={"name": "main", "clusterQueue": "globex-h100"}))  # fmt: skip
    ok(api.post("/v1/tenants/acme/cohorts", json={"name": "acme-team", "spec": {}}))
    aspec = cq_spec("h100", 1, "acme-team", resourceGroups=[quota("h100", 1, borrowingLimit=1)])
    ok(api.post("/v1/tenants/acme/cluster-queues", json={"name": "acme-h100", "spec": aspec}))
    ok(api.post("/v1/tenants/acme/cluster-queues", json={"name": "acme-h200", "spec": cq_spec("h200", 8)}))  # fmt: skip
    ok(api.post("/v1/tenants/acme/local-queues", json={"name": "main", "clusterQueue": "acme-h100"}))  # fmt: skip
    tokens: dict[str, str | None] = {"anonymous": None, "provider-admin": ADMIN_TOKEN}
    ok(api.post("/v1/users", json={"name": "pviewer", "platformRole": "viewer"}))
    tokens["platform-viewer"] = _mint(api, "pviewer")
    for role in ("tenant-admin", "tenant-user", "viewer"):
        ok(api.put(f"/v1/tenants/acme/members/acme-{role}", json={"role": role}))
        minted = ok(api.post(f"/v1/tenants/acme/members/acme-{role}/tokens", json={"name": "t"}))
        tokens[role] = minted["token"]
    return World(api, tokens)


@pytest.fixture
def world(api: Api) -> World:
    return build(api)


# --- the exploits, one by one -------------------------------------------------------


def test_the_root_cohort_holds_the_grant_under_the_providers_cohort(world: World) -> None:
    root = world.api.get("/v1/tenants/acme/cohorts/acme").json()["spec"]
    assert root["parentName"] == "cloud"
    (group,) = root["resourceGroups"]
    by_flavor = {f["name"]: f["resources"][0] for f in group["flavors"]}
    # the queues hold the whole grant, so the root keeps 0; the provider's limits are on it
    assert by_flavor["h100"] == {"name": GPU, "nominalQuota": "0", "borrowingLimit": "1"}
    assert by_flavor["h200"] == {"name": GPU, "nominalQuota": "0", "borrowingLimit": "0"}
    tenant = world.api.get("/v1/tenants/acme").json()
    assert tenant["cohort"] == "acme" and tenant["borrowing"] == {"h100": {GPU: "1"}}


def test_a_queue_in_the_providers_cohort_on_an_ungranted_flavor_is_refused(world: World) -> None:
    """The issue: cohortName demo-cloud, flavor h100 never granted, nominalQuota 0."""
    admin = world.as_("tenant-admin")
    before = world.governance()
    r = admin.post(
        "/v1/tenants/acme/cluster-queues",
        json={"name": "sneak", "spec": cq_spec("a100-mig", 0, "cloud")},
    )
    assert r.status_code == 422 and errors_of(r) == ["spec.cohortName"], r.text
    r = admin.post("/v1/tenants/acme/cluster-queues", json={"name": "sneak", "spec": cq_spec("a100-mig", 0)})  # fmt: skip
    assert r.status_code == 422, r.text
    assert errors_of(r) == ["spec.resourceGroups[0].flavors[0].name"]
    assert "a100-mig is not granted to tenant acme" in r.text and "even 0" in r.text
    assert world.governance() == before


def test_a_put_may_not_change_the_providers_fields(world: World) -> None:
    """The issue: PUT drops the borrowingLimit, sets fairSharing.weight 1000 and
    borrowWithinCohort. The weight and cohort-level preemption are the provider's; the queue's
    own borrowingLimit only bounds it inside the tenant's tree."""
    admin = world.as_("tenant-admin")
    url = "/v1/tenants/acme/cluster-queues/acme-h100"
    base = admin.get(url).json()["spec"]
    for extra, field in (
        ({"fairSharing": {"weight": "1000"}}, "spec.fairSharing.weight"),
        ({"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}},
         "spec.preemption.borrowWithinCohort"),
        ({"preemption": {"reclaimWithinCohort": "Any"}}, "spec.preemption.reclaimWithinCohort"),
    ):  # fmt: skip
        before = world.governance()
        r = admin.put(url, json={"spec": {**base, **extra}})
        assert r.status_code == 422 and errors_of(r) == [field], r.text
        assert world.governance() == before
    # the provider may set them, and the tenant may then keep them as they are
    provider_spec = {**base, "fairSharing": {"weight": "2"}}
    r = world.api.put(
        "/v1/cluster-queues/acme-h100", json={"spec": provider_spec, "tenant": "acme"}
    )
    assert r.status_code == 200, r.text
    assert admin.put(url, json={"spec": provider_spec}).status_code == 200
    dropped = {**provider_spec, "resourceGroups": [quota("h100", 1)]}
    assert admin.put(url, json={"spec": dropped}).status_code == 200


def test_another_tenants_cohort_is_out_of_reach(world: World) -> None:
    """The issue: acme's admin joined globex's cohort globex-team with a quota-0 CPU queue."""
    admin = world.as_("tenant-admin")
    before = world.governance()
    for cohort in ("globex-team", "globex"):
        r = admin.post(
            "/v1/tenants/acme/cluster-queues",
            json={"name": "sneak", "spec": cq_spec("h100", 0, cohort)},
        )
        assert r.status_code == 422 and errors_of(r) == ["spec.cohortName"], r.text
        r = admin.post(
            "/v1/tenants/acme/cohorts", json={"name": "sneak", "spec": {"parentName": cohort}}
        )
        assert r.status_code == 422 and errors_of(r) == ["spec.parentName"], r.text
    r = admin.put(
        "/v1/tenants/acme/cluster-queues/acme-h100",
        json={"spec": cq_spec("h100", 1, "globex-team")},
    )
    assert r.status_code == 422 and errors_of(r) == ["spec.cohortName"], r.text
    # a tenant cohort whose name another tree uses (implicitly) is refused too
    r = world.api.post(
        "/v1/cluster-queues", json={"name": "p", "spec": cq_spec("h100", 0, "ghost")}
    )
    assert r.status_code == 201, r.text
    before = world.governance()
    r = admin.post("/v1/tenants/acme/cohorts", json={"name": "ghost", "spec": {}})
    assert r.status_code == 422 and errors_of(r) == ["metadata.name"], r.text
    assert world.governance() == before


def test_the_root_cohort_is_the_providers(world: World) -> None:
    admin = world.as_("tenant-admin")
    r = admin.put("/v1/tenants/acme/cohorts/acme", json={"spec": {}})
    assert r.status_code == 403, r.text
    assert admin.delete("/v1/tenants/acme/cohorts/acme").status_code == 403
    assert world.api.delete("/v1/cohorts/acme").status_code == 409
    assert world.api.delete("/v1/cohorts/cloud").status_code == 409  # roots hang from it
    r = world.api.put("/v1/cohorts/acme", json={"spec": {}})
    assert r.status_code == 422 and "PATCH /v1/tenants/acme" in r.text, r.text
    # a cohort of the tenant still in use is not deleted (its name could change trees)
    r = admin.delete("/v1/tenants/acme/cohorts/acme-team")
    assert r.status_code == 409 and "ClusterQueue acme-h100" in r.text


def test_the_grant_moves_the_root_and_bounds_the_queues(world: World) -> None:
    r = world.api.patch("/v1/tenants/acme", json={"capacity": {"h200": {GPU: 8}, "h100": {GPU: 3}}})
    assert r.status_code == 200, r.text
    root = world.api.get("/v1/tenants/acme/cohorts/acme").json()["spec"]
    h100 = next(f for f in root["resourceGroups"][0]["flavors"] if f["name"] == "h100")
    assert h100["resources"][0]["nominalQuota"] == "2"  # 3 granted, 1 held by acme-h100
    r = world.api.patch("/v1/tenants/acme", json={"capacity": {"h100": {GPU: 3}}})
    assert r.status_code == 422, r.text  # acme-h200 holds 8 H200 GPUs
    r = world.api.patch("/v1/tenants/acme", json={"parentCohort": "globex-team"})
    assert r.status_code == 422 and errors_of(r) == ["parentCohort"], r.text
    r = world.api.patch("/v1/tenants/globex", json={"parentCohort": None, "borrowing": {}})
    assert (
        r.status_code == 200
        and "parentName" not in world.api.get("/v1/tenants/globex/cohorts/globex").json()["spec"]
    )


def test_a_tenant_priority_class_is_capped_by_the_providers_ceiling(world: World) -> None:
    admin = world.as_("tenant-admin")
    r = admin.post("/v1/tenants/acme/priority-classes", json={"name": "max", "value": 10**9})
    assert r.status_code == 409 and errors_of(r) == ["value"], r.text  # valid; the ceiling refuses
    assert "1000000000" in r.text and "(1000)" in r.text
    assert admin.post("/v1/tenants/acme/priority-classes", json={"name": "ok", "value": 1000}).status_code == 201  # fmt: skip
    assert world.api.patch("/v1/tenants/acme", json={"priorityCeiling": 50}).status_code == 200
    r = admin.put("/v1/tenants/acme/priority-classes/ok", json={"value": 51})
    assert r.status_code == 409 and "51 is above tenant acme's priority ceiling (50)" in r.text


def test_a_job_larger_than_the_tenants_maximum_is_refused(world: World) -> None:
    # the queue could hold 2 GPUs (grant + borrowing); the tenant's maximum job is 1
    assert world.api.patch("/v1/tenants/acme", json={"maxJob": {GPU: 1}}).status_code == 200
    user = world.as_("tenant-user")
    job = {"name": "big", "queue": "main", "command": ["x"],
           "podSets": [{"name": "w", "count": 2, "resources": {GPU: 1}}]}  # fmt: skip
    r = user.post("/v1/tenants/acme/jobs", json=job)
    assert r.status_code == 422 and errors_of(r) == ["podSets"], r.text
    assert "2 GPUs (nvidia.com/gpu)" in r.text and "maximum job size of 1 GPU" in r.text
    job["podSets"][0]["count"] = 1
    assert user.post("/v1/tenants/acme/jobs", json=job).status_code == 201


def test_a_job_with_more_pods_than_the_tenants_maximum_is_refused(world: World) -> None:
    """``maxJob.pods`` bounds a job's pods in all (its pod sets together), per tenant."""
    # the queue could hold 2 GPUs (grant + borrowing); the tenant's maximum job is 1 pod
    r = world.api.patch("/v1/tenants/acme", json={"maxJob": {"pods": 1}})
    assert r.status_code == 200 and r.json()["maxJob"] == {"pods": "1"}, r.text
    user = world.as_("tenant-user")
    sets = [{"name": f"s{i}", "count": 1, "resources": {GPU: 1}} for i in range(2)]
    job = {"name": "wide", "queue": "main", "command": ["x"], "podSets": sets}
    r = user.post("/v1/tenants/acme/jobs", json=job)
    assert r.status_code == 422 and errors_of(r) == ["podSets"], r.text
    assert "asks for 2 " in r.text and "maximum job size of 1 " in r.text
    job["podSets"] = sets[:1]
    assert user.post("/v1/tenants/acme/jobs", json=job).status_code == 201


# --- every write route, every role ----------------------------------------------------------

Attempt = tuple[str, str, Any]  # method, path, body

#: Write routes that carry governance, with the escape attempts made through each.
ATTEMPTS: dict[str, list[Attempt]] = {
    "POST /v1/cluster-queues": [
        ("POST", "/v1/cluster-queues",
         {"name": "x", "spec": cq_spec("h100", 0, "globex-team"), "tenant": "acme"}),
        ("POST", "/v1/cluster-queues", {"name": "x", "spec": cq_spec("h100", 4, "acme")}),
        ("POST", "/v1/cluster-queues",
         {"name": "x", "spec": cq_spec("a100-mig", 0, "acme"), "tenant": "acme"}),
    ],
    "PUT /v1/cluster-queues/{}": [
        ("PUT", "/v1/cluster-queues/acme-h100",
         {"spec": cq_spec("h100", 1, "cloud"), "tenant": "acme"}),
        ("PUT", "/v1/cluster-queues/acme-h100", {"spec": cq_spec("h100", 9), "tenant": "acme"}),
    ],
    "DELETE /v1/cluster-queues/{}": [],
    "POST /v1/cohorts": [("POST", "/v1/cohorts", {"name": "x", "spec": {"parentName": "acme"}})],
    "PUT /v1/cohorts/{}": [
        ("PUT", "/v1/cohorts/acme", {"spec": {"parentName": "cloud"}}),
        ("PUT", "/v1/cohorts/globex-team", {"spec": {"parentName": "cloud"}}),
    ],
    "DELETE /v1/cohorts/{}": [("DELETE", "/v1/cohorts/acme", None),
                              ("DELETE", "/v1/cohorts/acme-team", None)],
    "POST /v1/kueue/import": [
        ("POST", "/v1/kueue/import", [{
            "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "x"},
            "spec": cq_spec("h100", 8, "acme")}]),
        ("POST", "/v1/kueue/import", [{
            "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "acme-h100"},
            "spec": cq_spec("h100", 1, "globex-team")}]),
        ("POST", "/v1/kueue/import", [{
            "apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "acme"},
            "spec": {"parentName": "cloud", "resourceGroups": [quota("h100", 0, borrowingLimit=64)]}}]),
        ("POST", "/v1/kueue/import", [{
            "apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "acme-team"},
            "spec": {"parentName": "cloud"}}]),
    ],
    # KAI and Volcano queues are stored through the Kueue import: the same attempts
    "POST /v1/kai/import": [
        ("POST", "/v1/kai/import?flavor=h100", [{
            "apiVersion": KAI, "kind": "Queue", "metadata": {"name": "x"},
            "spec": {"parentQueue": "acme", "resources": {"gpu": {"quota": 8, "limit": -1}}}}]),
        ("POST", "/v1/kai/import?flavor=h100", [{
            "apiVersion": KAI, "kind": "Queue",
            "metadata": {"name": "acme", "annotations": {"gpuaas.io/kueue-kind": "Cohort"}},
            "spec": {"parentQueue": "cloud", "resources": {"gpu": {"quota": 0, "limit": 64}}}}]),
    ],
    "POST /v1/volcano/import": [
        ("POST", "/v1/volcano/import?flavor=h100", [{
            "apiVersion": VOLCANO, "kind": "Queue", "metadata": {"name": "acme-h100"},
            "spec": {"parent": "globex-team", "deserved": {GPU: 1}}}]),
        ("POST", "/v1/volcano/import?flavor=h100", [{
            "apiVersion": VOLCANO, "kind": "Queue", "metadata": {"name": "x"},
            "spec": {"parent": "acme", "deserved": {GPU: 8}}}]),
    ],
    "POST /v1/tenants": [
        ("POST", "/v1/tenants", {"name": "evil", "parentCohort": "acme"}),
        ("POST", "/v1/tenants", {"name": "globex-team"}),
        ("POST", "/v1/tenants", {"name": "evil", "borrowing": {"h100": {GPU: 8}}}),
    ],
    "PATCH /v1/tenants/{}": [
        ("PATCH", "/v1/tenants/acme", {"parentCohort": "globex-team"}),
        ("PATCH", "/v1/tenants/acme", {"borrowing": {"a100-mig": {GPU: 8}}}),
    ],
    "POST /v1/tenants/{}/cluster-queues": [
        ("POST", "/v1/tenants/acme/cluster-queues", {"name": "x", "spec": cq_spec("h100", 0, "cloud")}),
        ("POST", "/v1/tenants/acme/cluster-queues", {"name": "x", "spec": cq_spec("h100", 0, "globex-team")}),
        ("POST", "/v1/tenants/acme/cluster-queues", {"name": "x", "spec": cq_spec("a100-mig", 0)}),
        ("POST", "/v1/tenants/acme/cluster-queues", {"name": "x", "spec": cq_spec("h100", 1)}),
        ("POST", "/v1/tenants/globex/cluster-queues", {"name": "x", "spec": cq_spec("h100", 0, "acme")}),
    ],
    "PUT /v1/tenants/{}/cluster-queues/{}": [
        ("PUT", "/v1/tenants/acme/cluster-queues/acme-h100", {"spec": cq_spec("h100", 1, "cloud")}),
        ("PUT", "/v1/tenants/acme/cluster-queues/acme-h100", {"spec": cq_spec("h100", 2)}),
        ("PUT", "/v1/tenants/acme/cluster-queues/acme-h100",
         {"spec": cq_spec("h100", 1, fairSharing={"weight": "1000"})}),
        ("PUT", "/v1/tenants/acme/cluster-queues/acme-h100",
         {"spec": cq_spec("h100", 1, preemption={"borrowWithinCohort": {"policy": "LowerPriority"}})}),
        ("PUT", "/v1/tenants/acme/cluster-queues/globex-h100", {"spec": cq_spec("h100", 0)}),
    ],
    "DELETE /v1/tenants/{}/cluster-queues/{}": [
        ("DELETE", "/v1/tenants/acme/cluster-queues/globex-h100", None),
    ],
    "POST /v1/tenants/{}/cohorts": [
        ("POST", "/v1/tenants/acme/cohorts", {"name": "x", "spec": {"parentName": "cloud"}}),
        ("POST", "/v1/tenants/acme/cohorts", {"name": "x", "spec": {"parentName": "globex-team"}}),
        ("POST", "/v1/tenants/acme/cohorts",
         {"name": "x", "spec": {"resourceGroups": [quota("h100", 5)]}}),
        ("POST", "/v1/tenants/acme/cohorts",
         {"name": "x", "spec": {"fairSharing": {"weight": "9"}}}),
    ],
    "PUT /v1/tenants/{}/cohorts/{}": [
        ("PUT", "/v1/tenants/acme/cohorts/acme", {"spec": {"parentName": "cloud"}}),
        ("PUT", "/v1/tenants/acme/cohorts/acme-team", {"spec": {"parentName": "cloud"}}),
        ("PUT", "/v1/tenants/acme/cohorts/globex-team", {"spec": {"parentName": "acme"}}),
    ],
    "DELETE /v1/tenants/{}/cohorts/{}": [
        ("DELETE", "/v1/tenants/acme/cohorts/acme", None),
        ("DELETE", "/v1/tenants/acme/cohorts/acme-team", None),
    ],
    "POST /v1/tenants/{}/local-queues": [
        ("POST", "/v1/tenants/acme/local-queues", {"name": "x", "clusterQueue": "globex-h100"}),
        ("POST", "/v1/tenants/acme/local-queues", {"name": "x", "clusterQueue": "globex-cpu"}),
    ],
    "PUT /v1/tenants/{}/local-queues/{}": [
        ("PUT", "/v1/tenants/acme/local-queues/main", {"clusterQueue": "globex-h100"}),
    ],
    "POST /v1/tenants/{}/priority-classes": [
        ("POST", "/v1/tenants/acme/priority-classes", {"name": "x", "value": 10**9}),
    ],
    "PUT /v1/tenants/{}/priority-classes/{}": [],
    "POST /v1/tenants/{}/hardware-profiles": [
        ("POST", "/v1/tenants/acme/hardware-profiles", {"name": "x", "spec": {
            "displayName": "x", "localQueue": "main", "allowedTenants": ["globex"],
            "resources": [{"name": GPU, "min": 1, "default": 1, "max": 8}]}}),
    ],
    # tenant clusters: acme and globex have no cluster terms; the grant a cluster brings is
    # the provider's (service/clusters.py), made only through a creation the terms allow
    "POST /v1/tenants/{}/clusters": [
        ("POST", "/v1/tenants/acme/clusters", {"name": "x", "kind": "baremetal",
         "pools": [{"name": "p", "flavor": "h100", "count": 1}]}),
        ("POST", "/v1/tenants/globex/clusters", {"name": "x", "kind": "slurm",
         "pools": [{"name": "p", "gpuModel": "H100-80GB", "count": 1}]}),
    ],
    "POST /v1/tenants/{}/clusters/{}/scale": [
        ("POST", "/v1/tenants/acme/clusters/x/scale", {"pools": [{"name": "p", "count": 9}]}),
    ],
    "PUT /v1/tenants/{}/cluster-allowance": [
        ("PUT", "/v1/tenants/acme/cluster-allowance", {"flavors": ["nope"], "nodeLimit": 9}),
    ],
    "POST /v1/tenants/{}/jobs": [],  # covered by the final admission check below
    "POST /v1/tenants/{}/jobs/batch": [],  # the same checks as one job's, then the same
}  # fmt: skip

#: Write routes that carry no governance a tenant could escape through, and why.
NO_GOVERNANCE: dict[str, str] = {
    "DELETE /v1/tenants/{}": "removes a tenant with its whole tree",
    "POST /v1/users": "identity", "PATCH /v1/users/{}": "identity",
    "DELETE /v1/users/{}": "identity", "PUT /v1/tenants/{}/members/{}": "identity",
    "DELETE /v1/tenants/{}/members/{}": "identity",
    "POST /v1/tenants/{}/members/{}/tokens": "identity", "POST /v1/tokens": "identity",
    "DELETE /v1/tokens/{}": "identity", "POST /v1/users/{}/tokens": "identity",
    "DELETE /v1/tenants/{}/tokens/{}": "identity",
    "DELETE /v1/tenants/{}/invitations/{}": "identity",
    "POST /v1/tenants/{}/invitations/{}/accept": "identity (a membership, no governance)",
    "POST /v1/nodes": "fleet", "PUT /v1/nodes": "fleet", "DELETE /v1/nodes/{}": "fleet",
    "POST /v1/nodes/{}/cordon": "fleet", "POST /v1/nodes/{}/uncordon": "fleet",
    "POST /v1/nodes/{}/drain": "fleet", "PUT /v1/nodes/{}/partition": "fleet",
    "POST /v1/flavors": "a flavor holds no quota", "PUT /v1/flavors/{}": "no quota",
    "DELETE /v1/flavors/{}": "no quota (refused while quota names it)",
    "POST /v1/priority-classes": "the provider's own classes set the ceiling",
    "PUT /v1/priority-classes/{}": "the provider's own classes",
    "DELETE /v1/priority-classes/{}": "the provider's own classes",
    "POST /v1/hardware-profiles": "a profile names a LocalQueue, which stays in its tenant",
    "PUT /v1/hardware-profiles/{}": "as above",
    "DELETE /v1/hardware-profiles/{}": "as above",
    "DELETE /v1/tenants/{}/local-queues/{}": "frees no quota",
    "DELETE /v1/tenants/{}/priority-classes/{}": "lowers nothing",
    "PUT /v1/tenants/{}/hardware-profiles/{}": "checked like the create route above",
    "DELETE /v1/tenants/{}/hardware-profiles/{}": "removes an entry point",
    "POST /v1/tenants/{}/datasets": "a dataset holds no quota; it is the tenant's own",
    "PUT /v1/tenants/{}/datasets/{}": "as above", "DELETE /v1/tenants/{}/datasets/{}": "as above",
    "POST /v1/tenants/{}/datasets/{}/preload": "warms a cache; no quota (docs/datasets.md)",
    "POST /v1/tenants/{}/jobs/{}/cancel": "frees quota",
    "POST /v1/tenants/{}/volumes": "storage, no Kueue quota: held to the tenant's storageQuota "
                                   "(tests/service/test_storage_*.py)",
    "PUT /v1/tenants/{}/volumes/{}": "as above", "DELETE /v1/tenants/{}/volumes/{}": "frees storage",
    "DELETE /v1/tenants/{}/clusters/{}": "gives a cluster's nodes and grant back",
    "POST /v1/idle-pools": "provider only; carves idle nodes into the provider's own pool tenant, "
                           "never a tenant's grant (tests/service/test_idle_pool_*.py)",
    "PUT /v1/idle-pools/{}": "as above", "DELETE /v1/idle-pools/{}": "as above",
    "POST /v1/prices": "prices, no quota", "PUT /v1/prices/{}": "prices, no quota",
    "DELETE /v1/prices/{}": "prices, no quota",
    "POST /v1/tenants/{}/prices": "the tenant's chargeback book: prices, no quota",
    "PUT /v1/tenants/{}/prices/{}": "as above", "DELETE /v1/tenants/{}/prices/{}": "as above",
    "POST /v1/tenants/{}/budgets": "a budget only holds admissions back, never adds quota",
    "PUT /v1/tenants/{}/budgets/{}": "as above", "DELETE /v1/tenants/{}/budgets/{}": "as above",
    "POST /v1/tenants/{}/invoices/{}/lines": "money lines on an invoice, no quota",
    "POST /v1/tenants/{}/invoices/{}/close": "closes a period, no quota",
}  # fmt: skip


def _write_routes(app: Any) -> set[str]:
    return {
        f"{method.upper()} {re.sub(r'{[^}]*}', '{}', path)}"
        for path, item in app.openapi()["paths"].items()
        for method in item
        if method in ("post", "put", "patch", "delete")
    }


def test_every_write_route_is_covered(tmp_path: Path) -> None:
    """A new write route must say how it keeps tenants in (an attempt here) or why it cannot
    let one out."""
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'x.db'}", data_dir=tmp_path,
                              reconcile=False, admin_token=ADMIN_TOKEN))  # fmt: skip
    routes = _write_routes(app)
    missing = routes - set(ATTEMPTS) - set(NO_GOVERNANCE)
    assert not missing, f"write routes the escape test does not know: {sorted(missing)}"
    assert not (set(ATTEMPTS) | set(NO_GOVERNANCE)) - routes, "entries for routes not served"


@pytest.fixture
def world_and_clock(db_url: str, tmp_path: Path) -> Iterator[tuple[World, Reconciler]]:
    app = create_app(make_settings(db_url, tmp_path))
    with TestClient(app, raise_server_exceptions=False) as client:
        world = build(Api(client, ADMIN_TOKEN))
        reconciler = Reconciler(app.state.db, Settings(db_url=db_url, data_dir=tmp_path))
        yield world, reconciler
        reconciler.stop()


def test_no_write_route_lets_a_tenant_out(
    world_and_clock: tuple[World, Reconciler],
) -> None:
    """Every attempt, as every role, is refused and writes nothing; then acme's jobs admit at
    most its grant plus its borrowing limit (2 H100 GPUs) while globex's 8 lie idle."""
    world, reconciler = world_and_clock
    for route, attempts in ATTEMPTS.items():
        for method, path, body in attempts:
            for role in ROLES:
                before = world.governance()
                r = world.as_(role).request(method, path, json=body)
                assert 400 <= r.status_code < 500, f"{route} {path} as {role}: {r.text}"
                assert r.headers["content-type"].startswith("application/problem+json")
                assert world.governance() == before, f"{route} {path} as {role} wrote"
    user = world.as_("tenant-user")
    for i, gpus in enumerate((2, 1, 3)):
        job = {"name": f"j{i}", "queue": "main", "command": ["x"], "duration": 600,
               "podSets": [{"name": "w", "count": gpus, "resources": {GPU: 1}}]}  # fmt: skip
        r = user.post("/v1/tenants/acme/jobs", json=job)
        if gpus <= 2:
            assert r.status_code == 201, r.text
        else:  # more than grant + borrowing: refused at submission (service/job_checks.py)
            assert r.status_code == 422 and "could hold at most 2 GPUs" in r.text, r.text
    now = time.time()
    for step in range(1, 4):
        reconciler.step(now + step)
    db = world.api.client.app.state.db
    with db.sessions() as s:
        jobs = {j.name: j for j in s.scalars(select(Job).where(Job.name.in_(["j0", "j1", "j2"])))}
    admitted = {n for n, j in jobs.items() if j.state in ("Admitted", "Running")}
    assert admitted == {"j0"}, {n: (j.state, j.reason) for n, j in jobs.items()}
    assert sum(j.gpus for j in jobs.values() if j.name in admitted) == 2000  # milli-GPUs
    assert "j2" not in jobs
    assert jobs["j1"].state == "Pending" and "quota" in jobs["j1"].reason, jobs["j1"].reason
