"""Every kind x scope x verb of the one resource table through the SDK, against the real app:
create, get, list, update (the change is read back), delete (then 404), all from the table's
generated methods; and the SDK's own argument checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuaas.client import ApiError, Client
from gpuaas.model.api_kinds import BY_CLI, ApiKind
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
from kind_samples import (
    KIND_SCOPES,
    TENANT,
    build_world,
    dig,
    kind_scope_id,
    sample_for,
)

ADMIN = "gpa_sdk-kinds-admin-token-0123456789"


@pytest.fixture
def admin(sqlite_url: str, tmp_path: Path) -> Iterator[Client]:
    settings = Settings(db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN)
    with TestClient(create_app(settings)) as http:
        client = Client.from_httpx(http, ADMIN)
        build_world(client)
        yield client


def method(client: Client, verb: str, kind: ApiKind) -> object:
    name = kind.plural if verb in ("list", "iter") else kind.singular
    return getattr(client, f"{verb}_{name}")


@pytest.mark.parametrize(("kind", "scope"), KIND_SCOPES, ids=kind_scope_id)
def test_every_verb_of_every_kind(admin: Client, kind: ApiKind, scope: str) -> None:
    sample = sample_for(kind, scope)
    tenant = TENANT if scope == "tenant" else None
    where = {"tenant": tenant} if tenant else {}

    made = method(admin, "create", kind)(sample.name, **sample.create, **where)  # type: ignore[operator]
    assert made["name"] == sample.name
    assert method(admin, "get", kind)(sample.name, **where)["name"] == sample.name  # type: ignore[operator]
    page = method(admin, "list", kind)(limit=1000, **where)  # type: ignore[operator]
    assert sample.name in [item["name"] for item in page.items]
    assert sample.name in [item["name"] for item in method(admin, "iter", kind)(**where)]  # type: ignore[operator]

    changed = method(admin, "update", kind)(sample.name, **sample.update, **where)  # type: ignore[operator]
    path, value = sample.shows
    assert dig(changed, path) == value
    assert dig(method(admin, "get", kind)(sample.name, **where), path) == value  # type: ignore[operator]

    method(admin, "delete", kind)(sample.name, **where)  # type: ignore[operator]
    with pytest.raises(ApiError) as gone:
        method(admin, "get", kind)(sample.name, **where)  # type: ignore[operator]
    assert gone.value.status == 404
    page = method(admin, "list", kind)(limit=1000, **where)  # type: ignore[operator]
    assert sample.name not in [item["name"] for item in page.items]


def test_fields_may_be_positional_in_the_tables_order(admin: Client) -> None:
    admin.create_flavor("a100", {"nodeLabels": {"gpuaas.io/pool": "a"}})
    assert admin.create_priority_class("low", 1, description="batch")["description"] == "batch"
    lq = admin.create_local_queue("batch", "acme-cq", 2, tenant=TENANT)
    assert (lq["clusterQueue"], lq["userLimit"]) == ("acme-cq", 2)


def test_scope_and_field_mistakes_are_caught_before_any_request(admin: Client) -> None:
    with pytest.raises(TypeError, match="provider's only"):
        admin.list_flavors(tenant=TENANT)
    with pytest.raises(TypeError, match="give tenant="):
        admin.get_local_queue("default")
    with pytest.raises(TypeError, match=r"unknown field.*colour"):
        admin.create_flavor("x", {}, colour="red")
    with pytest.raises(TypeError, match="owner"):  # the owner is a provider route's field
        admin.create_cluster_queue("x", {}, owner=TENANT, tenant=TENANT)
    with pytest.raises(TypeError, match="unknown filter"):
        admin.list_cohorts(owner=TENANT)


def test_the_provider_lists_cluster_queues_by_owner(admin: Client) -> None:
    admin.create_cluster_queue("spare-cq", {"namespaceSelector": {}})
    owned = admin.list_cluster_queues(owner=TENANT).items
    assert [q["name"] for q in owned] == ["acme-cq"]
    assert {q["name"] for q in admin.iter_cluster_queues()} == {"acme-cq", "spare-cq"}


def test_the_cli_names_of_the_table_reach_the_same_kinds() -> None:
    assert BY_CLI["queues"].plural == "local_queues"
    assert BY_CLI["profiles"].singular == "hardware_profile"
