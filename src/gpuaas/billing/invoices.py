"""Invoices: a tenant's charges for one calendar month (UTC), one line per SKU and price entry.

An invoice is built from what rating summed (:class:`SkuTotal`: per tenant, month, SKU and
price entry, the quantity and the list and effective cost of its usage records) plus the lines
people added. Nothing on an invoice is ever edited:

- **usage** lines: the month's own usage, one per SKU and price entry in force (a price
  change within the month gives the SKU a second line, so each line names its one price);
- **late usage** (an ``adjustment`` line with ``for_period``): usage recorded for a month
  after that month's invoice was closed (a backend that reported late, a restart replaying a
  transition) is billed on the open month's invoice as the difference between what that
  month's records now sum to and what was already billed for it; records are append-only,
  so the difference is never negative;
- **credit** lines (negative) and **adjustment** lines (either sign) a provider adds: new
  lines, in the open month only.

Closing a month freezes its lines (the service stores them; a closed invoice is immutable:
an edit or a new line for it is refused, naming the period). Money is :class:`Decimal`, summed
exactly; :attr:`Invoice.total` is the sum of the lines' billed cost, so the FOCUS rows of an
invoice sum to it (:mod:`gpuaas.billing.focus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from enum import StrEnum

from gpuaas.billing.periods import Period, month_of
from gpuaas.billing.skus import parse_sku
from gpuaas.model.billing import UNIT, Sku, UsageRecord

ZERO = Decimal(0)
HOUR = Decimal(3600)
#: money on lines and export rows: 1e-9 of the currency (rating's per-second prices are not
#: whole cents; sums of lines and rows are then exact)
MONEY = Decimal("1e-9")
#: digits for exact sums of records' costs, whatever their scale
SUM_PRECISION = 60


def money(value: Decimal) -> Decimal:
    return value.quantize(MONEY, rounding=ROUND_HALF_EVEN)


class LineKind(StrEnum):
    USAGE = "usage"
    CREDIT = "credit"
    ADJUSTMENT = "adjustment"


@dataclass(frozen=True, slots=True)
class SkuTotal:
    """What a tenant's usage of one SKU at one price entry sums to in one month (``period``:
    its label); ``quantity`` in unit-seconds, as the records hold it."""

    tenant: str
    period: str
    sku: str
    price: int
    quantity: Decimal
    list_cost: Decimal
    effective_cost: Decimal


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    """One line; ``quantity`` in the SKU's pricing unit (unit-hours). ``for_period``: the
    month the usage belongs to when it is not the invoice's own (late usage)."""

    kind: LineKind
    description: str
    billed_cost: Decimal
    sku: str = ""
    price: int | None = None
    quantity: Decimal = ZERO
    unit: str = ""
    list_cost: Decimal = ZERO
    contracted_cost: Decimal = ZERO
    for_period: str = ""

    @property
    def late(self) -> bool:
        return bool(self.for_period)


@dataclass(frozen=True, slots=True)
class Invoice:
    tenant: str
    period: Period
    currency: str
    lines: tuple[InvoiceLine, ...] = field(default_factory=tuple)
    closed: bool = False

    @property
    def total(self) -> Decimal:
        return sum((line.billed_cost for line in self.lines), ZERO)

    @property
    def usage(self) -> Decimal:
        return sum((ln.billed_cost for ln in self.lines if ln.kind is LineKind.USAGE), ZERO)


def sku_of(sku_id: str) -> Sku:
    """The :class:`Sku` a SKU id names; ValueError when it names none."""
    sku = parse_sku(sku_id)
    if sku is None:
        raise ValueError(f"{sku_id!r} is not a SKU id (resource/shape[/profile]@pool)")
    return sku


def unit_of(sku_id: str) -> str:
    """The FOCUS pricing unit of ``sku_id`` (GPU-Hours, vCPU-Hours, ...)."""
    try:
        return UNIT[sku_of(sku_id).shape]
    except ValueError:
        return "Hours"


