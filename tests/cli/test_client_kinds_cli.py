"""Every kind x scope x verb of the one resource table through the CLI, against the real app in
process: `gpuaas <kind> create -f | get | list | update -f | delete`, with `--json` and as
readable tables (never raw JSON); the options-only forms; which routes a command uses without
`--tenant`; and `gpuaas nodes partition`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, failed, gpuaas, ok_json
from test_client_cli import http as served  # noqa: F401  (the API in process, as a fixture)
from typer.testing import Result

from gpuaas.client import Client
from gpuaas.model.api_kinds import ApiKind
from kind_samples import (
    KIND_SCOPES,
    TENANT,
    api_fields,
    build_world,
    dig,
    kind_scope_id,
    sample_for,
)


@pytest.fixture
def http(served: TestClient) -> TestClient:  # noqa: F811
    """The samples' world, and the CLI logged in as the provider admin."""
    build_world(Client.from_httpx(served, ADMIN))
    assert gpuaas("login", URL, ADMIN).exit_code == 0
    return served


def ok(*args: str) -> Result:
    result = gpuaas(*args)
    assert result.exit_code == 0, result.output
    return result


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("kind", "scope"), KIND_SCOPES, ids=kind_scope_id)
def test_every_verb_of_every_kind(
    http: TestClient, tmp_path: Path, kind: ApiKind, scope: str
) -> None:
    sample = sample_for(kind, scope)
    where = ["--tenant", TENANT] if scope == "tenant" else []
    made_file = write(tmp_path, "made", {"name": sample.name, **api_fields(kind, sample.create)})
    made = ok_json(kind.cli, "create", "-f", made_file, *where)
    assert made["name"] == sample.name
    assert ok_json(kind.cli, "get", sample.name, *where)["name"] == sample.name
    listed = ok_json(kind.cli, "list", "--all", *where)
    assert sample.name in [item["name"] for item in listed["items"]]

    table = ok(kind.cli, "list", *where).stdout
    assert sample.name in table and kind.columns[1].header in table
    assert '{"' not in table  # a readable table, not raw JSON
    shown = ok(kind.cli, "get", sample.name, *where).stdout
    assert sample.name in shown and '{"' not in shown

    update_file = write(tmp_path, "update", api_fields(kind, sample.update))
    changed = ok_json(kind.cli, "update", sample.name, "-f", update_file, *where)
    path, value = sample.shows
    assert dig(changed, path) == value
    assert dig(ok_json(kind.cli, "get", sample.name, *where), path) == value

    said = ok(kind.cli, "delete", sample.name, *where).stdout
    assert f"{sample.name} deleted" in said
    assert "not found" in failed(kind.cli, "get", sample.name, *where)
    listed = ok_json(kind.cli, "list", "--all", *where)
    assert sample.name not in [item["name"] for item in listed["items"]]


def test_kinds_without_a_spec_take_options_and_update_keeps_the_rest(http: TestClient) -> None:
    made = ok(
        "queues", "create", "batch", "--cluster-queue", "acme-cq", "--user-limit", "2", "-t", TENANT
    )
    assert "local queue batch created" in made.stdout
    changed = ok_json("queues", "update", "batch", "--user-limit", "5", "--tenant", TENANT)
    assert (changed["clusterQueue"], changed["userLimit"]) == ("acme-cq", 5)
    ok_json("priority-classes", "create", "high", "--value", "100", "--description", "urgent")
    changed = ok_json("priority-classes", "update", "high", "--value", "300")
    assert (changed["value"], changed["description"]) == (300, "urgent")  # kept
    assert ok_json("priority-classes", "delete", "high") == {"deleted": "high"}


def test_update_keeps_the_owner_of_a_providers_cluster_queue(
    http: TestClient, tmp_path: Path
) -> None:
    spec = write(tmp_path, "cq", {"spec": {"namespaceSelector": {}}})
    ok_json("cluster-queues", "create", "spare-cq", "-f", spec, "--owner", TENANT)
    assert ok_json("cluster-queues", "update", "spare-cq", "-f", spec)["tenant"] == TENANT
    owned = ok_json("cluster-queues", "list", "--owner", TENANT)
    assert sorted(q["name"] for q in owned["items"]) == ["acme-cq", "spare-cq"]


def test_without_tenant_a_member_uses_its_tenant_and_the_provider_its_own(
    http: TestClient, tmp_path: Path
) -> None:
    ok_json("members", "set", "alice", "tenant-admin", "--tenant", TENANT)
    token = ok_json("members", "token", "alice", "--name", "cli", "--tenant", TENANT)["token"]
    ok_json("cohorts", "create", "cloud")  # the provider's
    platform = ok_json("cohorts", "list")["items"]  # the provider's routes: every cohort
    assert [(c["name"], c["tenant"]) for c in platform] == [(TENANT, TENANT), ("cloud", None)]
    ok("login", URL, token)
    ok_json("cohorts", "create", "acme-team")  # alice's only tenant: acme
    mine = ok_json("cohorts", "list")["items"]
    assert {c["name"] for c in mine} == {TENANT, "acme-team"}  # its root and its own
    assert all(c["tenant"] == TENANT for c in mine)
    assert "provider-admin" in failed("flavors", "create", "x")  # provider-only kind


def test_mistakes_are_named(http: TestClient, tmp_path: Path) -> None:
    assert "NAME or -f" in failed("flavors", "create")
    odd = write(tmp_path, "odd", {"name": "x", "colour": "red"})
    assert "colour" in failed("priority-classes", "create", "-f", odd)
    assert "provider's" in failed("cluster-queues", "create", "x", "--owner", TENANT, "-t", TENANT)
    assert "give --tenant" in failed("queues", "list")  # the admin is a member of no tenant
    assert "clusterQueue" in failed("queues", "create", "q", "-c", "nope", "-t", TENANT)


def test_nodes_partition(http: TestClient, tmp_path: Path) -> None:
    mig = ok_json("nodes", "partition", "n-1", "--partitioning", "all-1g.10gb")
    assert {g["partition"]["mode"] for g in mig["gpus"]} == {"mig"}
    table = ok("nodes", "partition", "n-1", "--partitioning", "{mig: {3g.40gb: 2}}").stdout
    assert "repartitioned" in table and "3g.40gb" in table
    body = write(
        tmp_path,
        "part",
        {
            "partitioning": "whole",
            "perGpu": [{"indices": 1, "partitioning": {"mig": {"7g.80gb": 1}}}],
        },
    )
    gpus = ok_json("nodes", "partition", "n-1", "-f", body)["gpus"]
    assert [g["partition"]["mode"] for g in gpus[:2]] == ["whole", "mig"]
    assert "partitioning" in failed("nodes", "partition", "n-1", "-p", "{mig: {7g.80gb: 2}}")
    assert "give --partitioning" in failed("nodes", "partition", "n-1")
