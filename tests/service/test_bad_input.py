"""Bad input never hurts: every bad request gets a 4xx problem+json naming the field at fault,
never a 500, and a rejected write leaves the stored data exactly as it was.

Targeted cases state the exact answer (status and field); then every write route of the
OpenAPI document gets generated garbage (hypothesis) and must answer below 500. Both run on
SQLite and on PostgreSQL (where NUL bytes, integer overflow and long strings reach a real type
system).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
from gpuaas.store.tables import REQUEST_LOGS, Base

ADMIN_TOKEN = "gpa_test-admin-token-0123456789"
PROBLEM = "application/problem+json"
MIB = 1 << 20


# --------------------------------------------------------------------------------------------
# The world: tenant acme (where requests go), tenant globex (whose objects acme may not use),
# tenant junk (the target of generated garbage, so that an accepted garbage write cannot
# disturb the targeted cases).


def expect(response: httpx.Response, *codes: int) -> Any:
    assert response.status_code in codes, (
        f"{response.request.method} {response.request.url} -> {response.status_code}, "
        f"expected {codes}: {response.text[:500]}"
    )
    return response.json() if response.content else None


def tenant_body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "displayName": f"{name} inc.",
        "capacity": {"gpu": {"nvidia.com/gpu": "64", "cpu": "1000", "memory": "10Ti"}},
    }


def cluster_queue(name: str, gpus: str = "8") -> dict[str, Any]:
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]
    return {
        "name": name,
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "gpu", "resources": resources}],
                }
            ],
        },
    }


def hardware_profile(name: str, lq: str, allowed: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "displayName": f"profile {name}",
        "localQueue": lq,
        "resources": [{"name": "nvidia.com/gpu", "min": "1", "default": "1", "max": "8"}],
    }
    if allowed:
        spec["allowedTenants"] = allowed
    return {"name": name, "spec": spec}


def price_body(name: str, valid_from: int = 1_700_000_000) -> dict[str, Any]:
    """A valid price entry (docs/billing.md)."""
    return {"name": name, "sku": "H100-80GB/whole@on-demand", "listPerHour": "2.49",
            "contractedPerHour": "2.10", "currency": "USD", "validFrom": valid_from}  # fmt: skip


def node_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "H100-80GB", "count": 8},
    }


def job_spec(name: str, queue: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "training",
        "queue": queue,
        "command": ["true"],
        "podSets": [{"name": "workers", "count": 1, "resources": {"nvidia.com/gpu": 1}}],
    }


@dataclass
class World:
    client: TestClient
    database: str  # "sqlite" or "postgresql"
    tokens: dict[str, str] = field(default_factory=dict)  # "tenant/role" -> token
    jobs: dict[str, int] = field(default_factory=dict)  # tenant -> a job's id

    def call(self, method: str, url: str, token: str | None = ADMIN_TOKEN, **kw: Any) -> Any:
        headers = dict(kw.pop("headers", None) or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.request(method, url, headers=headers, **kw)

    def admin(self, method: str, url: str, **kw: Any) -> Any:
        return expect(self.call(method, url, **kw), 200, 201, 204)

    def build(self) -> None:
        self.admin("POST", "/v1/flavors", json={"name": "gpu", "spec": {}})
        self.admin("POST", "/v1/flavors", json={"name": "junk-flavor", "spec": {}})
        self.admin("POST", "/v1/prices", json=price_body("junk-price"))
        self.admin("POST", "/v1/cohorts", json={"name": "junk-cohort", "spec": {}})
        self.admin("POST", "/v1/priority-classes", json={"name": "junk-pc", "value": 100})
        self.admin("POST", "/v1/nodes", json=node_entry("node-1"))
        self.admin("POST", "/v1/nodes", json=node_entry("junk-node"))
        self.admin("POST", "/v1/users", json={"name": "junk-user"})
        self.admin("POST", "/v1/cluster-queues", json=cluster_queue("junk-global-cq", "1"))
        for t in ("acme", "globex", "junk"):
            self.admin("POST", "/v1/tenants", json=tenant_body(t))
            self.admin("POST", f"/v1/tenants/{t}/cluster-queues", json=cluster_queue(f"{t}-cq"))
            team = {"name": f"{t}-team", "spec": {"parentName": t}}
            self.admin("POST", f"/v1/tenants/{t}/cohorts", json=team)
            lq = {"name": f"{t}-lq", "clusterQueue": f"{t}-cq"}
            self.admin("POST", f"/v1/tenants/{t}/local-queues", json=lq)
            pc = {"name": f"{t}-pc", "value": 10}
            self.admin("POST", f"/v1/tenants/{t}/priority-classes", json=pc)
            hp = hardware_profile(f"{t}-hp", f"{t}-lq")
            self.admin("POST", f"/v1/tenants/{t}/hardware-profiles", json=hp)
            self.admin("POST", f"/v1/tenants/{t}/volumes", json={"name": f"{t}-vol", "size": "1Mi"})
            ds = {"name": f"{t}-ds", "uri": f"s3://bucket/{t}", "size": "1Gi"}
            self.admin("POST", f"/v1/tenants/{t}/datasets", json=ds)
            self.admin("POST", f"/v1/tenants/{t}/prices", json=price_body(f"{t}-price"))
            for role in ("tenant-admin", "tenant-user"):
                user = f"{t}-{role}"
                self.admin("PUT", f"/v1/tenants/{t}/members/{user}", json={"role": role})
                minted = self.admin(
                    "POST", f"/v1/tenants/{t}/members/{user}/tokens", json={"name": "bad"}
                )
                self.tokens[f"{t}/{role}"] = minted["token"]
            job = self.call(
                "POST",
                f"/v1/tenants/{t}/jobs",
                token=self.tokens[f"{t}/tenant-user"],
                json=job_spec(f"{t}-job", f"{t}-lq"),
            )
            self.jobs[t] = expect(job, 201)["id"]
        self.admin(
            "POST",
            "/v1/hardware-profiles",
            json=hardware_profile("globex-only-hp", "globex-lq", ["globex"]),
        )
        self.admin(
            "POST",
            "/v1/hardware-profiles",
            json=hardware_profile("junk-global-hp", "junk-lq", ["junk"]),
        )

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, straight from the database."""
        db = self.client.app.state.db
        with db.engine.connect() as conn:
            return {
                table.name: [
                    tuple(row) for row in conn.execute(select(table).order_by(*table.primary_key))
                ]
                for table in Base.metadata.sorted_tables
                if table.name not in REQUEST_LOGS
            }


