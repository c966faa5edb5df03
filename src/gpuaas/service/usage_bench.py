"""``gpuaas bench usage``: how fast a month of usage is rated (docs/benchmarks.md).

A month of records for ``tenants`` x ``jobs`` (each job a pod holding one device for up to an
hour, a SKU drawn from whole GPUs, MIG profiles and time-slice shares, priced by the provider's
book with a price change mid-month) is written in the table's own form (key, quantity in
micro-units, the entry in force at the start, costs by :func:`gpuaas.billing.metering.cost`:
what :func:`usage.close` stores; generated directly, since a million transitions through the
reconciler would time the reconciler, not rating), then :func:`gpuaas.service.usage.totals`
rates the month into per-tenant x SKU x currency totals, timed; the check is that the totals
add up to the records (count and cost)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import func, select

from gpuaas.billing.metering import US, cost, in_force, nano, period_bounds, record_key
from gpuaas.service import usage
from gpuaas.store.db import Database
from gpuaas.store.tables import PriceEntryRow, UsageRow

#: SKU, fraction of a unit, list price per unit-hour
SKUS = (
    ("H100-80GB/whole@on-demand", Fraction(1), "2.49"),
    ("H100-80GB/whole@reserved", Fraction(1), "1.99"),
    ("A100-80GB/mig/1g.10gb@on-demand", Fraction(1), "0.42"),
    ("A100-80GB/mig/3g.40gb@on-demand", Fraction(1), "1.10"),
    ("L40S/timeslice/4@on-demand", Fraction(1, 4), "1.20"),
    ("H100-80GB/whole@idle-pool", Fraction(1), "0.90"),
)
PERIOD = "2026-11"
CHUNK = 20_000


@dataclass(frozen=True, slots=True)
class Result:
    tenants: int
    jobs: int
    records: int
    write_seconds: float
    rating_seconds: float
    rating_cpu_seconds: float
    groups: int
    total: Decimal

    def to_json(self) -> dict[str, object]:
        return {
            "tenants": self.tenants, "jobs_per_tenant": self.jobs, "records": self.records,
            "write_seconds": round(self.write_seconds, 2),
            "rating_seconds": round(self.rating_seconds, 3),
            "rating_cpu_seconds": round(self.rating_cpu_seconds, 3), "groups": self.groups,
            "total": str(self.total), "target_seconds": 10, "met": self.rating_seconds <= 10,
        }  # fmt: skip


def run(db: Database, tenants: int, jobs: int, seed: int = 1) -> Result:
    """Write the month (not timed as rating), then time rating it."""
    db.upgrade()
    start, end = period_bounds(PERIOD)
    middle = start + (end - start) / 2
    with db.session() as s:
        for i, (sku, _, price) in enumerate(SKUS):
            for j, (at, factor) in enumerate(((start - 1, 1), (middle, Decimal("0.9")))):
                amount = nano(Decimal(price) * factor)
                s.add(PriceEntryRow(book=usage.PROVIDER_BOOK, name=f"p{i}-{j}", sku=sku,
                                    list_per_hour=amount, contracted_per_hour=amount * 9 // 10,
                                    currency="USD", valid_from=at, valid_until=None,
                                    description="", created_at=0.0, updated_at=0.0))  # fmt: skip
    with db.sessions() as s:
        book = {}
        for entry in usage.entries(s, usage.PROVIDER_BOOK):
            book.setdefault(entry.sku, []).append(entry)
    rng = random.Random(seed)
    hours = int((end - start) // 3600)
    prices = {sku: sorted(entries, key=lambda e: e.valid_from) for sku, entries in book.items()}
    began = time.perf_counter()
    rows: list[dict[str, object]] = []
    written = 0
    job_id = 0
    for t in range(tenants):
        tenant = f"tenant-{t:03d}"
        for _ in range(jobs):
            job_id += 1
            sku, fraction, _ = SKUS[rng.randrange(len(SKUS))]
            hour = start + rng.randrange(hours) * 3600
            a = rng.randrange(3000)
            b = rng.randrange(a + 60, 3601)
            start_us, end_us = round((hour + a) * US), round((hour + b) * US)
            quantity = (end_us - start_us) * fraction.numerator // fraction.denominator
            entry = in_force(prices[sku], hour + a)
            assert entry is not None
            rows.append({
                "key": record_key(job_id, 0, "main-0", "gpu-0", start_us), "tenant": tenant,
                "user": f"user-{rng.randrange(20)}", "queue": "default", "cluster": "",
                "job_id": job_id, "attempt": 0, "pod": "main-0", "device": "gpu-0",
                "node": f"n{rng.randrange(500)}", "sku": sku, "period": PERIOD,
                "start": start_us / US, "end": end_us / US, "quantity": quantity,
                "price_id": entry.id, "currency": entry.currency,
                "list_cost": cost(quantity, nano(entry.list_per_hour)),
                "effective_cost": cost(quantity, nano(entry.contracted_per_hour)),
                "utilization": None,
            })  # fmt: skip
            if len(rows) >= CHUNK:
                written += _flush(db, rows)
    written += _flush(db, rows)
    write_seconds = time.perf_counter() - began
    with db.sessions() as s:
        began, cpu = time.perf_counter(), time.process_time()
        totals = usage.totals(s, start, end)
        rating_seconds = time.perf_counter() - began
        rating_cpu = time.process_time() - cpu  # SQLite runs in this process: all its work
        count = s.scalar(select(func.count()).select_from(UsageRow))
        stored = s.scalar(select(func.sum(UsageRow.list_cost)))
    total = sum((t.list_cost for t in totals), Decimal(0))
    assert sum(t.records for t in totals) == count == written, "totals lost records"
    assert total == Decimal(int(stored or 0)).scaleb(-9), "totals do not add up"
    return Result(tenants, jobs, written, write_seconds, rating_seconds, rating_cpu, len(totals),
                  total)  # fmt: skip


def _flush(db: Database, rows: list[dict[str, object]]) -> int:
    if not rows:
        return 0
    with db.session() as s:
        usage._insert_or_ignore(s, rows)
    n = len(rows)
    rows.clear()
    return n
