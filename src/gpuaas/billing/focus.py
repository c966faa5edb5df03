"""FOCUS 1.2 rows of invoices: the FinOps Open Cost and Usage Specification's columns, so that
any FinOps tool reads gpuaas bills like a cloud's.

One row per resource (a device of a node), job and SKU price per day for the usage lines, one
row per line for credits (``Credit``), adjustments (``Adjustment``) and late usage (``Usage``
with ``ChargeClass`` ``Correction``: usage of a month already invoiced, billed in this one, its
charge period that month). Every mandatory column of FOCUS 1.2 is there, plus ConsumedQuantity
and ConsumedUnit, SkuId, SkuPriceId, ResourceId, Tags (JSON), PricingCategory (``Dynamic``
for the idle pool's spot capacity, ``Standard`` otherwise), ChargeFrequency and InvoiceId.

Types are FOCUS's: Decimal (money and quantities, written as plain decimals), String,
Date/Time (``YYYY-MM-DDTHH:mm:ssZ``, UTC; periods are [start, end)) and JSON (key-value
object). Costs are :func:`~gpuaas.billing.invoices.money`; the rows of a line take the line's
exact cost (the last row takes what rounding left), so the BilledCost of an invoice's rows
sums to :attr:`Invoice.total` exactly.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from typing import IO, Any

from gpuaas.billing.invoices import (
    HOUR,
    SUM_PRECISION,
    ZERO,
    Invoice,
    InvoiceLine,
    LineKind,
    money,
    sku_of,
)
from gpuaas.billing.periods import iso, month
from gpuaas.model.billing import CapacityPool, UsageRecord

DECIMAL, STRING, DATETIME, JSON = "Decimal", "String", "Date/Time", "JSON"

#: FOCUS 1.2's mandatory columns and their data types
MANDATORY: dict[str, str] = {
    "BilledCost": DECIMAL,
    "BillingAccountId": STRING,
    "BillingAccountName": STRING,
    "BillingCurrency": STRING,
    "BillingPeriodEnd": DATETIME,
    "BillingPeriodStart": DATETIME,
    "ChargeCategory": STRING,
    "ChargeClass": STRING,
    "ChargeDescription": STRING,
    "ChargePeriodEnd": DATETIME,
    "ChargePeriodStart": DATETIME,
    "ContractedCost": DECIMAL,
    "EffectiveCost": DECIMAL,
    "InvoiceIssuerName": STRING,
    "ListCost": DECIMAL,
    "PricingQuantity": DECIMAL,
    "PricingUnit": STRING,
    "ProviderName": STRING,
    "PublisherName": STRING,
    "ServiceCategory": STRING,
    "ServiceName": STRING,
}
#: the further columns we fill
FURTHER: dict[str, str] = {
    "ChargeFrequency": STRING,
    "ConsumedQuantity": DECIMAL,
    "ConsumedUnit": STRING,
    "InvoiceId": STRING,
    "PricingCategory": STRING,
    "ResourceId": STRING,
    "ResourceType": STRING,
    "SkuId": STRING,
    "SkuPriceId": STRING,
    "Tags": JSON,
}
COLUMNS: dict[str, str] = {**MANDATORY, **FURTHER}
CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
PRICING_CATEGORIES = ("Standard", "Dynamic", "Committed", "Other")
DAY = 86400


@dataclass(frozen=True, slots=True)
class Account:
    """Who is billed and by whom."""

    id: str
    name: str
    provider: str = "gpuaas"
    service: str = "GPU compute"
    service_category: str = "AI and Machine Learning"


def invoice_id(invoice: Invoice) -> str:
    return f"{invoice.tenant}-{invoice.period.label}"


def rows(invoice: Invoice, account: Account, records: Iterable[UsageRecord] = ()) -> list[dict]:
    """The FOCUS rows of ``invoice``. ``records``: the usage records of its month (to split
    each usage line per resource, job and day); a usage line whose records do not sum to it
    (records arrived after the invoice was closed: they are billed next month as late usage)
    is one row of its own."""
    details = _details(invoice, records)
    out: list[dict[str, Any]] = []
    for line in invoice.lines:
        groups = details.get((line.sku, line.price)) if line.kind is LineKind.USAGE else None
        if groups and _sums_to(groups, line):
            out += _split(invoice, account, line, groups)
        else:
            out.append(_row(invoice, account, line))
    return out


_Key = tuple[float, str, str, int, str, str, str, str]  # day, node, device, job, pod, u, q, c


def _details(
    invoice: Invoice, records: Iterable[UsageRecord]
) -> dict[tuple[str, int | None], dict[_Key, list[Any]]]:
    out: dict[tuple[str, int | None], dict[_Key, list[Any]]] = {}
    period = invoice.period
    with localcontext(prec=SUM_PRECISION):
        for r in records:
            if r.tenant != invoice.tenant or not period.holds(r.start):
                continue
            day = max(period.start, r.start - (r.start % DAY))
            key = (day, r.node, r.device, r.job, r.pod, r.user, r.queue, r.cluster)
            group = out.setdefault((r.sku, r.price), {})
            acc = group.get(key)
            if acc is None:
                group[key] = [r.quantity, r.list_cost, r.effective_cost]
            else:
                acc[0] += r.quantity
                acc[1] += r.list_cost
                acc[2] += r.effective_cost
    return out


def _sums_to(groups: dict[_Key, list[Any]], line: InvoiceLine) -> bool:
    with localcontext(prec=SUM_PRECISION):
        return money(sum((g[2] for g in groups.values()), ZERO)) == line.billed_cost


def _split(
    invoice: Invoice, account: Account, line: InvoiceLine, groups: dict[_Key, list[Any]]
) -> list[dict[str, Any]]:
    out = []
    given = {"billed": ZERO, "list": ZERO}
    items = sorted(groups.items())
    for i, (key, (quantity, list_cost, cost)) in enumerate(items):
        last = i == len(items) - 1
        billed = line.billed_cost - given["billed"] if last else money(cost)
        listed = line.list_cost - given["list"] if last else money(list_cost)
        given["billed"] += billed
        given["list"] += listed
        day, node, device, job, pod, user, queue, cluster = key
        row = _row(invoice, account, line)
        hours = quantity / HOUR
        row.update(
            BilledCost=billed,
            ContractedCost=billed,
            EffectiveCost=billed,
            ListCost=listed,
            PricingQuantity=hours,
            ConsumedQuantity=hours,
            ChargePeriodStart=iso(day),
            ChargePeriodEnd=iso(min(day + DAY, invoice.period.end)),
            ResourceId=f"{node}/{device}" if node else device,  # a volume: on no node
            ResourceType="GPU" if line.unit == "GPU-Hours" else line.unit.removesuffix("-Hours"),
            Tags=json.dumps(
                {
                    "gpuaas/job": str(job),
                    "gpuaas/pod": pod,
                    "gpuaas/user": user,
                    "gpuaas/queue": queue,
                    "gpuaas/cluster": cluster,
                },
                sort_keys=True,
            ),
        )
        out.append(row)
    return out


def _row(invoice: Invoice, account: Account, line: InvoiceLine) -> dict[str, Any]:
    period = invoice.period
    charge = month(line.for_period) if line.late else period
    usage = line.kind is LineKind.USAGE or line.late
    category = "Usage" if usage else "Credit" if line.kind is LineKind.CREDIT else "Adjustment"
    priced = bool(line.sku)
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        BilledCost=line.billed_cost,
        BillingAccountId=account.id,
        BillingAccountName=account.name,
        BillingCurrency=invoice.currency,
        BillingPeriodStart=iso(period.start),
        BillingPeriodEnd=iso(period.end),
        ChargeCategory=category,
        ChargeClass="Correction" if line.late else None,
        ChargeDescription=line.description,
        ChargeFrequency="Usage-Based" if usage else "One-Time",
        ChargePeriodStart=iso(charge.start),
        ChargePeriodEnd=iso(charge.end),
        ContractedCost=line.contracted_cost if priced else line.billed_cost,
        EffectiveCost=line.billed_cost,
        InvoiceId=invoice_id(invoice),
        InvoiceIssuerName=account.provider,
        ListCost=line.list_cost if priced else line.billed_cost,
        ProviderName=account.provider,
        PublisherName=account.provider,
        ServiceCategory=account.service_category,
        ServiceName=account.service,
        Tags="{}",
    )
    if priced:
        pool = sku_of(line.sku).pool
        row.update(
            PricingQuantity=line.quantity,
            PricingUnit=line.unit,
            ConsumedQuantity=line.quantity,
            ConsumedUnit=line.unit,
            PricingCategory="Dynamic" if pool is CapacityPool.SPOT else "Standard",
            SkuId=line.sku,
            SkuPriceId=str(line.price) if line.price else None,  # 0: no entry priced it
        )
    return row


# --- writing -------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value.normalize() if value else ZERO, "f")
    return str(value)


def write_csv(out: IO[str], focus_rows: Sequence[dict[str, Any]]) -> None:
    """CSV with a header of every column (a null is an empty field)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in focus_rows:
        writer.writerow([_text(row[c]) for c in COLUMNS])


#: Parquet decimals: 38 digits, 12 after the point (money has 9; quantities are hours)
DECIMAL_SCALE = 12


def arrow_table(focus_rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as an Arrow table: Decimal as decimal128(38, 12), Date/Time as UTC
    timestamps (seconds), String and JSON as strings."""
    import pyarrow as pa  # an export-only dependency: imported when exporting

    types = {
        DECIMAL: pa.decimal128(38, DECIMAL_SCALE),
        STRING: pa.string(),
        JSON: pa.string(),
        DATETIME: pa.timestamp("s", tz="UTC"),
    }
    scale = Decimal(1).scaleb(-DECIMAL_SCALE)
    columns = {}
    for name, kind in COLUMNS.items():
        values = [row[name] for row in focus_rows]
        if kind == DECIMAL:
            values = [None if v is None else Decimal(v).quantize(scale) for v in values]
        elif kind == DATETIME:
            values = [None if v is None else _parse_iso(v) for v in values]
        columns[name] = pa.array(values, type=types[kind])
    return pa.table(columns)


def _parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def write_parquet(path: Any, focus_rows: Sequence[dict[str, Any]]) -> None:
    import pyarrow.parquet as pq

    pq.write_table(arrow_table(focus_rows), path)
