"""`gpuaas invoices` and `gpuaas budgets` against the real app in process (the budgets' five
verbs are tested with every kind in test_client_kinds_cli.py)."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, failed, gpuaas, ok_json
from test_client_cli import http as served  # noqa: F401  (the API in process, as a fixture)

from gpuaas.billing.periods import month_of
from gpuaas.client import Client
from kind_samples import TENANT, build_world


@pytest.fixture
def http(served: TestClient) -> TestClient:  # noqa: F811
    build_world(Client.from_httpx(served, ADMIN))
    assert gpuaas("login", URL, ADMIN).exit_code == 0
    return served


def test_credit_close_and_export(http: TestClient, tmp_path: Path) -> None:
    now = month_of(time.time()).label
    listed = ok_json("invoices", "list", "--tenant", TENANT)
    assert [(i["period"], i["state"], i["total"]) for i in listed] == [(now, "open", "0")]
    made = ok_json("invoices", "adjust", now, "30", "-d", "support", "--tenant", TENANT)
    assert made["total"] == "30"
    made = ok_json("invoices", "credit", now, "12.5", "-d", "SLA", "--tenant", TENANT)
    assert made["total"] == "17.5"
    table = gpuaas("invoices", "get", now, "--tenant", TENANT)
    assert table.exit_code == 0 and "SLA" in table.stdout and "17.5" in table.stdout
    out = tmp_path / "focus.csv"
    assert gpuaas("invoices", "focus", now, "-o", str(out), "--tenant", TENANT).exit_code == 0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["ChargeCategory"] for r in rows) == ["Adjustment", "Credit"]
    closed = ok_json("invoices", "close", "2020-01", "--tenant", TENANT)
    assert closed["state"] == "closed" and closed["total"] == "0"
    assert "period 2020-01 is closed" in failed(
        "invoices", "credit", "2020-01", "1", "-d", "late", "--tenant", TENANT
    ).replace("for period", "period")
    assert "must not be negative" in failed(
        "invoices", "credit", now, "-d", "x", "--tenant", TENANT, "--", "-1"
    )
    assert ok_json("invoices", "showback", now, "--tenant", TENANT) == []


def test_budgets(http: TestClient) -> None:
    made = ok_json("budgets", "create", "gpu-month", "--amount", "1000", "--thresholds",
                   "50,80,100", "--hard", "true", "--tenant", TENANT)  # fmt: skip
    assert made["hard"] is True and made["thresholds"] == [50, 80, 100]
    assert made["status"]["spent"] == "0" and made["status"]["holding"] is False
    table = gpuaas("budgets", "list", "--tenant", TENANT)
    assert table.exit_code == 0 and "gpu-month" in table.stdout
    assert "no LocalQueue 'nope'" in failed(
        "budgets", "create", "q", "--scope-kind", "queue", "--scope", "nope", "--amount", "1",
        "--tenant", TENANT,
    )  # fmt: skip