def _settings(url: str, tmp: Path) -> Settings:
    return Settings(db_url=url, data_dir=tmp, reconcile=False, admin_token=ADMIN_TOKEN)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """One world per database for the whole module: rejected writes must not change it."""
    tmp = tmp_path_factory.mktemp("bad-input")
    if request.param == "sqlite":
        url, drop = f"sqlite:///{tmp / 'gpuaas.db'}", None
    else:
        base = request.getfixturevalue("postgres_server")
        name = f"bad_{uuid.uuid4().hex[:12]}"
        admin_url = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url, drop = f"{base}/{name}", (admin_url, name)
    try:
        with TestClient(create_app(_settings(url, tmp)), raise_server_exceptions=False) as client:
            w = World(client, request.param)
            w.build()
            yield w
    finally:
        if drop is not None:
            with psycopg.connect(drop[0], autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {drop[1]} WITH (FORCE)")


def assert_problem(response: httpx.Response, status: int, field_name: str | None) -> None:
    """``response`` is a ``status`` problem document naming ``field_name`` (when given)."""
    assert response.status_code == status, (
        f"expected {status}, got {response.status_code}: {response.text[:400]}"
    )
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body = response.json()
    assert body["status"] == status and body["detail"], body
    if field_name is not None:
        named = [_dotted(e["field"]) for e in body.get("errors", [])]
        assert _dotted(field_name) in named, f"{field_name} not named in {body}"


def _dotted(path: str) -> str:
    """``podSets[0].count`` and ``podSets.0.count`` name the same field."""
    return re.sub(r"\[(\d+)\]", r".\1", path)


# --------------------------------------------------------------------------------------------
# Targeted cases: the exact answer to one kind of bad input.

USER = "acme/tenant-user"  # who submits jobs in the targeted cases
JOBS = "/v1/tenants/acme/jobs"


def job_with(**changes: Any) -> dict[str, Any]:
    """A valid acme job with top-level ``changes`` (``None`` removes a key)."""
    body = job_spec("bad-job", "acme-lq")
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def pod_set(**changes: Any) -> list[dict[str, Any]]:
    """The job's one pod set with ``changes`` (``None`` removes a key)."""
    ps: dict[str, Any] = {"name": "workers", "count": 1, "resources": {"nvidia.com/gpu": 1}}
    for key, value in changes.items():
        if value is None:
            ps.pop(key, None)
        else:
            ps[key] = value
    return [ps]


@dataclass(frozen=True)
class Case:
    """One bad request and its exact answer: ``status`` and the ``field`` the problem names."""

    id: str
    method: str
    url: str
    status: int
    field: str | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    token: str = "admin"  # "admin" or a World.tokens key
    bug: str | None = None  # a known bug of the service: the case is xfail(strict) ...
    bug_on: tuple[str, ...] = ("sqlite", "postgresql")  # ... on these databases


def job_case(id_: str, status: int, field_name: str | None, body: Any, **known: Any) -> Case:
    return Case(id_, "POST", JOBS, status, field_name, json=body, token=USER, **known)


def raw_job(
    id_: str,
    status: int,
    content: bytes,
    content_type: str = "application/json",
    field_name: str | None = None,
    **known: Any,
) -> Case:
    headers = {"content-type": content_type}
    return Case(
        id_, "POST", JOBS, status, field_name, content=content, headers=headers, token=USER, **known
    )


def _job_text(**raw: str) -> bytes:
    """A valid acme job as JSON text, with ``raw`` JSON text for some keys (to send escapes
    that ``json.dumps`` cannot produce from a Python string, such as a lone surrogate)."""
    body = job_spec("bad-job", "acme-lq")
    for key in raw:
        body[key] = f"@{key}@"
    text = json.dumps(body)
    for key, value in raw.items():
        text = text.replace(json.dumps(f"@{key}@"), value)
    return text.encode()


JSON = {"content-type": "application/json"}
YAML = {"content-type": "application/yaml"}


DATASETS = "/v1/tenants/acme/datasets"


def dataset_case(id_: str, field_name: str, **body: Any) -> Case:
    return Case(id_, "POST", DATASETS, 422, field_name, json={"name": "new-ds", **body})


CASES: list[Case] = [
    # datasets: the URI's scheme, sizes, runtime; a preload on a node that is not there
    dataset_case("dataset-uri-scheme", "uri", uri="ftp://host/imagenet"),
    dataset_case("dataset-uri-relative", "uri", uri="data/imagenet"),
    dataset_case("dataset-uri-empty-path", "uri", uri="s3://"),
    dataset_case("dataset-size", "size", uri="s3://b/x", size="lots"),
    dataset_case("dataset-cache-size", "cacheSize", uri="s3://b/x", cacheSize="-5Gi"),
    dataset_case("dataset-runtime", "runtime", uri="s3://b/x", runtime="ceph"),
    dataset_case("dataset-no-uri", "uri"),
    Case(
        "dataset-duplicate",
        "POST",
        DATASETS,
        409,
        "name",
        json={"name": "acme-ds", "uri": "s3://b/x"},
    ),
    Case(
        "dataset-preload-unknown-node",
        "POST",
        DATASETS + "/acme-ds/preload",
        404,  # a valid body naming a node that does not exist
        "nodes",
        json={"nodes": ["no-such-node"]},
    ),
    job_case("dataset-unknown", 422, "dataset.name", job_with(dataset={"name": "nope"})),
    job_case(
        "dataset-locality",
        422,
        "dataset.locality",
        job_with(dataset={"name": "acme-ds", "locality": "maybe"}),
    ),
    # jobs: wrong types, bad numbers, unknown fields
    job_case("count-negative", 422, "podSets.0.count", job_with(podSets=pod_set(count=-1))),
    job_case("count-zero", 422, "podSets.0.count", job_with(podSets=pod_set(count=0))),
    job_case("count-string", 422, "podSets.0.count", job_with(podSets=pod_set(count="four"))),
    job_case("count-float", 422, "podSets.0.count", job_with(podSets=pod_set(count=2.5))),
    job_case("count-huge", 422, "podSets.0.count", job_with(podSets=pod_set(count=10**30))),
    job_case(  # each pod set within its bound, the job beyond it: 16 x 10,000 pods once slowed all
        "pods-in-all",
        422,
        "podSets",
        job_with(
            podSets=[
                {"name": f"s{i}", "count": 10_000, "resources": {"cpu": "1m"}} for i in range(16)
            ]
        ),
    ),
    job_case("count-bool", 422, "podSets.0.count", job_with(podSets=pod_set(count=True))),
    job_case("unknown-field", 422, "colour", job_with(colour="blue")),
    job_case("unknown-pod-set-field", 422, "podSets.0.gpuz", job_with(podSets=pod_set(gpuz=8))),
    job_case("no-name", 422, "name", job_with(name=None)),
    job_case("name-type", 422, "name", job_with(name=42)),
    job_case("name-unicode", 422, "name", job_with(name="tränïng-🚀")),
    job_case("name-nul", 422, "name", job_with(name="a\u0000b")),
    job_case("name-too-long", 422, "name", job_with(name="a" * 64)),
    job_case("name-huge", 422, "name", job_with(name="a" * 100_000)),
    job_case("kind-unknown", 422, "kind", job_with(kind="quantum")),
    job_case("no-pod-sets", 422, "podSets", job_with(podSets=[])),
    job_case("pod-sets-object", 422, "podSets", job_with(podSets={"count": 1})),
    job_case("max-run-time-negative", 422, "maxRunTime", job_with(maxRunTime=-1)),
    job_case("max-run-time-huge", 422, "maxRunTime", job_with(maxRunTime=1e308)),
    job_case("command-string", 422, "command", job_with(command="true")),
    job_case(
        "topology-level-unknown",
        422,
        "podSets.0.topology.level",
        job_with(podSets=pod_set(topology={"level": "galaxy"})),
    ),
    job_case(
        "gpu-negative",
        422,
        "podSets.0.resources.nvidia.com/gpu",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": -1})),
    ),
    job_case(
        "gpu-words",
        422,
        "podSets.0.resources.nvidia.com/gpu",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": "lots"})),
    ),
    job_case(
        "gpu-huge",
        422,
        "podSets.0.resources.nvidia.com/gpu",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": "1e400"})),
    ),
    job_case(
        "resource-name-path",
        422,
        "podSets.0.resources.../../etc",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": 1, "../../etc": 1})),
    ),
    job_case(  # Python's int() refuses 4,301+ digits; refused by length before it gets there
        "gpu-4301-digits",
        422,
        "podSets.0.resources.nvidia.com/gpu",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": "9" * 4301})),
    ),
    job_case(
        "memory-4301-digits-milli",
        422,
        "podSets.0.resources.memory",
        job_with(podSets=pod_set(resources={"nvidia.com/gpu": 1, "memory": "1" * 4301 + "m"})),
    ),
    job_case(
        "env-not-strings",
        422,
        "container.env.A",
        job_with(command=None, container={"image": "x", "env": {"A": 1}}),
    ),
    job_case("job-env-not-strings", 422, "env.A", job_with(env={"A": 1})),
    job_case("job-env-bad-name", 422, "env", job_with(env={"1-BAD NAME": "x"})),
    job_case("job-env-not-a-map", 422, "env", job_with(env=["A=1"])),
    # jobs: names of what the tenant may not use
    job_case(
        "profile-not-allowed",
        422,
        "podSets.0.hardwareProfile",
        job_with(queue=None, podSets=pod_set(resources=None, hardwareProfile="globex-only-hp")),
    ),
    job_case(
        "profile-of-another-tenant",
        422,
        "podSets.0.hardwareProfile",
        job_with(queue=None, podSets=pod_set(resources=None, hardwareProfile="globex-hp")),
    ),
    job_case(
        "profile-unknown",
        422,
        "podSets.0.hardwareProfile",
        job_with(queue=None, podSets=pod_set(resources=None, hardwareProfile="nope")),
    ),
    job_case("queue-of-another-tenant", 422, "queue", job_with(queue="globex-lq")),
    job_case(
        "priority-of-another-tenant", 422, "priorityClass", job_with(priorityClass="globex-pc")
    ),
    # jobs: not JSON, not an object, too large
    raw_job(
        "malformed-json",
        422,
        b'{"name": "x", ',
        field_name="body",
    ),
    raw_job("json-infinity", 422, b'{"name": "x", "maxRunTime": Infinity}', "application/json"),
    raw_job("not-utf8", 422, b'{"name": "\xff\xfe"}', "application/json", "body"),
    raw_job("empty-body", 422, b"", "application/json"),
    raw_job("text-plain", 422, json.dumps(job_spec("x", "acme-lq")).encode(), "text/plain"),
    raw_job("form-encoded", 422, b"name=x&kind=training", "application/x-www-form-urlencoded"),
    job_case("body-is-a-list", 422, None, [job_spec("x", "acme-lq")]),
    job_case("body-is-null", 422, None, None),
    job_case("body-over-1-mib", 413, None, job_with(script="x" * (MIB + 10), command=None)),
    # identity
    Case("tenant-duplicate", "POST", "/v1/tenants", 409, "name", json=tenant_body("acme")),
    Case("tenant-name-upper", "POST", "/v1/tenants", 422, "name", json=tenant_body("ACME")),
    Case("tenant-name-unicode", "POST", "/v1/tenants", 422, "name", json=tenant_body("äcme")),
    Case("tenant-name-nul", "POST", "/v1/tenants", 422, "name", json={"name": "ac\u0000me"}),
    Case("tenant-name-long", "POST", "/v1/tenants", 422, "name", json=tenant_body("a" * 64)),
    Case(
        "tenant-capacity-negative",
        "POST",
        "/v1/tenants",
        422,
        "capacity.gpu.nvidia.com/gpu",
        json={"name": "neg", "capacity": {"gpu": {"nvidia.com/gpu": "-5"}}},
    ),
    Case(
        "tenant-capacity-not-a-map",
        "POST",
        "/v1/tenants",
        422,
        "capacity.gpu",
        json={"name": "neg", "capacity": {"gpu": 5}},
    ),
    Case(
        "tenant-capacity-below-quota",
        "PATCH",
        "/v1/tenants/acme",
        422,
        None,
        json={"capacity": {"gpu": {"nvidia.com/gpu": "1"}}},
    ),
    Case("tenant-patch-unknown", "PATCH", "/v1/tenants/acme", 422, "color", json={"color": 1}),
    Case(
        "tenant-display-name-long",
        "PATCH",
        "/v1/tenants/acme",
        422,
        "displayName",
        json={"displayName": "x" * 201},
    ),
    Case("user-duplicate", "POST", "/v1/users", 409, "name", json={"name": "junk-user"}),
    Case("user-name-unicode", "POST", "/v1/users", 422, "name", json={"name": "Jürgen"}),
    Case(
        "user-platform-role",
        "POST",
        "/v1/users",
        422,
        "platformRole",
        json={"name": "x", "platformRole": "god"},
    ),
    Case(
        "member-role",
        "PUT",
        "/v1/tenants/acme/members/new-member",
        422,
        "role",
        json={"role": "owner"},
    ),
    Case(
        "member-name",
        "PUT",
        "/v1/tenants/acme/members/N%C3%BC%20ll",
        422,
        "user",
        json={"role": "viewer"},
    ),
    Case(
        "member-role-platform",
        "PUT",
        "/v1/tenants/acme/members/new-member",
        422,
        "role",
        json={"role": "provider-admin"},
        token="acme/tenant-admin",
    ),
    Case(
        "tenant-cluster-queue-owner",
        "POST",
        "/v1/tenants/acme/cluster-queues",
        422,
        "tenant",
        json={**cluster_queue("owned-elsewhere", "1"), "tenant": "globex"},
        token="acme/tenant-admin",
    ),
    Case(
        "token-expiry-negative",
        "POST",
        "/v1/tokens",
        422,
        "expiresIn",
        json={"name": "t", "expiresIn": -1},
    ),
    Case(
        "token-expiry-huge",
        "POST",
        "/v1/tokens",
        422,
        "expiresIn",
        json={"name": "t", "expiresIn": 10**40},
    ),
    Case("token-name-empty", "POST", "/v1/tokens", 422, "name", json={"name": ""}),
    # fleet
    Case("node-duplicate", "POST", "/v1/nodes", 409, None, json=node_entry("node-1")),
    Case(
        "node-gpu-count-negative",
        "POST",
        "/v1/nodes",
        422,
        "gpus.count",
        json={**node_entry("n-neg"), "gpus": {"model": "H100-80GB", "count": -1}},
    ),
    Case(
        "node-count-huge",
        "POST",
        "/v1/nodes",
        422,
        "count",
        json={**node_entry("n-{i}"), "count": 10**12},
    ),
    Case("node-body-list", "POST", "/v1/nodes", 422, None, json=[node_entry("n-list")]),
    Case(
        "node-name-unicode",
        "POST",
        "/v1/nodes",
        422,
        "name",
        json=node_entry("nöde"),
    ),
    # governance
    Case("flavor-duplicate", "POST", "/v1/flavors", 409, "name", json={"name": "gpu", "spec": {}}),
    Case(
        "flavor-name-unicode",
        "POST",
        "/v1/flavors",
        422,
        "name",
        json={"name": "grafikkärte", "spec": {}},
    ),
    Case(
        "flavor-unknown-field",
        "POST",
        "/v1/flavors",
        422,
        "colour",
        json={"name": "tinted", "spec": {}, "colour": "red"},
    ),
    Case(
        "flavor-unknown-spec-field",
        "POST",
        "/v1/flavors",
        422,
        "spec.nodeLabelz",
        json={"name": "tinted", "spec": {"nodeLabelz": {"a": "b"}}},
    ),
    Case(
        "flavor-label-value-number",  # in JSON a label value is a string, as the schema says
        "POST",
        "/v1/flavors",
        422,
        "spec.nodeLabels.gpu",
        json={"name": "tinted", "spec": {"nodeLabels": {"gpu": 4090}}},
    ),
    Case(
        "flavor-taint-effect",
        "POST",
        "/v1/flavors",
        422,
        "spec.nodeTaints[0].effect",
        json={"name": "tinted", "spec": {"nodeTaints": [{"key": "a", "effect": "Never"}]}},
    ),
    Case(
        "flavor-unknown-topology",  # a valid spec naming a Topology that does not exist
        "POST",
        "/v1/flavors",
        404,
        "spec.topologyName",
        json={"name": "tinted", "spec": {"topologyName": "no-such-topology"}},
    ),
    # the typed Kueue and HardwareProfile specs (models/kueue_specs.py): the document's rules
    Case(
        "cluster-queue-gpu-fraction",  # a GPU is counted in whole units
        "POST",
        "/v1/tenants/acme/cluster-queues",
        422,
        "spec.resourceGroups[0].flavors[0].resources[0]",
        json=cluster_queue("halves", "1.5"),
    ),
    Case(
        "cluster-queue-quota-not-a-quantity",
        "POST",
        "/v1/cluster-queues",
        422,
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        json=cluster_queue("wordy", "lots"),
    ),
    Case(
        "cluster-queue-stop-policy",  # holding a queue is the service's
        "POST",
        "/v1/cluster-queues",
        422,
        "spec.stopPolicy",
        json={"name": "held", "spec": {"stopPolicy": "Hold"}},
    ),
    Case(
        "cluster-queue-unknown-kueue-field",
        "POST",
        "/v1/tenants/acme/cluster-queues",
        422,
        "spec.admissionChecks",
        json={"name": "checked", "spec": {"admissionChecks": ["a"]}},
    ),
    Case(
        "cluster-queue-preference-without-try-next",
        "POST",
        "/v1/cluster-queues",
        422,
        "spec.flavorFungibility",
        json={
            "name": "fussy",
            "spec": {"flavorFungibility": {"preference": "BorrowingOverPreemption"}},
        },
    ),
    Case(
        "cohort-parent-not-a-name",
        "POST",
        "/v1/cohorts",
        422,
        "spec.parentName",
        json={"name": "orphan", "spec": {"parentName": "Not A Name"}},
    ),
    Case(
        "profile-without-display-name",
        "POST",
        "/v1/hardware-profiles",
        422,
        "spec.displayName",
        json={
            "name": "bare",
            "spec": {
                "localQueue": "q",
                "resources": [{"name": "nvidia.com/gpu", "min": 1, "default": 1}],
            },
        },
    ),
    Case(
        "profile-resource-boolean",
        "POST",
        "/v1/tenants/acme/hardware-profiles",
        422,
        "spec.resources[0].default",
        json={
            "name": "bool",
            "spec": {
                "displayName": "b",
                "localQueue": "q",
                "resources": [{"name": "nvidia.com/gpu", "min": 1, "default": True}],
            },
        },
    ),
    Case(
        "price-sku-grammar",
        "POST",
        "/v1/prices",
        422,
        "sku",
        json={**price_body("bad-sku"), "sku": "H100"},
    ),
    Case(
        "price-currency-unknown",
        "POST",
        "/v1/prices",
        422,
        "currency",
        json={**price_body("bad-currency"), "currency": "XYZ"},
    ),
    Case(
        "price-valid-from-not-a-day",  # February 30 is no time
        "POST",
        "/v1/prices",
        422,
        "validFrom",
        json={**price_body("bad-day"), "validFrom": "2026-02-30"},
    ),
    Case(
        "job-volume-read-only-number",  # true or false, not 1
        "POST",
        JOBS,
        422,
        "volumes[0].readOnly",
        json={
            "name": "ro",
            "command": ["true"],
            "podSets": [{"resources": {"cpu": "1"}}],
            "volumes": [{"name": "v", "mountPath": "/v", "readOnly": 1}],
        },
        token=USER,
    ),
    Case(
        "user-disabled-yes",
        "PATCH",
        "/v1/users/acme-admin",
        422,
        "disabled",
        json={"disabled": "yes"},
    ),
    Case(
        "priority-value-huge",
        "POST",
        "/v1/priority-classes",
        422,
        "value",
        json={"name": "huge", "value": 2**63},
    ),
    Case(
        "priority-value-string",
        "POST",
        "/v1/priority-classes",
        422,
        "value",
        json={"name": "huge", "value": "high"},
    ),
    Case(
        "local-queue-duplicate",
        "POST",
        "/v1/tenants/acme/local-queues",
        409,
        "name",
        json={"name": "acme-lq", "clusterQueue": "acme-cq"},
    ),
    Case(
        "local-queue-unknown-cq",
        "POST",
        "/v1/tenants/acme/local-queues",
        404,  # a valid body naming a ClusterQueue the tenant has not
        "clusterQueue",
        json={"name": "new-lq", "clusterQueue": "nope"},
    ),
    Case(
        "local-queue-user-limit-negative",
        "POST",
        "/v1/tenants/acme/local-queues",
        422,
        "userLimit",
        json={"name": "new-lq", "clusterQueue": "acme-cq", "userLimit": -1},
    ),
    Case(
        "cluster-queue-over-capacity",
        "POST",
        "/v1/tenants/acme/cluster-queues",
        422,
        None,
        json=cluster_queue("greedy", "100000"),
    ),
    Case(
        "cluster-queue-negative-quota",
        "POST",
        "/v1/tenants/acme/cluster-queues",
        422,
        None,
        json=cluster_queue("negative", "-1"),
    ),
    Case(
        "cluster-queue-duplicate",
        "POST",
        "/v1/tenants/acme/cluster-queues",
        409,
        "name",
        json=cluster_queue("acme-cq"),
    ),
    Case(
        "profile-unknown-queue",
        "POST",
        "/v1/tenants/acme/hardware-profiles",
        422,
        None,
        json=hardware_profile("lost", "no-such-lq"),
    ),
    Case(
        "kueue-import-garbage",
        "POST",
        "/v1/kueue/import",
        422,
        None,
        content=b"kind: [unclosed",
        headers={"content-type": "application/yaml"},
    ),
    Case(
        "kueue-import-xml",
        "POST",
        "/v1/kueue/import",
        415,
        None,
        content=b"<ResourceFlavor/>",
        headers={"content-type": "application/xml"},
    ),
    Case(
        "kueue-import-yaml-as-json",
        "POST",
        "/v1/kueue/import",
        422,
        "body",
        content=b"kind: ResourceFlavor",
        headers={"content-type": "application/json"},
    ),
    Case(
        "kueue-import-over-1-mib",
        "POST",
        "/v1/kueue/import",
        413,
        None,
        content=b"# " + b"x" * MIB,
        headers={"content-type": "application/yaml"},
    ),
    Case(
        "tenant-priority-class-duplicate",
        "POST",
        "/v1/tenants/acme/priority-classes",
        409,
        "name",
        json={"name": "acme-pc", "value": 1},
    ),
    Case(
        "profile-duplicate",
        "POST",
        "/v1/hardware-profiles",
        409,
        "name",
        json=hardware_profile("acme-hp", "acme-lq"),
    ),
    # lone UTF-16 surrogates (valid JSON escapes, not encodable text), deep nesting, long numbers
    raw_job(
        "json-nested-deep",
        422,
        b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        field_name="body",
    ),
    raw_job(
        "json-number-5000-digits", 422, b'{"maxRunTime": ' + b"9" * 5000 + b"}", field_name="body"
    ),
    Case(
        "tenant-display-name-surrogate",
        "PATCH",
        "/v1/tenants/acme",
        422,
        "displayName",
        content=b'{"displayName": "\\ud800"}',
        headers=JSON,
    ),
    raw_job(
        "job-command-surrogate",
        422,
        _job_text(command='["\\ud800"]'),
        field_name="command.0",
    ),
    raw_job(
        "job-idempotency-key-surrogate",
        422,
        _job_text(idempotencyKey='"\\ud800"'),
        field_name="idempotencyKey",
    ),
    raw_job(
        "job-priority-class-surrogate",
        422,
        _job_text(priorityClass='"\\ud800"'),
        field_name="priorityClass",
    ),
    Case(
        "kueue-import-surrogate",
        "POST",
        "/v1/kueue/import",
        422,
        None,
        content=b'kind: ResourceFlavor\nmetadata: {name: "\\ud800"}\n',
        headers=YAML,
    ),
    Case(
        "kueue-import-kind-nul",
        "POST",
        "/v1/kueue/import",
        422,
        None,
        json=[
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "a\u0000b", "metadata": {"name": "k"}}
        ],
    ),
    Case(
        "kueue-import-nested-deep",
        "POST",
        "/v1/kueue/import",
        422,
        "body",
        content=b"- " + b"[" * 50_000 + b"]" * 50_000,
        headers=YAML,
    ),
    # path and query parameters with odd characters or sizes
    # a job's id is a number in its route's path ({job_id:int}): ``abc`` names no job, as -1
    # does not (and ``GET .../jobs/batch`` is then a 405, not a job id that is no number)
    Case("job-id-not-a-number", "GET", f"{JOBS}/abc", 404),
    Case("job-id-negative", "GET", f"{JOBS}/-1", 404),
    Case("job-id-huge", "GET", f"{JOBS}/{10**30}", 404),
    Case("job-id-int64-overflow", "POST", f"{JOBS}/{2**63}/cancel", 404),
    Case("token-id-huge", "DELETE", f"/v1/tokens/{10**30}", 404),
    Case("tenant-nul", "GET", "/v1/tenants/a%00b", 404),
    Case("tenant-unicode", "GET", "/v1/tenants/%C3%A4cme/jobs", 404),
    Case("tenant-long", "GET", "/v1/tenants/" + "a" * 5000, 404),
    Case("tenant-dots", "GET", "/v1/tenants/..%2F..%2Fusers", 404),
    Case("user-nul", "GET", "/v1/users/a%00b", 404),
    Case("node-nul", "GET", "/v1/nodes/a%00b", 404),
    Case("node-unicode", "POST", "/v1/nodes/n%C3%B6de/cordon", 404),
    Case("local-queue-nul", "GET", "/v1/tenants/acme/local-queues/a%00b", 404),
    Case("flavor-nul", "DELETE", "/v1/flavors/a%00b", 404),
    Case("limit-zero", "GET", f"{JOBS}?limit=0", 422, "limit"),
    Case("limit-words", "GET", f"{JOBS}?limit=ten", 422, "limit"),
    Case("limit-huge", "GET", f"{JOBS}?limit={10**30}", 422, "limit"),
    Case("after-not-a-cursor", "GET", f"{JOBS}?after=zzz", 422, "after"),
    Case("state-unknown", "GET", f"{JOBS}?state=Sleeping", 422, "state"),
    Case("nodes-limit-zero", "GET", "/v1/nodes?limit=0", 422, "limit"),
    Case(
        "tenant-display-name-nul",
        "PATCH",
        "/v1/tenants/acme",
        422,
        "displayName",
        json={"displayName": "a\u0000b"},
    ),
    Case(
        "user-display-name-nul",
        "POST",
        "/v1/users",
        422,
        "displayName",
        json={"name": "nul-user", "displayName": "a\u0000b"},
    ),
    Case("token-name-nul", "POST", "/v1/tokens", 422, "name", json={"name": "a\u0000b"}),
    job_case(
        "idempotency-key-nul",
        422,
        "idempotencyKey",
        job_with(idempotencyKey="a\u0000b"),
    ),
    job_case(
        "priority-class-nul",
        422,
        "priorityClass",
        job_with(priorityClass="a\u0000b"),
    ),
    Case(
        "flavor-label-nul",
        "POST",
        "/v1/flavors",
        422,
        None,
        json={"name": "nul-flavor", "spec": {"nodeLabels": {"a": "a\u0000b"}}},
    ),
    Case("jobs-queue-nul", "GET", f"{JOBS}?queue=a%00b", 200),
    Case("jobs-user-nul", "GET", f"{JOBS}?user=a%00b", 200),
    Case("all-jobs-tenant-nul", "GET", "/v1/jobs?tenant=a%00b", 200),
    Case("cqs-tenant-nul", "GET", "/v1/cluster-queues?tenant=a%00b", 200),
    Case("nodes-after-nul", "GET", "/v1/nodes?after=a%00b", 200),
    Case(
        "local-queues-after-nul",
        "GET",
        "/v1/tenants/acme/local-queues?after=a%00b",
        200,
    ),
    Case("jobs-after-huge", "GET", f"{JOBS}?after={10**23}", 422, "after"),
    Case(
        "members-after-huge",
        "GET",
        f"/v1/tenants/acme/members?after={10**23}",
        422,
        "after",
    ),
    Case("tenants-after-nul", "GET", "/v1/tenants?after=%00", 200),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_by_name(
    world: World, case: Case, request: pytest.FixtureRequest
) -> None:
    if case.bug and world.database in case.bug_on:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=case.bug))
    before = world.snapshot() if case.method != "GET" else None
    token = ADMIN_TOKEN if case.token == "admin" else world.tokens[case.token]
    kwargs: dict[str, Any] = {"headers": case.headers}
    if case.content is not None:
        kwargs["content"] = case.content
    elif case.json is not None or case.method in ("POST", "PUT", "PATCH"):
        kwargs["content"] = json.dumps(case.json).encode()
        kwargs["headers"] = {"content-type": "application/json", **(case.headers or {})}
    response = world.call(case.method, case.url, token=token, **kwargs)
    if case.status < 300:
        expect(response, case.status)
    else:
        assert_problem(response, case.status, case.field)
    if before is not None:
        assert world.snapshot() == before, "a rejected write changed stored data"


