"""The billing benchmark's work (``gpuaas bench billing``): a month of usage records for many
tenants, written by metering's benchmark (:mod:`gpuaas.service.usage_bench`: through
metering's own cutting and pricing, a price change mid-month), then timed: rating
(:func:`gpuaas.service.usage.totals`, one SQL aggregate per tenant x SKU x price entry) and
turning the totals into every tenant's invoice (:func:`gpuaas.billing.invoices.invoices`).
``gpuaas bench usage`` times metering's rating alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuaas.billing.invoices import SkuTotal, invoices
from gpuaas.billing.periods import month
from gpuaas.service import usage, usage_bench
from gpuaas.store.db import Database


@dataclass(frozen=True, slots=True)
class BillingBench:
    tenants: int
    jobs: int
    records: int
    write_seconds: float
    rating_seconds: float
    invoice_seconds: float
    cpu_seconds: float  # the process's CPU time for rating + invoices (the machine may be busy)
    invoices: int
    lines: int
    total: Decimal

    @property
    def seconds(self) -> float:
        return self.rating_seconds + self.invoice_seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "tenants": self.tenants, "jobs_per_tenant": self.jobs, "records": self.records,
            "write_seconds": round(self.write_seconds, 3),
            "rating_seconds": round(self.rating_seconds, 3),
            "invoice_seconds": round(self.invoice_seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "seconds": round(self.seconds, 3), "invoices": self.invoices, "lines": self.lines,
            "total": str(self.total), "target_seconds": 10, "target_met": self.seconds <= 10,
        }  # fmt: skip


def rate_and_invoice(db: Database, label: str) -> tuple[float, float, float, int, int, Decimal]:
    """Rating's totals of month ``label`` and every tenant's invoice from them: the two
    times, the CPU time of both, the invoices, their lines and the sum of their totals."""
    period = month(label)
    cpu = time.process_time()
    started = time.perf_counter()
    with db.sessions() as session:
        found = usage.totals(
            session, period.start, period.end, None, by=("tenant", "sku", "price_id", "currency")
        )
    rated = time.perf_counter()
    totals = [
        SkuTotal(t.group["tenant"], label, t.group["sku"], int(t.group["price_id"]), t.quantity,
                 t.list_cost, t.effective_cost)
        for t in found
    ]  # fmt: skip
    made = invoices(totals, period, "USD")
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    lines = sum(len(i.lines) for i in made.values())
    total = sum((i.total for i in made.values()), Decimal(0))
    return rated - started, done - rated, cpu, len(made), lines, total


def run(db: Database, tenants: int, jobs: int) -> BillingBench:
    """Write the month (metering's benchmark writes it, and times its own rating), then time
    rating it per SKU and price entry and turning that into every tenant's invoice."""
    month_of_usage = usage_bench.run(db, tenants, jobs)
    rating, invoicing, cpu, count, lines, total = rate_and_invoice(db, usage_bench.PERIOD)
    return BillingBench(tenants, jobs, month_of_usage.records, month_of_usage.write_seconds,
                        rating, invoicing, cpu, count, lines, total)  # fmt: skip
