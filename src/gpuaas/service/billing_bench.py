"""The billing benchmark's work (``gpuaas bench billing``): a month of usage records for many
tenants written straight into a database, then timed: rating (metering's aggregation,
:func:`gpuaas.service.usage.totals`, one SQL aggregate per tenant x SKU x price entry) and
turning the totals into every tenant's invoice (:func:`gpuaas.billing.invoices.invoices`).

The records are what metering writes (integers: micro unit-seconds, nano-units of money),
each job one to three hour-cut pieces of one GPU SKU; what they look like does not change the
work, only how many there are.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import insert

from gpuaas.billing.invoices import SkuTotal, invoices
from gpuaas.billing.periods import month
from gpuaas.service import usage
from gpuaas.store.db import Database
from gpuaas.store.tables import UsageRow

#: (SKU, price entry id, contracted nano-units per unit-hour)
SKUS = (
    ("H100-80GB/whole@on-demand", 1, 3_200_000_000),
    ("H100-80GB/whole@reserved", 2, 2_400_000_000),
    ("A100-40GB/mig/1g.5gb@on-demand", 3, 600_000_000),
    ("L40S/timeslice/4@on-demand", 4, 450_000_000),
    ("H100-80GB/whole@idle-pool", 5, 1_100_000_000),
)
CHUNK = 20_000


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


def write_month(db: Database, label: str, tenants: int, jobs: int, seed: int = 0) -> int:
    """``tenants`` x ``jobs`` jobs' usage records in month ``label``; how many were written."""
    period = month(label)
    rnd = random.Random(seed)
    hours = int((period.end - period.start) // 3600)
    rows: list[dict[str, Any]] = []
    written = 0
    for t in range(tenants):
        tenant = f"tenant-{t:03d}"
        for j in range(jobs):
            sku, price, per_hour = SKUS[rnd.randrange(len(SKUS))]
            start = period.start + rnd.randrange(hours - 3) * 3600 + rnd.randrange(3600)
            left = rnd.randrange(60, 5400)
            piece = 0
            while left > 0:
                end = min(start + left, start - start % 3600 + 3600)
                micro = round((end - start) * 1_000_000)
                rows.append({
                    "key": f"{tenant}/{j}/0/main-0/gpu-0/{piece}", "tenant": tenant,
                    "user": f"user-{j % 20}", "queue": f"q-{j % 3}", "cluster": "",
                    "job_id": t * jobs + j, "attempt": 0, "pod": "main-0", "device": "gpu-0",
                    "node": f"n-{j % 50}", "sku": sku, "period": label, "start": start,
                    "end": end, "quantity": micro, "price_id": price, "currency": "USD",
                    "list_cost": micro * per_hour // 3_600_000_000 * 5 // 4,
                    "effective_cost": micro * per_hour // 3_600_000_000, "utilization": None,
                })  # fmt: skip
                left -= int(end - start)
                start = end
                piece += 1
            if len(rows) >= CHUNK:
                written += _flush(db, rows)
    return written + _flush(db, rows)


def _flush(db: Database, rows: list[dict[str, Any]]) -> int:
    if rows:  # a Core executemany: the setup, not what is measured
        with db.engine.begin() as connection:
            connection.execute(insert(UsageRow.__table__), rows)
    n = len(rows)
    rows.clear()
    return n


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


def run(db: Database, tenants: int, jobs: int, label: str = "2026-10") -> BillingBench:
    db.upgrade()
    started = time.perf_counter()
    records = write_month(db, label, tenants, jobs)
    wrote = time.perf_counter() - started
    rating, invoicing, cpu, count, lines, total = rate_and_invoice(db, label)
    return BillingBench(tenants, jobs, records, wrote, rating, invoicing, cpu, count, lines, total)