# --------------------------------------------------------------------------------------------
# Generated garbage for every write route of the OpenAPI document.


#: Path parameters for each write route, all naming objects of the junk tenant or the junk
#: platform objects (a garbage body that happens to be valid changes nothing else).
PATH_ARGS: dict[str, tuple[str, ...]] = {
    "POST /v1/tenants": (),
    "PATCH /v1/tenants/{}": ("junk",),
    "POST /v1/users": (),
    "PATCH /v1/users/{}": ("junk-user",),
    "PUT /v1/tenants/{}/members/{}": ("junk", "junk-member"),
    "POST /v1/tenants/{}/members/{}/tokens": ("junk", "junk-tenant-user"),
    "POST /v1/tokens": (),
    "POST /v1/users/{}/tokens": ("junk-user",),
    "POST /v1/tenants/{}/invitations/{}/accept": ("junk", "junk-user"),
    "POST /v1/nodes": (),
    "POST /v1/nodes/{}/cordon": ("junk-node",),
    "POST /v1/nodes/{}/uncordon": ("junk-node",),
    "POST /v1/nodes/{}/drain": ("junk-node",),
    "PUT /v1/nodes/{}/partition": ("junk-node",),
    "POST /v1/flavors": (),
    "PUT /v1/flavors/{}": ("junk-flavor",),
    "POST /v1/cohorts": (),
    "PUT /v1/cohorts/{}": ("junk-cohort",),
    "POST /v1/cluster-queues": (),
    "PUT /v1/cluster-queues/{}": ("junk-global-cq",),
    "POST /v1/priority-classes": (),
    "PUT /v1/priority-classes/{}": ("junk-pc",),
    "POST /v1/hardware-profiles": (),
    "PUT /v1/hardware-profiles/{}": ("junk-global-hp",),
    "POST /v1/kueue/import": (),
    "POST /v1/kai/import": (),
    "POST /v1/volcano/import": (),
    "PUT /v1/nodes": (),
    "POST /v1/tenants/{}/cluster-queues": ("junk",),
    "PUT /v1/tenants/{}/cluster-queues/{}": ("junk", "junk-cq"),
    "POST /v1/tenants/{}/cohorts": ("junk",),
    "PUT /v1/tenants/{}/cohorts/{}": ("junk", "junk-team"),
    "POST /v1/tenants/{}/local-queues": ("junk",),
    "PUT /v1/tenants/{}/local-queues/{}": ("junk", "junk-lq"),
    "POST /v1/tenants/{}/priority-classes": ("junk",),
    "PUT /v1/tenants/{}/priority-classes/{}": ("junk", "junk-pc"),
    "POST /v1/tenants/{}/hardware-profiles": ("junk",),
    "PUT /v1/tenants/{}/hardware-profiles/{}": ("junk", "junk-hp"),
    "POST /v1/tenants/{}/volumes": ("junk",),
    "PUT /v1/tenants/{}/volumes/{}": ("junk", "junk-vol"),
    "POST /v1/tenants/{}/jobs": ("junk",),
    "POST /v1/tenants/{}/jobs/batch": ("junk",),
    "POST /v1/tenants/{}/jobs/{}/cancel": ("junk", "{job}"),
    "POST /v1/tenants/{}/clusters": ("junk",),
    "POST /v1/tenants/{}/clusters/{}/scale": ("junk", "junk-cluster"),
    "PUT /v1/tenants/{}/cluster-allowance": ("junk",),
    "POST /v1/tenants/{}/datasets": ("junk",),
    "POST /v1/prices": (),
    "PUT /v1/prices/{}": ("junk-price",),
    "POST /v1/tenants/{}/prices": ("junk",),
    "PUT /v1/tenants/{}/prices/{}": ("junk", "junk-price"),
    "PUT /v1/tenants/{}/datasets/{}": ("junk", "junk-ds"),
    "POST /v1/tenants/{}/datasets/{}/preload": ("junk", "junk-ds"),
    "POST /v1/idle-pools": (),
    "PUT /v1/idle-pools/{}": ("junk-pool",),
    "POST /v1/tenants/{}/budgets": ("junk",),
    "PUT /v1/tenants/{}/budgets/{}": ("junk", "junk-budget"),
    "POST /v1/tenants/{}/invoices/{}/lines": ("junk", "2000-01"),
    "POST /v1/tenants/{}/invoices/{}/close": ("junk", "2000-02"),
}

