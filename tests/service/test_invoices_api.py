"""Invoices through the API on usage the real reconciler recorded: lines per SKU, showback,
credits as new lines, a closed month that never changes (409 naming the period), late usage
billed on the next open month, the FOCUS export summing to the invoice; bad input is a 4xx
naming the field and changes nothing."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from billing_world import H100, price
from fastapi.testclient import TestClient
from job_world import TOKENS, build_world, job_spec

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant

T0 = 1_000_000.0  # 1970-01-12
JAN = "/v1/tenants/acme/invoices/1970-01"


@pytest.fixture
def world(db: Database, tmp_path: Path) -> Iterator[tuple[Api, Reconciler, dict[str, int]]]:
    ids = build_world(db, quota_gpus=8, nodes=2)
    price(db)  # a dollar per GPU-second
    reconciler = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    app = create_app(make_settings(db.url, tmp_path))
    with TestClient(app) as client:
        yield Api(client, ADMIN_TOKEN), reconciler, ids
    reconciler.stop()


def run_job(db: Database, r: Reconciler, ids: dict[str, int], at: float, gpus: int = 2) -> None:
    """A job holding ``gpus`` GPUs for 101 s from ``at + 1``."""
    spec = job_spec(f"j{int(at)}", gpus=gpus, duration=100)
    with db.session() as s:
        tenant = s.get(Tenant, ids["tenant"])
        assert tenant is not None
        submit_job(s, tenant, ids["alice"], JobSpec.model_validate(spec), at)
    r.step(at + 1)
    r.step(at + 2)
    r.step(at + 102)


def field_of(response: Any) -> str:
    return response.json()["errors"][0]["field"]


def test_an_invoice_lives_from_usage_to_closed_and_late_usage_goes_to_the_next_month(
    db: Database, world: tuple[Api, Reconciler, dict[str, int]]
) -> None:
    api, r, ids = world
    run_job(db, r, ids, T0)  # 2 GPUs x 101 s = 202 dollars
    jan = api.get(JAN).json()
    assert jan["state"] == "open" and jan["currency"] == "USD"
    gpu = [line for line in jan["lines"] if line["sku"] == H100]
    assert len(gpu) == 1 and gpu[0]["billedCost"] == "202" and gpu[0]["unit"] == "GPU-Hours"
    assert Decimal(gpu[0]["quantity"]) * 3600 == 202
    assert jan["total"] == "202"
    # members read it; showback by user and by job
    alice = api.as_(TOKENS["alice"])
    assert alice.get(JAN).json()["total"] == "202"
    by_user = alice.get("/v1/tenants/acme/showback", params={"period": "1970-01"}).json()
    assert [(row["name"], row["cost"]) for row in by_user] == [("alice", "202")]
    # a member may not credit or close
    body = {"kind": "credit", "amount": "2", "description": "goodwill"}
    assert alice.post(f"{JAN}/lines", json=body).status_code == 403
    # a credit is a new line
    credited = api.post(f"{JAN}/lines", json=body)
    assert credited.status_code == 201
    assert credited.json()["total"] == "200"
    closed = api.post(f"{JAN}/close").json()
    assert closed["state"] == "closed" and closed["total"] == "200"
    # a closed month never changes: a new line is 409 naming the period, the total stays
    again = api.post(f"{JAN}/lines", json={**body, "amount": "50"})
    assert again.status_code == 409 and field_of(again) == "period"
    assert "1970-01" in again.json()["detail"]
    assert api.post(f"{JAN}/close").status_code == 409
    # usage recorded for January after it closed: billed on February as late usage
    run_job(db, r, ids, T0 + 5000, gpus=1)  # 101 dollars, still in January
    assert api.get(JAN).json() == closed
    feb = api.get("/v1/tenants/acme/invoices/1970-02").json()
    late = [line for line in feb["lines"] if line["forPeriod"] == "1970-01"]
    gpu_late = [(ln["kind"], ln["billedCost"]) for ln in late if ln["sku"] == H100]
    assert gpu_late == [("adjustment", "101")]
    assert feb["total"] == "101"
    listed = api.get("/v1/tenants/acme/invoices").json()
    assert [(i["period"], i["state"]) for i in listed][:2] == [("1970-01", "closed"),
                                                               ("1970-02", "open")]  # fmt: skip
    # FOCUS rows of each invoice sum to it, CSV and Parquet
    for period, invoice in (("1970-01", closed), ("1970-02", feb)):
        text = api.get(f"/v1/tenants/acme/invoices/{period}/focus").text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert sum(Decimal(row["BilledCost"]) for row in rows) == Decimal(invoice["total"])
        assert {row["BillingPeriodStart"][:7] for row in rows} == {period}
    corrections = list(
        csv.DictReader(io.StringIO(api.get("/v1/tenants/acme/invoices/1970-02/focus").text))
    )
    assert {row["ChargeClass"] for row in corrections} == {"Correction"}
    pq = pytest.importorskip("pyarrow.parquet")
    data = api.get(f"{JAN}/focus", params={"format": "parquet"}).content
    table = pq.read_table(io.BytesIO(data))
    assert sum(table.column("BilledCost").to_pylist()) == Decimal("200")


def test_bad_input_names_the_field_and_changes_nothing(
    db: Database, world: tuple[Api, Reconciler, dict[str, int]]
) -> None:
    api, r, ids = world
    run_job(db, r, ids, T0)
    before = api.get(JAN).json()
    lines = f"{JAN}/lines"
    for body, field in (
        ({"kind": "credit", "amount": "-5", "description": "x"}, "amount"),
        ({"kind": "credit", "amount": "abc", "description": "x"}, "amount"),
        ({"kind": "credit", "amount": "0.0000000001", "description": "x"}, "amount"),
        ({"kind": "usage", "amount": "5", "description": "x"}, "kind"),
    ):
        response = api.post(lines, json=body)
        assert response.status_code == 422, body
        assert field_of(response) == field
    one = {"kind": "credit", "amount": "1", "description": "x"}
    assert api.post("/v1/tenants/acme/invoices/1970-13/lines", json=one).status_code == 422
    current = api.post("/v1/tenants/acme/invoices/2999-01/close")
    assert current.status_code == 409 and field_of(current) == "period"
    assert api.get(JAN).json() == before
    # budgets: the scope must exist, amounts are not negative
    budgets = "/v1/tenants/acme/budgets"
    for body in (  # a valid body naming a scope that is not there: 404 naming it
        {"name": "b", "scopeKind": "queue", "scope": "nope", "amount": "10"},
        {"name": "b", "scopeKind": "user", "scope": "mallory", "amount": "10"},
        {"name": "b", "scopeKind": "cluster", "scope": "hpc", "amount": "10"},
        {"name": "b", "scope": "beta", "amount": "10"},  # a tenant budget: only its own tenant
    ):
        response = api.post(budgets, json=body)
        assert response.status_code == 404, (body, response.text)
        assert field_of(response) == "scope"
    for body, field in (
        ({"name": "b", "scopeKind": "galaxy", "amount": "10"}, "scopeKind"),
        ({"name": "b", "scopeKind": "queue", "amount": "10"}, "scope"),
        ({"name": "b", "amount": "1e3"}, "amount"),  # decimal text as the pattern says
        ({"name": "b", "amount": "10", "thresholds": "50,80,50"}, "thresholds"),
        ({"name": "b", "amount": "10", "hard": "yes"}, "hard"),
        ({"name": "b", "amount": "10", "stopRunning": True}, "stopRunning"),
        ({"name": "b", "amount": "10", "currency": "ÄÖÜ"}, "currency"),
        ({"name": "b", "amount": "10", "webhook": "http://[::1"}, "webhook"),
        ({"name": "b", "amount": "-10"}, "amount"),
        ({"name": "b", "amount": "10", "thresholds": [0]}, "thresholds"),
        ({"name": "b", "amount": "10", "period": "daily"}, "period"),
        ({"name": "b", "amount": "10", "maxRatePerHour": "5"}, "maxRatePerHour"),
        ({"name": "b", "amount": "10", "webhook": "ftp://x"}, "webhook"),
        ({"name": "b"}, "amount"),
    ):
        response = api.post(budgets, json=body)
        assert response.status_code == 422, (body, response.text)
        assert field_of(response) == field
    assert api.get(budgets).json()["items"] == []
    assert (
        api.post("/v1/tenants/nope/budgets", json={"name": "b", "amount": "1"}).status_code == 404
    )
    made = api.post(budgets, json={"name": "b", "scopeKind": "queue", "scope": "default",
                                   "amount": "1000", "thresholds": "50,80"})  # fmt: skip
    assert made.status_code == 201, made.text
    view = made.json()
    assert view["scope"] == "default" and view["thresholds"] == [50, 80]
    assert view["status"]["period"].count("-") == 1
    assert api.post(budgets, json={"name": "b", "amount": "1"}).status_code == 409


def test_the_allocation_view_adds_up_to_the_fleet_s_capacity(
    db: Database, world: tuple[Api, Reconciler, dict[str, int]]
) -> None:
    api, r, ids = world
    run_job(db, r, ids, T0)
    view = api.get("/v1/allocation", params={"start": T0, "end": T0 + 3600}).json()
    # 2 nodes x 4 H100 for an hour at 3600/h; 202 GPU-seconds allocated to acme
    assert view["capacity"] == {"H100-80GB/whole": "28800"}
    assert view["allocated"] == {"H100-80GB/whole": "202"}
    assert view["idle"] == {"H100-80GB/whole": "28598"}
    names = {row["name"]: row["cost"] for row in view["rows"]}
    assert names == {"acme": "202", "__idle__": "28598"}
    shared = api.get("/v1/allocation", params={"start": T0, "end": T0 + 3600,
                                               "shareIdle": True}).json()  # fmt: skip
    assert [(row["name"], row["total"]) for row in shared["rows"]] == [("acme", "28800")]
    window = {"start": T0, "end": T0 + 1}
    assert api.as_(TOKENS["alice"]).get("/v1/allocation", params=window).status_code == 403
    bad = api.get("/v1/allocation", params={"start": T0, "end": T0 - 1})
    assert bad.status_code == 422 and field_of(bad) == "end"


def test_cost_metrics_per_tenant_and_sku(
    db: Database, world: tuple[Api, Reconciler, dict[str, int]]
) -> None:
    from gpuaas.service.cost_metrics import CostCollector

    api, r, ids = world
    run_job(db, r, ids, T0)  # recorded: 202
    spec = job_spec("long", gpus=2, duration=100_000)
    with db.session() as s:
        tenant = s.get(Tenant, ids["tenant"])
        assert tenant is not None
        submit_job(s, tenant, ids["alice"], JobSpec.model_validate(spec), T0 + 200)
    r.step(T0 + 201)  # admitted: open from here
    with db.sessions() as s:
        families = {f.name: f for f in CostCollector(s, now=T0 + 251).collect()}
    samples = {
        (f, tuple(sorted(x.labels.items()))): x.value
        for f, family in families.items()
        for x in family.samples
    }
    key = (("currency", "USD"), ("period", "1970-01"), ("sku", H100), ("tenant", "acme"))
    assert samples[("gpuaas_tenant_cost_to_date", key)] == 202 + 2 * 50
    rate_key = (("currency", "USD"), ("sku", H100), ("tenant", "acme"))
    assert samples[("gpuaas_tenant_cost_per_hour", rate_key)] == 7200
    price_key = (("currency", "USD"), ("price", "list"), ("sku", H100))
    assert samples[("gpuaas_price_per_hour", price_key)] == 3600
    text = api.get("/metrics").text
    assert "gpuaas_tenant_cost_to_date" in text and "gpuaas_price_per_hour{" in text
