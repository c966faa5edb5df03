"""Storage GB-hours: a tenant's volume is recorded from its creation to its delete at its
size (a growth settles the old size first), cut at hours and at the billing period, priced by
its storage class's SKU, once whatever replays or crashes happen, and billed on the invoice and
the FOCUS export like any usage. Driven through the API with the storage service's clock set
by the test; the metering step is called with explicit times."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import func, select, update

from conftest import Api
from gpuaas.service import storage, usage, usage_volumes
from gpuaas.store.db import Database
from gpuaas.store.tables import UsageRow, VolumeRow

#: 2026-10-31T22:30Z: an hour and a half before a billing period ends
T0 = datetime(2026, 10, 31, 22, 30, tzinfo=UTC).timestamp()
HOUR = 3600.0
SKU = "storage/storage/local@on-demand"


class Clock:
    now = T0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    c = Clock()
    monkeypatch.setattr(storage, "time", c)
    monkeypatch.setattr(usage_volumes, "time", c)
    yield c


def db_of(api: Api) -> Database:
    return api.client.app.state.db


def setup(api: Api) -> None:
    assert api.post("/v1/tenants", json={"name": "acme"}).status_code == 201
    price = {"name": "local-disk", "sku": SKU, "listPerHour": "0.0001", "currency": "USD",
             "validFrom": "2026-10-01T00:00:00Z"}  # fmt: skip
    r = api.post("/v1/prices", json=price)
    assert r.status_code == 201, r.text


def step(api: Api, at: float) -> int:
    with db_of(api).session() as s:
        return usage_volumes.step(s, at)


def records(api: Api) -> list[Any]:
    with db_of(api).sessions() as s:
        return [stored.record for stored in usage.records(s, "acme", sku=SKU)]


def test_a_volume_is_billed_at_its_size_from_creation_to_delete_cut_at_hours_and_periods(
    api: Api, clock: Clock
) -> None:
    setup(api)
    assert (
        api.post("/v1/tenants/acme/volumes", json={"name": "data", "size": "100G"}).status_code
        == 201
    )
    assert step(api, T0 + 10 * 60) == 0  # nothing of a whole hour is LAG old yet
    assert step(api, T0 + HOUR + 10 * 60) == 1  # 22:30-23:00 at 100 GB
    clock.now = T0 + 50 * 60  # 23:20: grown; the old size's 20 minutes are settled first
    assert api.put("/v1/tenants/acme/volumes/data", json={"size": "150G"}).status_code == 200
    assert step(api, T0 + HOUR + 11 * 60) == 0  # already recorded up to 23:20
    clock.now = T0 + 2 * HOUR  # 00:30 on the 1st of November
    assert api.delete("/v1/tenants/acme/volumes/data").status_code == 204
    assert step(api, T0 + 5 * HOUR) == 0  # gone: nothing more

    got = [(r.start - T0, r.end - T0, r.quantity, r.sku, r.device) for r in records(api)]
    assert got == [
        (0.0, 1800.0, Decimal(100 * 1800), SKU, "volume/data"),
        (1800.0, 3000.0, Decimal(100 * 1200), SKU, "volume/data"),
        (3000.0, 5400.0, Decimal(150 * 2400), SKU, "volume/data"),
        (5400.0, 7200.0, Decimal(150 * 1800), SKU, "volume/data"),
    ]
    with db_of(api).sessions() as s:
        periods = dict(
            s.execute(select(UsageRow.period, func.count()).group_by(UsageRow.period)).all()
        )
    assert periods == {"2026-10": 3, "2026-11": 1}
    for r in records(api):
        assert r.job == 0 and r.node == "" and r.pod == "" and r.utilization is None
        assert abs(r.list_cost - r.quantity * Decimal("0.0001") / 3600) <= Decimal("0.5e-9")
    # the invoices bill GB-hours at the SKU's price; the FOCUS rows sum to them
    october = api.get("/v1/tenants/acme/invoices/2026-10").json()
    (line,) = [ln for ln in october["lines"] if ln["sku"] == SKU]
    assert line["unit"] == "GB-Hours"
    assert Decimal(line["quantity"]) == Decimal(100 * 3000 + 150 * 2400) / 3600
    assert Decimal(october["total"]) == Decimal(line["billedCost"]) > 0
    rows = list(
        csv.DictReader(io.StringIO(api.get("/v1/tenants/acme/invoices/2026-10/focus").text))
    )
    assert {row["ResourceId"] for row in rows} == {"volume/data"}
    assert {row["PricingUnit"] for row in rows} == {"GB-Hours"}
    assert sum(Decimal(row["BilledCost"]) for row in rows) == Decimal(october["total"])
    november = api.get("/v1/tenants/acme/invoices/2026-11").json()
    assert Decimal(november["total"]) == Decimal(150 * 1800) * Decimal("0.0001") / 3600


def test_replays_crashes_and_failed_volumes_record_nothing_twice_or_wrongly(
    api: Api, clock: Clock
) -> None:
    setup(api)
    for name in ("a", "broken"):
        assert (
            api.post("/v1/tenants/acme/volumes", json={"name": name, "size": "1G"}).status_code
            == 201
        )
    db = db_of(api)
    with db.session() as s:  # nothing was made for it: never billed
        s.execute(update(VolumeRow).where(VolumeRow.name == "broken").values(state="Failed"))

    # a step that dies before it commits (kill -9 mid-transaction) leaves nothing behind
    with pytest.raises(RuntimeError), db.session() as s:
        assert usage_volumes.step(s, T0 + 3 * HOUR) == 3
        raise RuntimeError("killed")
    assert records(api) == []
    # the next run records the same time, once; running it again writes nothing
    assert step(api, T0 + 3 * HOUR) == 3  # up to 01:00: 22:30-23:00, 23:00-00:00, 00:00-01:00
    assert step(api, T0 + 3 * HOUR) == 0
    # a writer that read the meter before the move (a second leader for a moment) stores
    # nothing new: the records' keys are stored already
    with db.session() as s:
        row = s.scalar(select(VolumeRow).where(VolumeRow.name == "a"))
        assert row is not None
        stale = SimpleNamespace(**{c: getattr(row, c) for c in ("id", "name", "tenant_id",
                                   "cluster", "state", "size_bytes", "storage_class")},
                                metered_until=T0)  # fmt: skip
        assert usage_volumes.settle(s, stale, "acme", T0 + 2 * HOUR) == 3  # type: ignore[arg-type]
    got = records(api)
    assert [(r.device, r.start - T0, r.end - T0) for r in got] == [
        ("volume/a", 0.0, 1800.0),
        ("volume/a", 1800.0, 5400.0),
        ("volume/a", 5400.0, 9000.0),
    ]
    assert sum(r.quantity for r in got) == Decimal(2.5 * HOUR)  # 1 GB x 2.5 hours, once


def test_metering_off_records_no_storage(api: Api, clock: Clock) -> None:
    setup(api)
    db = db_of(api)
    usage.configure(db.url, enabled=False)
    try:
        assert (
            api.post("/v1/tenants/acme/volumes", json={"name": "a", "size": "1G"}).status_code
            == 201
        )
        assert step(api, T0 + 3 * HOUR) == 0
        clock.now = T0 + HOUR
        assert api.delete("/v1/tenants/acme/volumes/a").status_code == 204
    finally:
        usage.configure(db.url)
    assert records(api) == []


def test_a_volume_made_before_metering_is_adopted_from_the_next_step(
    api: Api, clock: Clock
) -> None:
    setup(api)
    assert (
        api.post("/v1/tenants/acme/volumes", json={"name": "old", "size": "2G"}).status_code == 201
    )
    with db_of(api).session() as s:
        s.execute(update(VolumeRow).values(metered_until=None))
    assert step(api, T0 + 10 * HOUR) == 0  # adopted now: no time before it is billed
    assert step(api, T0 + 12 * HOUR) == 2  # up to 10:00, an hour and a half since 08:30
    assert sum(r.quantity for r in records(api)) == Decimal(2 * 1.5 * HOUR)