#: A valid body per route: garbage is made by breaking one part of it (or from nothing).
VALID: dict[str, Any] = {
    "POST /v1/tenants": {
        **tenant_body("fresh-tenant"),
        "parentCohort": "junk-cohort",
        "borrowing": {"gpu": {"nvidia.com/gpu": "8"}},
        "lending": {"gpu": {"nvidia.com/gpu": "4"}},
        "maxJob": {"nvidia.com/gpu": 16},
        "priorityCeiling": 50,
        "storageQuota": "1Ti",
    },
    "PATCH /v1/tenants/{}": {
        "displayName": "Junk",
        "capacity": tenant_body("x")["capacity"],
        "maxJob": {"nvidia.com/gpu": "32"},
        "priorityCeiling": 20,
        "storageQuota": "2Ti",
    },
    "POST /v1/users": {"name": "fresh-user", "displayName": "F", "platformRole": "viewer"},
    "PATCH /v1/users/{}": {"displayName": "J", "platformRole": None, "disabled": False},
    "PUT /v1/tenants/{}/members/{}": {"role": "viewer"},
    "POST /v1/tenants/{}/members/{}/tokens": {"name": "t", "expiresIn": 3600},
    "POST /v1/tokens": {"name": "t", "expiresIn": 3600},
    "POST /v1/users/{}/tokens": {"name": "t", "expiresIn": 3600},
    "POST /v1/nodes": node_entry("fresh-node"),
    "PUT /v1/nodes/{}/partition": {"partitioning": "whole"},
    "POST /v1/flavors": {"name": "fresh-flavor", "spec": {"nodeLabels": {"a": "b"}}},
    "PUT /v1/flavors/{}": {"name": "junk-flavor", "spec": {"nodeLabels": {"a": "b"}}},
    "POST /v1/cohorts": {"name": "fresh-cohort", "spec": {"parentName": "junk-cohort"}},
    "PUT /v1/cohorts/{}": {"name": "junk-cohort", "spec": {}},
    "POST /v1/cluster-queues": {**cluster_queue("fresh-cq", "1"), "tenant": "junk"},
    "PUT /v1/cluster-queues/{}": cluster_queue("junk-global-cq"),
    "POST /v1/priority-classes": {"name": "fresh-pc", "value": 5, "description": "d"},
    "PUT /v1/priority-classes/{}": {"name": "junk-pc", "value": 5},
    "POST /v1/hardware-profiles": hardware_profile("fresh-hp", "junk-lq", ["junk"]),
    "PUT /v1/hardware-profiles/{}": hardware_profile("junk-global-hp", "junk-lq", ["junk"]),
    "POST /v1/kai/import": [
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "fresh-kai"},
            "spec": {"parentQueue": "junk-cohort", "resources": {"gpu": {"quota": 0}}},
        }
    ],
    "POST /v1/volcano/import": [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "fresh-volcano"},
            "spec": {"parent": "junk-cohort", "weight": 2},
        }
    ],
    "PUT /v1/nodes": node_entry("fresh-put-node"),
    "POST /v1/kueue/import": [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "fresh-imported"},
            "spec": {},
        }
    ],
    "POST /v1/tenants/{}/cluster-queues": cluster_queue("fresh-tenant-cq", "1"),
    "PUT /v1/tenants/{}/cluster-queues/{}": cluster_queue("junk-cq", "8"),
    "POST /v1/tenants/{}/cohorts": {"name": "fresh-team", "spec": {"parentName": "junk-team"}},
    "PUT /v1/tenants/{}/cohorts/{}": {"name": "junk-team", "spec": {"parentName": "junk"}},
    "POST /v1/tenants/{}/local-queues": {"name": "fresh-lq", "clusterQueue": "junk-cq"},
    "PUT /v1/tenants/{}/local-queues/{}": {"clusterQueue": "junk-cq", "userLimit": 2},
    "POST /v1/tenants/{}/priority-classes": {"name": "fresh-tenant-pc", "value": 5},
    "PUT /v1/tenants/{}/priority-classes/{}": {"value": 5},
    "POST /v1/tenants/{}/hardware-profiles": hardware_profile("fresh-tenant-hp", "junk-lq"),
    "PUT /v1/tenants/{}/hardware-profiles/{}": hardware_profile("junk-hp", "junk-lq"),
    "POST /v1/tenants/{}/volumes": {
        "name": "fresh-vol",
        "size": "2Mi",
        "accessMode": "ReadWriteMany",
    },
    "PUT /v1/tenants/{}/volumes/{}": {"name": "junk-vol", "size": "3Mi"},
    "POST /v1/tenants/{}/clusters": {
        "name": "fresh-cluster",
        "kind": "baremetal",
        "pools": [{"name": "p", "flavor": "junk-flavor", "count": 1, "min": 0, "max": 2}],
        "sshKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIjunk junk@example"],
    },
    "POST /v1/tenants/{}/clusters/{}/scale": {"pools": [{"name": "p", "count": 2}]},
    "PUT /v1/tenants/{}/cluster-allowance": {
        "flavors": ["junk-flavor"],
        "gpuModels": ["H100"],
        "nodeLimit": 0,
    },
    "POST /v1/tenants/{}/datasets": {
        "name": "fresh-ds",
        "uri": "s3://bucket/fresh",
        "size": "2Ti",
        "runtime": "juicefs",
        "cacheSize": "100Gi",
    },
    "PUT /v1/tenants/{}/datasets/{}": {"uri": "hdfs://namenode/junk", "size": 1024},
    "POST /v1/prices": price_body("fresh-price", 1_800_000_000),
    "PUT /v1/prices/{}": price_body("junk-price", 1_700_000_000),
    "POST /v1/tenants/{}/prices": price_body("fresh-price", 1_800_000_000),
    "PUT /v1/tenants/{}/prices/{}": price_body("junk-price", 1_700_000_000),
    "POST /v1/tenants/{}/datasets/{}/preload": {"nodes": ["junk-node"]},
    "POST /v1/idle-pools": {"name": "fresh-pool", "tenant": "fresh-mp", "graceSeconds": 60},
    "PUT /v1/idle-pools/{}": {"name": "junk-pool", "tenant": "junk-mp", "graceSeconds": 60},
    "POST /v1/tenants/{}/budgets": {"name": "junk-b", "amount": "10", "thresholds": [50]},
    "PUT /v1/tenants/{}/budgets/{}": {"amount": "20"},
    "POST /v1/tenants/{}/invoices/{}/lines": {"kind": "credit", "amount": "1", "description": "x"},
    "POST /v1/tenants/{}/jobs/batch": {
        "jobs": [job_spec("fresh-batch-job", "junk-lq"), job_spec("another-batch-job", "junk-lq")]
    },
    "POST /v1/tenants/{}/jobs": {
        **job_spec("fresh-job", "junk-lq"),
        "priorityClass": "junk-pc",
        "maxRunTime": 60,
        "podSets": [
            {
                "name": "w",
                "count": 2,
                "resources": {"nvidia.com/gpu": 1, "cpu": "4"},
                "topology": {"level": "rack", "mode": "preferred"},
            }
        ],
        "volumes": [{"name": "junk-vol", "mountPath": "/data", "readOnly": True}],
    },
}


