"""The Python SDK against the real app, in process (FastAPI's TestClient is an httpx.Client)."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from gpuaas.client import (
    ApiError,
    AsyncClient,
    Client,
    ConfigError,
    Page,
    load_credentials,
    save_credentials,
)
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

ADMIN = "gpa_sdk-admin-token-0123456789abcdef"
FLEET = {
    "apiVersion": "gpuaas.io/v1",
    "kind": "Fleet",
    "nodes": [
        {
            "name": "gpu-{i:02}",
            "count": 3,
            "cpu": "64",
            "memory": "512Gi",
            "gpus": {"model": "H100-80GB", "count": 8},
            "labels": {"gpuaas.io/pool": "sdk"},
        }
    ],
}
CQ_SPEC = {
    "namespaceSelector": {},
    "resourceGroups": [
        {
            "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
            "flavors": [
                {
                    "name": "h100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": 24},
                        {"name": "cpu", "nominalQuota": 192},
                        {"name": "memory", "nominalQuota": "1536Gi"},
                    ],
                }
            ],
        }
    ],
}


@pytest.fixture
def http(sqlite_url: str, tmp_path: Path) -> Iterator[TestClient]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(FLEET), encoding="utf-8")
    settings = Settings(
        db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN, fleet=fleet
    )
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def admin(http: TestClient) -> Client:
    return Client.from_httpx(http, ADMIN)


def make_tenant(admin: Client, name: str = "acme") -> str:
    """A tenant with a queue and a tenant-user; returns that user's token."""
    admin.create_flavor("h100", {"nodeLabels": {"gpuaas.io/pool": "sdk"}})
    capacity = {"h100": {"nvidia.com/gpu": "24", "cpu": "192", "memory": "1536Gi"}}
    admin.create_tenant(name, capacity=capacity)
    admin.create_cluster_queue("acme-cq", CQ_SPEC, owner=name)
    admin.create_local_queue("default", "acme-cq", tenant=name)
    admin.set_member(name, "alice", "tenant-user")
    return str(admin.create_member_token(name, "alice", "laptop")["token"])


def job(name: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "kind": "batch",
        "queue": "default",
        "command": ["true"],
        "podSets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}],
        **extra,
    }


def test_whoami_and_tenant_crud(admin: Client) -> None:
    who = admin.whoami()
    assert who["platformRole"] == "provider-admin"
    created = admin.create_tenant("acme", display_name="Acme", capacity={"h100": {"cpu": "8"}})
    assert created["name"] == "acme" and created["displayName"] == "Acme"
    assert admin.update_tenant("acme", display_name="Acme Corp")["displayName"] == "Acme Corp"
    assert admin.get_tenant("acme")["displayName"] == "Acme Corp"
    admin.delete_tenant("acme")
    with pytest.raises(ApiError) as err:
        admin.get_tenant("acme")
    assert err.value.status == 404


def test_pages_and_iterators_cover_every_item(admin: Client) -> None:
    names = [f"t{i}" for i in range(7)]
    for name in names:
        admin.create_tenant(name)
    first = admin.list_tenants(limit=3)
    assert len(first.items) == 3 and first.next
    second = admin.list_tenants(limit=3, after=first.next)
    assert {t["name"] for t in first.items}.isdisjoint(t["name"] for t in second.items)
    assert sorted(t["name"] for t in admin.iter_tenants()) == names


def test_problem_documents_become_api_errors_naming_the_field(admin: Client) -> None:
    with pytest.raises(ApiError) as err:
        admin.create_tenant("Not A DNS Name!")
    assert err.value.status == 422
    assert err.value.errors and err.value.errors[0]["field"]
    assert err.value.detail
    with pytest.raises(ApiError) as err:
        admin.list_tenants(limit=5000)
    assert err.value.status == 422
    assert any(e["field"] == "limit" for e in err.value.errors)


def test_bad_token_is_401(http: TestClient) -> None:
    with pytest.raises(ApiError) as err:
        Client.from_httpx(http, "gpa_nope").whoami()
    assert err.value.status == 401


def test_members_and_tokens(admin: Client, http: TestClient) -> None:
    token = make_tenant(admin)
    alice = Client.from_httpx(http, token)
    assert alice.whoami()["tenants"] == [{"tenant": "acme", "role": "tenant-user"}]
    members = {m["user"]: m["role"] for m in admin.iter_members("acme")}
    assert members == {"alice": "tenant-user"}
    own = alice.create_token("ci", expires_in=3600)
    assert own["token"] and own["name"] == "ci"
    assert {t["name"] for t in alice.iter_tokens()} >= {"ci", "laptop"}
    alice.revoke_token(own["id"])
    with pytest.raises(ApiError) as err:
        Client.from_httpx(http, own["token"]).whoami()
    assert err.value.status == 401
    admin.remove_member("acme", "alice")  # revokes the token minted for her in acme
    with pytest.raises(ApiError) as err:
        alice.list_jobs("acme")
    assert err.value.status == 401


def test_nodes_cordon_and_drain(admin: Client) -> None:
    nodes = list(admin.iter_nodes())
    assert [n["name"] for n in nodes] == ["gpu-01", "gpu-02", "gpu-03"]
    assert admin.list_nodes(limit=2).next
    assert admin.cordon_node("gpu-01")["cordoned"] is True
    assert [n["name"] for n in admin.iter_nodes(cordoned=True)] == ["gpu-01"]
    assert admin.uncordon_node("gpu-01")["cordoned"] is False
    assert admin.drain_node("gpu-02")["draining"] is True
    assert admin.get_node("gpu-03")["gpuCount"] == 8