def totals(records: Iterable[UsageRecord]) -> list[SkuTotal]:
    """Rating's sums, per tenant, month (of each record's start), SKU and price entry."""
    sums: dict[tuple[str, str, str, int], list[Decimal]] = {}
    months: dict[float, str] = {}
    with localcontext(prec=SUM_PRECISION):
        _sum_into(sums, months, records)
    return [SkuTotal(t, p, s, price, q, lc, ec) for (t, p, s, price), (q, lc, ec) in sums.items()]


def _sum_into(
    sums: dict[tuple[str, str, str, int], list[Decimal]],
    months: dict[float, str],
    records: Iterable[UsageRecord],
) -> None:
    for r in records:
        hour = r.start - r.start % 3600
        label = months.get(hour)
        if label is None:
            label = months[hour] = month_of(r.start).label
        key = (r.tenant, label, r.sku, r.price)
        acc = sums.get(key)
        if acc is None:
            sums[key] = [r.quantity, r.list_cost, r.effective_cost]
        else:
            acc[0] += r.quantity
            acc[1] += r.list_cost
            acc[2] += r.effective_cost


def _describe(sku: str, late_for: str = "") -> str:
    text = f"{sku} usage"
    return f"{text} recorded late for {late_for}" if late_for else text


def usage_lines(month_totals: Iterable[SkuTotal]) -> list[InvoiceLine]:
    """The usage lines of one tenant's month, one per SKU and price entry, by SKU."""
    lines = [
        InvoiceLine(
            LineKind.USAGE,
            _describe(t.sku),
            money(t.effective_cost),
            sku=t.sku,
            price=t.price,
            quantity=t.quantity / HOUR,
            unit=unit_of(t.sku),
            list_cost=money(t.list_cost),
            contracted_cost=money(t.effective_cost),
        )
        for t in month_totals
    ]
    return sorted(lines, key=lambda ln: (ln.sku, ln.price or 0))


def late_lines(
    closed: str, now_totals: Iterable[SkuTotal], billed: Iterable[InvoiceLine]
) -> list[InvoiceLine]:
    """Adjustment lines for month ``closed``'s usage recorded after it was closed: per SKU
    and price entry, what its records sum to now (``now_totals``) less what was already billed
    for it (``billed``: its own usage lines and late-usage lines for it on later invoices)."""
    had: dict[tuple[str, int | None], list[Decimal]] = {}
    for line in billed:
        if line.kind is LineKind.USAGE or line.for_period == closed:
            acc = had.setdefault((line.sku, line.price), [ZERO, ZERO, ZERO])
            acc[0] += line.quantity * HOUR
            acc[1] += line.list_cost
            acc[2] += line.billed_cost
    out = []
    for t in now_totals:
        q, lc, ec = had.get((t.sku, t.price), (ZERO, ZERO, ZERO))
        cost = money(t.effective_cost) - ec
        if cost <= 0 and t.quantity - q < 1:  # (quantities are rounded on lines)
            continue
        out.append(
            InvoiceLine(
                LineKind.ADJUSTMENT,
                _describe(t.sku, closed),
                cost,
                sku=t.sku,
                price=t.price,
                quantity=(t.quantity - q) / HOUR,
                unit=unit_of(t.sku),
                list_cost=money(t.list_cost) - lc,
                contracted_cost=cost,
                for_period=closed,
            )
        )
    return sorted(out, key=lambda ln: (ln.sku, ln.price or 0))


def invoices(
    all_totals: Iterable[SkuTotal],
    period: Period,
    currency: str,
    extra: Mapping[str, Sequence[InvoiceLine]] | None = None,
) -> dict[str, Invoice]:
    """Every tenant's invoice for ``period`` from rating's sums (the month's own usage) and
    ``extra`` lines per tenant (credits, adjustments, late usage)."""
    by_tenant: dict[str, list[SkuTotal]] = {}
    for t in all_totals:
        if t.period == period.label:
            by_tenant.setdefault(t.tenant, []).append(t)
    extra = extra or {}
    out = {}
    for tenant in sorted(set(by_tenant) | set(extra)):
        lines = usage_lines(by_tenant.get(tenant, ())) + list(extra.get(tenant, ()))
        out[tenant] = Invoice(tenant, period, currency, tuple(lines))
    return out