def _write_routes() -> list[str]:
    app = create_app(_settings("sqlite:///:memory:", Path("/nonexistent")))
    return sorted(
        f"{method.upper()} {re.sub(r'{[^}]*}', '{}', path)}"
        for path, item in app.openapi()["paths"].items()
        for method in item
        if method in ("post", "put", "patch")
    )


WRITE_ROUTES = _write_routes()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["", "\u0000", "\ud800", "é" * 300, "-1", "1e400", "NaN", "a" * 5000])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def broken(draw: st.DrawFn, valid: Any) -> Any:
    """``valid`` with one value somewhere replaced, removed, or joined by an unknown key."""
    body = json.loads(json.dumps(valid))
    node = body
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        child = node[draw(st.sampled_from(keys))]
        if not isinstance(child, (dict, list)) or not child:
            break
        node = child
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "replace":
            node[key] = draw(json_values)
        elif action == "remove":
            del node[key]
        else:
            node[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
    elif isinstance(node, list) and node:
        node[draw(st.integers(0, len(node) - 1))] = draw(json_values)
    return body


def garbage(valid: Any) -> st.SearchStrategy[bytes]:
    as_json = st.one_of(broken(valid), json_values) if valid is not None else json_values
    return as_json.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=64)


@pytest.mark.parametrize("route", WRITE_ROUTES)
def test_garbage_never_breaks_a_write_route(world: World, route: str) -> None:
    assert route in PATH_ARGS, f"{route}: give it path parameters in PATH_ARGS"
    method, path = route.split(" ", 1)
    args = [str(world.jobs["junk"]) if a == "{job}" else a for a in PATH_ARGS[route]]
    url = path.format(*args)
    state = {"before": world.snapshot()}

    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(payload=garbage(VALID.get(route)))
    def send(payload: bytes) -> None:
        headers = {"content-type": "application/json"}
        response = world.call(method, url, content=payload, headers=headers)
        where = f"{route} with {payload[:200]!r}"
        assert response.status_code < 500, f"{where} -> {response.status_code} {response.text}"
        if response.status_code < 400:
            state["before"] = world.snapshot()
            return
        assert response.headers["content-type"].startswith(PROBLEM), where
        problem = response.json()
        assert problem["status"] == response.status_code and problem["detail"], where
        assert world.snapshot() == state["before"], f"{where} was refused but changed data"

    send()