def test_jobs_submit_list_pages_cancel_and_events(admin: Client, http: TestClient) -> None:
    alice = Client.from_httpx(http, make_tenant(admin))
    ids = [alice.submit_job("acme", job(f"j{i}"))["id"] for i in range(7)]
    page = alice.list_jobs("acme", limit=3)
    assert len(page.items) == 3 and page.next
    assert [j["id"] for j in alice.iter_jobs("acme", page_size=3)] == ids
    again = alice.submit_job("acme", job("k", idempotencyKey="k-1"))
    assert alice.submit_job("acme", job("k", idempotencyKey="k-1"))["id"] == again["id"]
    assert alice.get_job("acme", ids[0])["name"] == "j0"
    alice.cancel_job("acme", ids[0])
    events = alice.job_events("acme", ids[0])
    assert events and all("toState" in e for e in events)
    assert {w["id"] for w in alice.iter_workloads("acme")} >= set(ids[1:])
    assert len(list(admin.iter_all_jobs(tenant="acme"))) == 8


def test_governance_listing_and_kueue_export(admin: Client) -> None:
    make_tenant(admin)
    assert [f["name"] for f in admin.iter_flavors()] == ["h100"]
    assert [q["name"] for q in admin.iter_cluster_queues()] == ["acme-cq"]
    assert admin.get_local_queue("default", tenant="acme")["clusterQueue"] == "acme-cq"
    assert admin.get_flavor("h100")["spec"]["nodeLabels"] == {"gpuaas.io/pool": "sdk"}
    admin.create_priority_class("high", 500, description="important")
    assert admin.get_priority_class("high")["value"] == 500
    assert admin.update_priority_class("high", 600)["value"] == 600
    assert [p["name"] for p in admin.iter_priority_classes(tenant="acme")] == ["high"]
    admin.delete_priority_class("high")
    assert list(admin.iter_priority_classes()) == []
    exported = admin.export_kueue()
    kinds = {d["kind"] for d in yaml.safe_load_all(exported) if d}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds


def test_a_transport_can_be_plugged_in() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer secret"
        if request.url.path == "/v1/whoami":
            return httpx.Response(200, json={"user": "u", "platformRole": None, "tenants": []})
        return httpx.Response(
            409,
            json={"title": "Conflict", "status": 409, "detail": "node busy"},
            headers={"content-type": "application/problem+json"},
        )

    with Client("http://gpuaas.test", "secret", transport=httpx.MockTransport(answer)) as c:
        assert c.whoami()["user"] == "u"
        with pytest.raises(ApiError) as err:
            c.delete_node("n1")
    assert (err.value.status, err.value.detail, err.value.errors) == (409, "node busy", [])


def test_config_file_is_private_and_env_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cfg" / "config.json"
    monkeypatch.setenv("GPUAAS_CONFIG", str(path))
    monkeypatch.delenv("GPUAAS_URL", raising=False)
    monkeypatch.delenv("GPUAAS_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="gpuaas login"):
        load_credentials()
    assert save_credentials("http://a:1", "tok") == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_credentials().url == "http://a:1"
    monkeypatch.setenv("GPUAAS_URL", "http://b:2")
    monkeypatch.setenv("GPUAAS_TOKEN", "other")
    creds = load_credentials()
    assert (creds.url, creds.token) == ("http://b:2", "other")


def test_async_client_submits_concurrently(admin: Client, http: TestClient) -> None:
    token = make_tenant(admin)

    async def submit_ten() -> tuple[list[int], Page]:
        transport = httpx.ASGITransport(app=http.app)
        async with AsyncClient("http://sdk.test", token, transport=transport) as gpu:
            assert (await gpu.whoami())["user"] == "alice"
            made = await asyncio.gather(
                *(gpu.submit_job("acme", job(f"a{i}", idempotencyKey=f"a{i}")) for i in range(10))
            )
            with pytest.raises(ApiError) as err:
                await gpu.get_job("acme", 10**9)
            assert err.value.status == 404
            return [j["id"] for j in made], await gpu.list_jobs("acme", limit=1000)

    ids, page = asyncio.run(submit_ten())
    assert len(set(ids)) == 10
    assert sorted(j["id"] for j in page.items) == sorted(ids)


def test_submit_jobs_is_all_or_none_and_errors_name_the_document(
    admin: Client, http: TestClient
) -> None:
    alice = Client.from_httpx(http, make_tenant(admin))
    bad = job("typo", podSets=[{"name": "main", "resources": {"amd.com/gpu": 1}}])
    with pytest.raises(ApiError) as err:
        alice.submit_jobs("acme", [job("a", idempotencyKey="a"), bad])
    assert err.value.status == 422
    assert [(e["document"], e["name"], e["field"]) for e in err.value.errors] == [
        (1, "typo", "podSets[0].resources.amd.com/gpu")
    ]
    assert alice.list_jobs("acme").items == []
    checked = alice.submit_jobs("acme", [job("a", idempotencyKey="a")], dry_run=True)
    assert checked["dryRun"] is True and alice.list_jobs("acme").items == []
    first = alice.submit_jobs("acme", [job("a", idempotencyKey="a")])["items"]
    both = alice.submit_jobs("acme", [job("a", idempotencyKey="a"), job("b", idempotencyKey="b")])
    assert [i["created"] for i in both["items"]] == [False, True]
    assert both["items"][0]["job"]["id"] == first[0]["job"]["id"]
    assert len(alice.list_jobs("acme").items) == 2
