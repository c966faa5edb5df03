from __future__ import annotations

from decimal import Decimal

import pytest
from billing_records import records

from gpuaas.billing.invoices import (
    InvoiceLine,
    LineKind,
    invoices,
    late_lines,
    sku_of,
    totals,
    usage_lines,
)
from gpuaas.billing.periods import month, month_of, week_of
from gpuaas.model.billing import CapacityPool, Shape, Sku

NOV = month("2026-11")


def test_periods_are_utc_months_and_iso_weeks():
    assert NOV.start == 1793491200.0  # 2026-11-01T00:00:00Z
    assert month("2026-12").end == month("2027-01").start
    assert month_of(NOV.end - 1).label == "2026-11"
    assert month_of(NOV.end).label == "2026-12"
    week = week_of(NOV.start)  # a Sunday: the week began on Monday 2026-10-26
    assert week.label == "2026-W44" and week.end - week.start == 7 * 86400
    with pytest.raises(ValueError):
        month("2026-13")


def test_sku_ids_read_back():
    for sku in (
        Sku("H100-80GB", Shape.WHOLE),
        Sku("A100-40GB", Shape.MIG, CapacityPool.SPOT, "1g.5gb"),
        Sku("cpu", Shape.CPU, CapacityPool.RESERVED),
    ):
        assert sku_of(sku.id) == sku
    with pytest.raises(ValueError):
        sku_of("H100")


def test_an_invoice_is_its_records_summed_per_sku_and_price():
    recs = records(2000, NOV.start)
    tenant_invoices = invoices(totals(recs), NOV, "USD")
    for tenant, inv in tenant_invoices.items():
        mine = [r for r in recs if r.tenant == tenant]
        exact = sum((r.effective_cost for r in mine), Decimal(0))
        assert abs(inv.total - exact) <= Decimal("0.5e-9") * len(inv.lines)  # lines are money()
        skus = [ln.sku for ln in inv.lines]
        assert skus == sorted(skus) and len(set(skus)) == len(skus)  # one price per SKU here
        for line in inv.lines:
            seconds = sum((r.quantity for r in mine if r.sku == line.sku), Decimal(0))
            assert abs(line.quantity * 3600 - seconds) < Decimal("1e-6")
            assert line.unit == "GPU-Hours"


def test_a_price_change_gives_the_sku_a_second_line():
    recs = records(50, NOV.start, tenants=1)
    changed = [r.__class__(**{**_fields(r), "price": 99}) for r in recs[:10]]
    lines = usage_lines(totals(changed + recs[10:]))
    prices = {(ln.sku, ln.price) for ln in lines}
    assert any(p == 99 for _, p in prices)


def _fields(r):
    return {f: getattr(r, f) for f in r.__slots__}


def test_late_usage_is_the_difference_billed_next_month():
    recs = records(300, NOV.start, tenants=1)
    billed = usage_lines(totals(recs))
    late = records(20, NOV.start, tenants=1, seed=9)
    lines = late_lines("2026-11", totals(recs + late), billed)
    assert all(ln.kind is LineKind.ADJUSTMENT and ln.for_period == "2026-11" for ln in lines)
    expected = sum((r.effective_cost for r in late), Decimal(0))
    assert abs(sum((ln.billed_cost for ln in lines), Decimal(0)) - expected) < Decimal("1e-7")
    # once billed, nothing is late any more
    assert late_lines("2026-11", totals(recs + late), billed + lines) == []
    # nothing new: nothing late
    assert late_lines("2026-11", totals(recs), billed) == []


def test_credits_are_lines_and_lower_the_total():
    recs = records(100, NOV.start, tenants=1)
    credit = InvoiceLine(LineKind.CREDIT, "goodwill", Decimal("-5"))
    (inv,) = invoices(totals(recs), NOV, "USD", {"t0": [credit]}).values()
    assert inv.total == inv.usage - 5
