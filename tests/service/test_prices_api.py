"""The price book and usage through the API: who writes which book, bad input refused naming
the field (nothing stored), an entry that priced usage never changes, usage read by the
provider, a tenant's admin and (its own only) a tenant-user, the idle pool's usage, and the
chargeback rating of a tenant's book."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api
from gpuaas.billing.metering import to_us
from gpuaas.service import usage
from gpuaas.service.prices import chargeback
from gpuaas.store.tables import PriceEntryRow, UsageOpen

H100 = "H100-80GB/whole@on-demand"
T = 1_789_999_200.0  # 2026-09-22T14:00Z, a whole hour


def price(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "sku": H100, "listPerHour": "2.49", "validFrom": T, **extra}


def member(api: Api, tenant: str, user: str, role: str) -> str:
    r = api.put(f"/v1/tenants/{tenant}/members/{user}", json={"role": role})
    assert r.status_code in (200, 201), r.text
    r = api.post(f"/v1/tenants/{tenant}/members/{user}/tokens", json={"name": "t"})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


@pytest.fixture
def tokens(api: Api) -> dict[str, str]:
    assert api.post("/v1/tenants", json={"name": "acme"}).status_code == 201
    return {
        "admin": member(api, "acme", "ann", "tenant-admin"),
        "alice": member(api, "acme", "alice", "tenant-user"),
        "bob": member(api, "acme", "bob", "tenant-user"),
    }


def problem(r: Any, status: int, field: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert field in body["detail"], body
    return str(body["detail"])


def test_the_provider_writes_its_book_and_anyone_reads_it(api: Api, tokens: dict[str, str]) -> None:
    r = api.post("/v1/prices", json=price("h100", contractedPerHour="2.10", currency="EUR"))
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["book"], out["listPerHour"], out["contractedPerHour"], out["currency"]) == (
        "provider", "2.49", "2.1", "EUR")  # fmt: skip
    assert out["used"] is False and out["validUntil"] is None
    iso = api.post("/v1/prices", json=price("later", validFrom="2026-10-01T00:00:00Z"))
    assert iso.status_code == 201 and iso.json()["validFrom"] == 1_790_812_800.0
    as_user = api.as_(tokens["alice"])
    assert [p["name"] for p in as_user.get("/v1/prices").json()["items"]] == ["h100", "later"]
    assert as_user.post("/v1/prices", json=price("mine", validFrom=T + 99)).status_code == 403
    # a tenant-admin writes its tenant's chargeback book, a tenant-user may not
    admin = api.as_(tokens["admin"])
    r = admin.post("/v1/tenants/acme/prices", json=price("internal", listPerHour="3"))
    assert r.status_code == 201 and r.json()["book"] == "tenant/acme", r.text
    assert as_user.post("/v1/tenants/acme/prices", json=price("x")).status_code == 403
    assert [p["name"] for p in as_user.get("/v1/tenants/acme/prices").json()["items"]] == [
        "internal"
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (price("neg", listPerHour="-1"), "listPerHour"),
        (price("neg2", contractedPerHour="-0.01"), "contractedPerHour"),
        (price("fine", listPerHour="0.0000000001"), "listPerHour"),
        (price("huge", listPerHour="1e12"), "listPerHour"),
        (price("nan", listPerHour="NaN"), "listPerHour"),
        (price("cur", currency="XYZ"), "currency"),
        (price("sku", sku="H100/bogus@on-demand"), "sku"),
        (price("pool", sku="H100-80GB/whole@somewhere"), "sku"),
        (price("until", validUntil=T - 1), "validUntil"),
        (price("when", validFrom="yesterday"), "validFrom"),
        (price("overlap"), "validFrom"),  # starts when "first" starts
        (price("inside", validFrom=T + 1800), "validFrom"),  # inside first's explicit period
    ],
)
def test_bad_prices_are_refused_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    first = api.post("/v1/prices", json=price("first", validUntil=T + 3600))
    assert first.status_code == 201, first.text
    before = api.get("/v1/prices").json()
    problem(api.post("/v1/prices", json=body), 422, field)
    assert api.get("/v1/prices").json() == before  # nothing stored


def write_usage(api: Api, job: int, user: str, start: float, end: float, sku: str = H100,
                tenant: str = "acme") -> None:  # fmt: skip
    """Usage as the reconciler writes it: an open row closed at ``end``."""
    db = api.client.app.state.db
    with db.session() as s:
        s.add(
            UsageOpen(
                job_id=job,
                attempt=0,
                since=start,
                tenant=tenant,
                user=user,
                queue="default",
                cluster="",
                held=[["main-0", "gpu-0", "n1", sku, 1, 1]],
            )
        )
        s.flush()
        usage.close(s, job, end)


def test_an_entry_that_priced_usage_never_changes(api: Api, tokens: dict[str, str]) -> None:
    assert api.post("/v1/prices", json=price("h100")).status_code == 201
    assert api.put("/v1/prices/h100", json=price("h100", listPerHour="2.00")).status_code == 200
    write_usage(api, 1, "alice", T + 100, T + 3700)  # priced by h100, two records
    assert api.get("/v1/prices/h100").json()["used"] is True
    detail = problem(api.put("/v1/prices/h100", json=price("h100", listPerHour="1")), 409, "h100")
    assert "priced usage" in detail
    problem(api.delete("/v1/prices/h100"), 409, "h100")
    # a new price may start only after the usage already priced
    problem(api.post("/v1/prices", json=price("cut", validFrom=T + 3600)), 409, "h100")
    assert api.post("/v1/prices", json=price("next", validFrom=T + 7200,
                                             listPerHour="1.5")).status_code == 201  # fmt: skip
    write_usage(api, 2, "bob", T + 7000, T + 7400)
    r = api.get("/v1/usage", params={"job": 2}).json()["items"]
    costs = {(x["start"], x["price"]) for x in r if x["device"] == "gpu-0"}
    ids = {p["name"]: p["id"] for p in api.get("/v1/prices").json()["items"]}
    assert costs == {(T + 7000, ids["h100"]), (T + 7200, ids["next"])}
    # the record h100 priced before "next" existed is as it was
    first = api.get("/v1/usage", params={"job": 1}).json()["items"]
    nine = Decimal("1e-9")
    assert [Decimal(x["listCost"]) for x in first] == [
        (Decimal("2.00") * 3500 / 3600).quantize(nine),
        (Decimal("2.00") * 100 / 3600).quantize(nine),
    ]


def test_usage_is_read_by_the_provider_the_tenant_and_a_user_its_own(
    api: Api, tokens: dict[str, str]
) -> None:
    assert api.post("/v1/prices", json=price("h100", validFrom=T - 10)).status_code == 201
    write_usage(api, 1, "alice", T, T + 1800)
    write_usage(api, 2, "bob", T, T + 900)
    everyone = api.get("/v1/usage/summary", params={"start": T - 1}).json()
    (total,) = everyone["totals"]
    assert total["group"] == {"tenant": "acme", "sku": H100, "currency": "USD"}
    assert total["quantity"] == "2700" and total["unitHours"] == "0.75"
    assert total["listCost"] == str(Decimal("2.49") * Decimal("0.75")).rstrip("0")
    admin = api.as_(tokens["admin"]).get("/v1/tenants/acme/usage").json()["items"]
    assert {x["user"] for x in admin} == {"alice", "bob"}
    own = api.as_(tokens["alice"]).get("/v1/tenants/acme/usage", params={"user": "bob"})
    assert {x["user"] for x in own.json()["items"]} == {"alice"}  # only its own, whatever it asks
    by_user = api.as_(tokens["admin"]).get("/v1/tenants/acme/usage/summary",
                                          params={"by": "user"}).json()  # fmt: skip
    assert {t["group"]["user"]: t["quantity"] for t in by_user["totals"]} == {
        "alice": "1800", "bob": "900"}  # fmt: skip
    assert api.as_(tokens["alice"]).get("/v1/usage").status_code == 403
    assert api.as_(tokens["admin"]).get("/v1/idle-pool/usage").status_code == 403
    problem(api.get("/v1/usage", params={"period": "2026-13"}), 422, "period")
    problem(api.get("/v1/usage/summary", params={"by": "colour"}), 422, "by")
    problem(api.get("/v1/usage", params={"start": T, "end": T - 1}), 422, "end")
    page = api.get("/v1/usage", params={"limit": 1}).json()
    assert len(page["items"]) == 1 and page["next"]
    rest = api.get("/v1/usage", params={"limit": 1000, "after": page["next"]}).json()
    assert len(rest["items"]) == 1 and rest["next"] is None


def test_the_idle_pool_usage_by_model_and_profile_in_the_api_and_metrics(
    api: Api, tokens: dict[str, str]
) -> None:
    write_usage(api, 1, "alice", T, T + 3600, sku="A100-80GB/mig/1g.10gb@idle-pool")
    write_usage(api, 2, "alice", T, T + 1800, sku="H100-80GB/whole@idle-pool")
    write_usage(api, 3, "alice", T, T + 1800)  # on-demand: not the pool's
    out = api.get("/v1/idle-pool/usage", params={"period": "2026-09"}).json()
    assert [(i["gpuModel"], i["shape"], i["profile"], i["gpuSeconds"]) for i in out["items"]] == [
        ("A100-80GB", "mig", "1g.10gb", "3600"), ("H100-80GB", "whole", "", "1800")]  # fmt: skip
    assert api.get("/v1/idle-pool/usage", params={"period": "2026-10"}).json()["items"] == []
    from gpuaas.service.usage_metrics import PoolUsageCollector

    with api.client.app.state.db.sessions() as s:
        (family,) = PoolUsageCollector(s, now=T).collect()
    assert {(x.labels["gpu_model"], x.labels["profile"], x.value) for x in family.samples} == {
        ("A100-80GB", "1g.10gb", 3600.0), ("H100-80GB", "", 1800.0)}  # fmt: skip
    assert "gpuaas_idle_pool_gpu_seconds" in api.get("/metrics").text


def test_a_tenants_chargeback_book_rates_its_users(api: Api, tokens: dict[str, str]) -> None:
    admin = api.as_(tokens["admin"])
    for name, per_hour, start in (("in", "4", T - 10), ("in2", "8", T + 3600)):
        body = price(name, listPerHour=per_hour, validFrom=start)
        assert admin.post("/v1/tenants/acme/prices", json=body).status_code == 201
    write_usage(api, 1, "alice", T, T + 5400)
    write_usage(api, 2, "bob", T, T + 900)
    with api.client.app.state.db.sessions() as s:
        rated = {t.group["user"]: t.list_cost for t in chargeback(s, "acme", by=("user",))}
    assert rated == {"alice": Decimal(4) + Decimal(4), "bob": Decimal(1)}
    # the chargeback book's entries are now used: immutable
    changed = price("in", listPerHour="1", validFrom=T - 10)
    problem(admin.put("/v1/tenants/acme/prices/in", json=changed), 409, "in")
    with api.client.app.state.db.sessions() as s:
        assert s.scalar(select(PriceEntryRow.list_per_hour).where(PriceEntryRow.name == "in")) == (
            4 * 10**9
        )
    assert to_us(T) % (3600 * 10**6) == 0 and ADMIN_TOKEN  # the times above are whole hours
