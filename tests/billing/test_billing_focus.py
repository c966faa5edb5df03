"""The FOCUS 1.2 export: every mandatory column, of its type, and the rows sum to the invoice."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal, InvalidOperation

import pytest
from billing_records import records

from gpuaas.billing.focus import (
    CHARGE_CATEGORIES,
    COLUMNS,
    DATETIME,
    DECIMAL,
    JSON,
    MANDATORY,
    PRICING_CATEGORIES,
    Account,
    arrow_table,
    rows,
    write_csv,
)
from gpuaas.billing.invoices import InvoiceLine, LineKind, invoices, late_lines, totals, usage_lines
from gpuaas.billing.periods import month

NOV, DEC = month("2026-11"), month("2026-12")
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
#: FOCUS 1.2's mandatory columns as the specification lists them (checked independently of
#: the module's own table)
SPEC_MANDATORY = {
    "BilledCost": "Decimal", "BillingAccountId": "String", "BillingAccountName": "String",
    "BillingCurrency": "String", "BillingPeriodEnd": "Date/Time",
    "BillingPeriodStart": "Date/Time", "ChargeCategory": "String", "ChargeClass": "String",
    "ChargeDescription": "String", "ChargePeriodEnd": "Date/Time",
    "ChargePeriodStart": "Date/Time", "ContractedCost": "Decimal", "EffectiveCost": "Decimal",
    "InvoiceIssuerName": "String", "ListCost": "Decimal", "PricingQuantity": "Decimal",
    "PricingUnit": "String", "ProviderName": "String", "PublisherName": "String",
    "ServiceCategory": "String", "ServiceName": "String",
}  # fmt: skip
NOT_NULL = {
    "BilledCost", "BillingAccountId", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
}  # fmt: skip


def _invoice_with_everything():
    recs = records(1500, NOV.start, tenants=1)
    late = records(30, month("2026-10").start, tenants=1, seed=4)
    billed_oct = usage_lines(totals(late[:20]))
    extra = [
        *late_lines("2026-10", totals(late), billed_oct),
        InvoiceLine(LineKind.CREDIT, "SLA credit", Decimal("-12.5")),
        InvoiceLine(LineKind.ADJUSTMENT, "support hours", Decimal("40")),
    ]
    (inv,) = invoices(totals(recs), NOV, "USD", {"t0": extra}).values()
    return inv, recs


def _check_value(name: str, kind: str, value: str) -> None:
    if value == "":
        assert name not in NOT_NULL, f"{name} may not be null"
        return
    if kind == DECIMAL:
        try:
            Decimal(value)
        except InvalidOperation:
            pytest.fail(f"{name}: {value!r} is not a decimal")
        assert re.fullmatch(r"-?\d+(\.\d+)?", value), f"{name}: {value!r} not a plain decimal"
    elif kind == DATETIME:
        assert STAMP.match(value), f"{name}: {value!r} is not YYYY-MM-DDTHH:mm:ssZ"
    elif kind == JSON:
        assert isinstance(json.loads(value), dict), f"{name}: not a key-value object"


def test_every_mandatory_column_is_there_with_its_type():
    assert {k: MANDATORY[k] for k in SPEC_MANDATORY} == SPEC_MANDATORY
    for extra in ("ConsumedQuantity", "ConsumedUnit", "SkuId", "SkuPriceId", "ResourceId",
                  "Tags", "PricingCategory"):  # fmt: skip
        assert extra in COLUMNS
    inv, recs = _invoice_with_everything()
    out = io.StringIO()
    write_csv(out, rows(inv, Account("t0", "Tenant zero"), recs))
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(table[0]) == list(COLUMNS)
    categories = set()
    for row in table:
        for name, kind in COLUMNS.items():
            _check_value(name, kind, row[name])
        assert row["ChargeCategory"] in CHARGE_CATEGORIES
        categories.add((row["ChargeCategory"], row["ChargeClass"]))
        assert row["ChargeClass"] in ("", "Correction")
        if row["ChargeCategory"] == "Usage":
            assert row["PricingCategory"] in PRICING_CATEGORIES
            assert row["SkuId"] and row["SkuPriceId"] and row["PricingUnit"] == "GPU-Hours"
            want = "Dynamic" if row["SkuId"].endswith("@idle-pool") else "Standard"
            assert row["PricingCategory"] == want
        else:
            assert row["ConsumedQuantity"] == "" and row["SkuId"] == ""
        assert row["BillingPeriodStart"] == "2026-11-01T00:00:00Z"
    assert categories == {("Usage", ""), ("Usage", "Correction"), ("Credit", ""),
                          ("Adjustment", "")}  # fmt: skip
    corrections = [r for r in table if r["ChargeClass"] == "Correction"]
    assert all(r["ChargePeriodStart"] == "2026-10-01T00:00:00Z" for r in corrections)
    assert any(r["ResourceId"] for r in table)


def test_billed_cost_of_the_rows_sums_to_the_invoice():
    inv, recs = _invoice_with_everything()
    focus = rows(inv, Account("t0", "Tenant zero"), recs)
    assert len(focus) > len(inv.lines)  # split per resource, job and day
    assert sum((r["BilledCost"] for r in focus), Decimal(0)) == inv.total
    out = io.StringIO()
    write_csv(out, focus)
    read = csv.DictReader(io.StringIO(out.getvalue()))
    assert sum((Decimal(r["BilledCost"]) for r in read), Decimal(0)) == inv.total


def test_a_line_whose_records_grew_after_closing_is_one_row():
    inv, recs = _invoice_with_everything()
    more = records(5, NOV.start, tenants=1, seed=77)
    focus = rows(inv, Account("t0", "t0"), recs + more)
    assert sum((r["BilledCost"] for r in focus), Decimal(0)) == inv.total


def test_parquet_types():
    pa = pytest.importorskip("pyarrow")
    inv, recs = _invoice_with_everything()
    table = arrow_table(rows(inv, Account("t0", "t0"), recs))
    for name, kind in MANDATORY.items():
        t = table.schema.field(name).type
        if kind == DECIMAL:
            assert pa.types.is_decimal(t), name
        elif kind == DATETIME:
            assert pa.types.is_timestamp(t) and t.tz == "UTC", name
        else:
            assert pa.types.is_string(t), name
    billed = sum((v for v in table.column("BilledCost").to_pylist()), Decimal(0))
    assert billed == inv.total
