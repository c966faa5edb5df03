"""`gpuaas usage list` and `gpuaas usage summary` against the real app in process: a
tenant's records and totals, the provider's view of every tenant or one, tables and JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, gpuaas, ok_json
from test_client_cli import http as served  # noqa: F401  (the API in process, as a fixture)

from gpuaas.client import Client
from gpuaas.service import usage
from gpuaas.store.tables import UsageOpen
from kind_samples import TENANT, build_world

T0 = datetime(2026, 10, 5, 10, tzinfo=UTC).timestamp()
SKU = "H100-80GB/whole@on-demand"


@pytest.fixture
def http(served: TestClient) -> TestClient:  # noqa: F811
    build_world(Client.from_httpx(served, ADMIN))
    assert gpuaas("login", URL, ADMIN).exit_code == 0
    with served.app.state.db.session() as s:  # a job of two GPUs held 90 minutes
        held = [["main-0", f"gpu-{i}", "n1", SKU, 1, 1] for i in range(2)]
        s.add(UsageOpen(job_id=7, attempt=0, since=T0, tenant=TENANT, user="alice",
                        queue="default", cluster="", held=held))  # fmt: skip
        s.flush()
        assert usage.close(s, 7, T0 + 5400) == 4  # cut at 11:00
    return served


def test_list_and_summary_for_a_tenant_and_for_the_provider(http: TestClient) -> None:
    records = ok_json("usage", "list", "--tenant", TENANT, "--period", "2026-10")
    assert sorted((r["device"], r["quantity"]) for r in records) == [
        ("gpu-0", "1800"), ("gpu-0", "3600"), ("gpu-1", "1800"), ("gpu-1", "3600"),
    ]  # fmt: skip
    assert ok_json("usage", "list", "--tenant", TENANT, "--period", "2026-09") == []
    assert len(ok_json("usage", "list", "-A", "--of", TENANT, "--job", "7")) == 4
    assert ok_json("usage", "list", "-A", "--of", "nobody") == []
    table = gpuaas("usage", "list", "--tenant", TENANT)
    assert table.exit_code == 0 and f"usage of {TENANT}" in table.stdout

    totals = ok_json("usage", "summary", "--tenant", TENANT)
    assert [(t["group"]["sku"], t["records"], t["unitHours"]) for t in totals["totals"]] == [
        (SKU, 4, "3")
    ]
    every = ok_json("usage", "summary", "-A", "--by", "tenant,user")
    assert [(t["group"], t["records"]) for t in every["totals"]] == [
        ({"tenant": TENANT, "user": "alice"}, 4)
    ]
    table = gpuaas("usage", "summary", "-A")
    assert table.exit_code == 0 and "usage of every tenant" in table.stdout