def _routes_with_a_body() -> set[str]:
    app = create_app(_settings("sqlite:///:memory:", Path("/nonexistent")))
    return {
        f"{method.upper()} {re.sub(r'{[^}]*}', '{}', path)}"
        for path, item in app.openapi()["paths"].items()
        for method, operation in item.items()
        if "requestBody" in operation
    } | {"POST /v1/kueue/import"}  # reads its body itself (YAML or JSON)


TAKES_A_BODY = _routes_with_a_body()


@pytest.mark.parametrize("route", WRITE_ROUTES)
def test_every_write_route_refuses_broken_bodies(world: World, route: str) -> None:
    """Over the size limit: 413 before anything is read; not JSON at all: 422 naming the body
    (routes that take no body ignore it); and nothing stored either way."""
    method, path = route.split(" ", 1)
    args = [str(world.jobs["junk"]) if a == "{job}" else a for a in PATH_ARGS[route]]
    url = path.format(*args)
    before = world.snapshot()
    too_big = world.call(method, url, content=b"[" + b"0," * MIB + b"0]", headers=JSON)
    assert_problem(too_big, 413, None)
    if route in TAKES_A_BODY:
        assert_problem(world.call(method, url, content=b'{"name": "x",', headers=JSON), 422, None)
    assert world.snapshot() == before
