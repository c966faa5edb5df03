"""What tenants spend, in ``/metrics`` (docs/billing.md): per tenant and SKU the cost of the
current month to date (recorded usage plus what running work has held since it was last
recorded) and the cost per hour of the work running now, and the provider's prices in force.
Computed from the database at scrape time, so every replica reports the same numbers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from gpuaas.billing.metering import in_force
from gpuaas.billing.periods import month_of
from gpuaas.service import usage
from gpuaas.service.budget_watch import open_items


class CostCollector(Collector):
    def __init__(self, session: Session, now: float | None = None) -> None:
        self.session = session
        self.now = time.time() if now is None else now

    def collect(self) -> Iterator[Any]:
        period = month_of(self.now)
        to_date: dict[tuple[str, str, str], Decimal] = {}
        for t in usage.totals(self.session, period.start, period.end,
                              by=("tenant", "sku", "currency")):  # fmt: skip
            key = (t.group["tenant"], t.group["sku"], t.group["currency"])
            to_date[key] = to_date.get(key, Decimal(0)) + t.effective_cost
        per_hour: dict[tuple[str, str, str], Decimal] = {}
        for row, sku, rate in open_items(self.session, self.now):
            key = (row.tenant, sku, self._currency(sku))
            per_hour[key] = per_hour.get(key, Decimal(0)) + rate
            held = Decimal(max(0.0, self.now - max(row.since, period.start)))
            to_date[key] = to_date.get(key, Decimal(0)) + rate * held / 3600
        cost = GaugeMetricFamily(
            "gpuaas_tenant_cost_to_date",
            "What a tenant's use of a SKU cost in the current month (UTC) so far, running "
            "work included",
            labels=["tenant", "sku", "currency", "period"],
        )
        for (tenant, sku, currency), value in sorted(to_date.items()):
            cost.add_metric([tenant, sku, currency, period.label], float(value))
        yield cost
        rate = GaugeMetricFamily(
            "gpuaas_tenant_cost_per_hour",
            "What a tenant's running work of a SKU costs per hour now",
            labels=["tenant", "sku", "currency"],
        )
        for (tenant, sku, currency), value in sorted(per_hour.items()):
            rate.add_metric([tenant, sku, currency], float(value))
        yield rate
        price = GaugeMetricFamily(
            "gpuaas_price_per_hour",
            "The provider's price per unit-hour of a SKU in force now (list and contracted)",
            labels=["sku", "currency", "price"],
        )
        for sku, entries in sorted(self._book().items()):
            entry = in_force(entries, self.now)
            if entry is not None:
                price.add_metric([sku, entry.currency, "list"], float(entry.list_per_hour))
                price.add_metric([sku, entry.currency, "contracted"],
                                 float(entry.contracted_per_hour))  # fmt: skip
        yield price

    def _book(self) -> dict[str, list[Any]]:
        if not hasattr(self, "_entries"):
            self._entries: dict[str, list[Any]] = {}
            for entry in usage.entries(self.session, usage.PROVIDER_BOOK):
                self._entries.setdefault(entry.sku, []).append(entry)
        return self._entries

    def _currency(self, sku: str) -> str:
        entry = in_force(self._book().get(sku, []), self.now)
        return entry.currency if entry is not None else ""
