"""Volumes through the API: create, read, grow, delete; the tenant's storage quota; bad input
(each a 4xx naming the field, nothing half-created); the cluster service's entry points."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from conftest import Api
from gpuaas.model.cluster import VolumeSpec
from gpuaas.service.errors import ApiError
from gpuaas.service.settings import Settings
from gpuaas.service.storage import delete_cluster_volumes, provision_cluster_volumes
from gpuaas.store.tables import Job, Tenant, VolumeRow

MI = 1 << 20


def make_tenant(api: Api, name: str = "acme", quota: str | None = "10Mi") -> None:
    body = {"name": name, **({"storageQuota": quota} if quota is not None else {})}
    r = api.post("/v1/tenants", json=body)
    assert r.status_code == 201, r.text


def create(api: Api, name: str, size: str, **extra: str) -> int:
    body = {"name": name, "size": size, **extra}
    return api.post("/v1/tenants/acme/volumes", json=body).status_code


def volumes(api: Api, tenant: str = "acme") -> list[dict]:
    r = api.get(f"/v1/tenants/{tenant}/volumes")
    assert r.status_code == 200, r.text
    return r.json()["items"]


def test_create_read_grow_and_delete_a_local_volume(sqlite_api: Api, tmp_path: Path) -> None:
    api = sqlite_api
    make_tenant(api)
    assert api.get("/v1/tenants/acme").json()["storageQuota"] == 10 * MI
    r = api.post("/v1/tenants/acme/volumes", json={"name": "data", "size": "2Mi"})
    assert r.status_code == 201, r.text
    vol = r.json()
    assert vol["state"] == "Ready" and vol["reason"]["code"] == "Provisioned"
    assert vol["sizeBytes"] == 2 * MI and vol["storageClass"] == "local"
    assert vol["accessMode"] == "ReadWriteOnce" and vol["cluster"] is None
    path = Path(vol["path"])
    assert path == tmp_path / "volumes" / "acme" / "data" and path.is_dir()
    (path / "f").write_bytes(b"x" * 8192)
    got = api.get("/v1/tenants/acme/volumes/data").json()
    assert got["usedBytes"] >= 8192
    r = api.put("/v1/tenants/acme/volumes/data", json={"size": "3Mi"})
    assert r.status_code == 200, r.text
    assert r.json()["sizeBytes"] == 3 * MI and r.json()["reason"]["code"] == "Resized"
    assert [v["name"] for v in volumes(api)] == ["data"]
    assert api.delete("/v1/tenants/acme/volumes/data").status_code == 204
    assert not path.exists() and volumes(api) == []
    assert api.get("/v1/tenants/acme/volumes/data").status_code == 404


def test_a_full_measured_volume_refuses_read_write_mounts(sqlite_api: Api) -> None:
    api = sqlite_api
    make_tenant(api)
    vol = api.post("/v1/tenants/acme/volumes", json={"name": "tiny", "size": "64Ki"}).json()
    (Path(vol["path"]) / "big").write_bytes(b"x" * (128 << 10))
    got = api.get("/v1/tenants/acme/volumes/tiny").json()
    assert got["state"] == "Ready" and got["reason"]["code"] == "Full", got


def test_the_quota_refuses_a_volume_beyond_it_naming_size_and_the_amounts(sqlite_api: Api) -> None:
    api = sqlite_api
    make_tenant(api, quota="5Mi")
    assert create(api, "a", "3Mi") == 201
    r = api.post("/v1/tenants/acme/volumes", json={"name": "b", "size": "3Mi"})
    assert r.status_code == 409, r.text  # valid, but the tenant's volumes leave no room
    problem = r.json()
    assert problem["detail"].startswith("size:")
    assert str(5 * MI) in problem["detail"] and str(6 * MI) in problem["detail"]
    assert [v["name"] for v in volumes(api)] == ["a"]  # nothing half-created
    r = api.put("/v1/tenants/acme/volumes/a", json={"size": "6Mi"})
    assert r.status_code == 409 and r.json()["detail"].startswith("size:")
    assert api.get("/v1/tenants/acme/volumes/a").json()["sizeBytes"] == 3 * MI
    # the provider raises the quota; then removes it
    assert api.patch("/v1/tenants/acme", json={"storageQuota": "6Mi"}).status_code == 200
    assert create(api, "b", "3Mi") == 201
    assert api.patch("/v1/tenants/acme", json={"storageQuota": None}).json()["storageQuota"] is None
    assert create(api, "c", "1Gi") == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad_Name", "size": "1Mi"}, "name"),
        ({"name": "v", "size": "lots"}, "size"),
        ({"name": "v", "size": "0"}, "size"),
        ({"name": "v", "size": -5}, "size"),
        ({"name": "v", "size": "1Mi", "accessMode": "ReadWriteSometimes"}, "accessMode"),
        ({"name": "v", "size": "1Mi", "cluster": "Not A Label"}, "cluster"),
        ({"name": "v"}, "size"),
        ({"name": "v", "size": "1000000000Gi"}, "size"),  # past the pattern's 9 digits
        ({"name": "v", "size": "8Ei"}, "size"),  # 2**63 bytes
        ({"name": "v", "size": 2**63}, "size"),
    ],
)
def test_bad_volumes_are_422s_naming_the_field(sqlite_api: Api, body: dict, field: str) -> None:
    make_tenant(sqlite_api)
    r = sqlite_api.post("/v1/tenants/acme/volumes", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text
    assert volumes(sqlite_api) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "v", "size": "1Mi", "storageClass": "gold"}, "storageClass"),
        ({"name": "v", "size": "1Mi", "cluster": "nowhere"}, "cluster"),
    ],
)
def test_unknown_classes_and_clusters_are_404s_naming_the_field(
    sqlite_api: Api, body: dict, field: str
) -> None:
    """The body is valid; what it names does not exist (as a path's unknown object)."""
    make_tenant(sqlite_api)
    r = sqlite_api.post("/v1/tenants/acme/volumes", json=body)
    assert r.status_code == 404, r.text
    assert r.json()["errors"][0]["field"] == field
    assert volumes(sqlite_api) == []


def test_only_size_changes_and_only_upward(sqlite_api: Api) -> None:
    """A valid body the stored volume disagrees with is a 409 naming the field; a name that
    differs from the path's is the body's own error (422)."""
    api = sqlite_api
    make_tenant(api)
    api.post("/v1/tenants/acme/volumes", json={"name": "v", "size": "2Mi"})
    for body, field, status in (
        ({"size": "1Mi"}, "size", 409),
        ({"size": "2Mi", "accessMode": "ReadWriteMany"}, "accessMode", 409),
        ({"size": "2Mi", "cluster": "c1"}, "cluster", 409),
        ({"name": "other", "size": "2Mi"}, "name", 422),
    ):
        r = api.put("/v1/tenants/acme/volumes/v", json=body)
        assert r.status_code == status and r.json()["detail"].startswith(f"{field}:"), r.text
    assert create(api, "v", "1Mi") == 409


def test_a_volume_mounted_by_an_unfinished_job_is_not_deleted(sqlite_api: Api) -> None:
    api = sqlite_api
    make_tenant(api)
    flavor = {"name": "gpu", "spec": {}}
    assert api.post("/v1/flavors", json=flavor).status_code == 201
    api.patch("/v1/tenants/acme", json={"capacity": {"gpu": {"cpu": "8", "memory": "8Gi"}}})
    quota = [{"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "8Gi"}]
    groups = [{"coveredResources": ["cpu", "memory"],
               "flavors": [{"name": "gpu", "resources": quota}]}]  # fmt: skip
    cq = {"name": "cq", "spec": {"namespaceSelector": {}, "resourceGroups": groups}}
    assert api.post("/v1/tenants/acme/cluster-queues", json=cq).status_code == 201, "cq"
    lq = {"name": "q", "clusterQueue": "cq"}
    assert api.post("/v1/tenants/acme/local-queues", json=lq).status_code == 201
    api.post("/v1/tenants/acme/volumes", json={"name": "v", "size": "1Mi"})
    job = {
        "name": "j", "queue": "q", "command": ["true"],
        "podSets": [{"resources": {"cpu": "1"}}],
        "volumes": [{"name": "v", "mountPath": "/data"}],
    }  # fmt: skip
    r = api.post("/v1/tenants/acme/jobs", json=job)
    assert r.status_code == 201, r.text
    db = api.client.app.state.db  # type: ignore[attr-defined]
    with db.sessions() as s:
        stored = s.get(Job, r.json()["id"])
        assert stored is not None
        resolved = stored.spec["resolved"]["volumes"]
    assert resolved[0]["name"] == "v" and resolved[0]["path"].endswith("/acme/v")
    r = api.delete("/v1/tenants/acme/volumes/v")
    assert r.status_code == 409 and str(r.json()["detail"]).find("unfinished") > 0
    bad = [
        ({**job, "name": "j2", "volumes": [{"name": "nope", "mountPath": "/d"}]},
         "volumes[0].name"),
        ({**job, "name": "j3", "volumes": [{"name": "v", "mountPath": "rel"}]},
         "volumes[0].mountPath"),
        ({**job, "name": "j4", "volumes": [{"name": "v", "mountPath": "/a/../b"}]},
         "volumes[0].mountPath"),
        ({**job, "name": "j5", "volumes": [{"name": "v", "mountPath": "/a"},
                                           {"name": "v", "mountPath": "/b"}]}, "volumes[1].name"),
        ({**job, "name": "j6", "volumes": [{"name": "cv", "mountPath": "/d"}]}, "volumes[0].name"),
        ({**job, "name": "j7", "volumes": [{"name": "ro", "mountPath": "/d"}]},
         "volumes[0].readOnly"),
    ]  # fmt: skip
    # a volume of a cluster (made by the cluster service; the API refuses an unknown cluster)
    r = api.post("/v1/tenants/acme/volumes", json={"name": "cv", "size": "1Mi", "cluster": "c1"})
    assert r.status_code == 404 and r.json()["errors"][0]["field"] == "cluster", r.text
    db = api.client.app.state.db  # type: ignore[attr-defined]
    settings = api.client.app.state.settings  # type: ignore[attr-defined]
    with db.session() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == "acme"))
        provision_cluster_volumes(s, settings, tenant, "c1", [VolumeSpec("cv", MI)])
    api.post(
        "/v1/tenants/acme/volumes",
        json={"name": "ro", "size": "1Mi", "accessMode": "ReadOnlyMany"},
    )
    for spec, field in bad:
        r = api.post("/v1/tenants/acme/jobs", json=spec)
        assert r.status_code == 422, r.text
        assert field in r.text, r.text


def test_tenant_delete_waits_for_its_volumes(sqlite_api: Api) -> None:
    make_tenant(sqlite_api)
    sqlite_api.post("/v1/tenants/acme/volumes", json={"name": "v", "size": "1Mi"})
    r = sqlite_api.delete("/v1/tenants/acme")
    assert r.status_code == 409 and "volume" in r.text
    sqlite_api.delete("/v1/tenants/acme/volumes/v")
    assert sqlite_api.delete("/v1/tenants/acme").status_code == 204


def test_the_cluster_service_entry_points(sqlite_api: Api, tmp_path: Path) -> None:
    api = sqlite_api
    make_tenant(api, quota="4Mi")
    settings = Settings(db_url="sqlite://", data_dir=tmp_path)
    db = api.client.app.state.db  # type: ignore[attr-defined]
    specs = [VolumeSpec("scratch", 1 * MI), VolumeSpec("home", 2 * MI)]
    with db.session() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == "acme"))
        rows = provision_cluster_volumes(s, settings, tenant, "c1", specs)
        assert [(r.name, r.cluster, r.state) for r in rows] == [
            ("scratch", "c1", "Ready"), ("home", "c1", "Ready")
        ]  # fmt: skip
    assert {v["cluster"] for v in volumes(api)} == {"c1"}
    with db.session() as s, pytest.raises(ApiError) as refused:
        tenant = s.scalar(select(Tenant).where(Tenant.name == "acme"))
        provision_cluster_volumes(s, settings, tenant, "c2", [VolumeSpec("big", 2 * MI)])
    assert refused.value.status == 409 and refused.value.field == "volumes[0].size"
    with db.session() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == "acme"))
        # repeating is idempotent
        provision_cluster_volumes(s, settings, tenant, "c1", specs)
        assert sorted(delete_cluster_volumes(s, settings, tenant, "c1")) == ["home", "scratch"]
    with db.sessions() as s:
        assert s.scalars(select(VolumeRow)).all() == []
    assert not (tmp_path / "volumes" / "acme" / "home").exists()
