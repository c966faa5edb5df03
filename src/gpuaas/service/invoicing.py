"""Invoices, showback, the allocation view and the FOCUS export, from the usage records.

A tenant's month is **open** until someone closes it: its invoice is computed when asked
(rating's sums of the month's records, :func:`gpuaas.service.usage.totals`, one line per SKU
and price entry; the credits and adjustments added to it; late usage of closed months). A
provider-admin **closes** a month once it has ended: its lines are stored and never change
again (:class:`~gpuaas.store.tables.InvoiceRow`, :class:`~gpuaas.store.tables.InvoiceLineRow`).
A credit, an adjustment or any line for a closed month is refused (409 naming the period);
usage recorded for a closed month afterwards (a backend that reported late) is not lost: it is
billed as late usage (an adjustment line with ``forPeriod``) on the first month after it that
is still open (:func:`gpuaas.billing.invoices.late_lines`). Nothing already billed changes.

An invoice is in one currency: the provider book's. Money is nano-units in the database and
decimal text in the API.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.billing.allocation import Aggregate, allocate, fleet_capacity
from gpuaas.billing.focus import Account
from gpuaas.billing.focus import rows as focus_rows
from gpuaas.billing.invoices import (
    HOUR,
    Invoice,
    InvoiceLine,
    LineKind,
    SkuTotal,
    late_lines,
    money,
    usage_lines,
)
from gpuaas.billing.periods import Period, month, month_of, next_month
from gpuaas.service import usage, usage_sums
from gpuaas.service.budgets import NANO, money_text, nano_of
from gpuaas.service.errors import conflict, invalid
from gpuaas.service.models.budgets import (
    AllocationOut,
    AllocationRowOut,
    InvoiceLineIn,
    InvoiceLineOut,
    InvoiceOut,
    ShowbackRow,
    SpotRowOut,
)
from gpuaas.service.models.common import PERIOD_PATTERN
from gpuaas.store.tables import InvoiceLineRow, InvoiceRow, Tenant

DEFAULT_CURRENCY = "USD"
SHOWBACK = {"user": "user", "queue": "queue", "cluster": "cluster", "job": "job_id",
            "sku": "sku"}  # fmt: skip


def period_named(label: str) -> Period:
    """The month ``YYYY-MM``, or a 422 naming ``period`` (matched against the document's
    pattern first: ASCII digits, a month 01-12, a year from 0001)."""
    if re.fullmatch(PERIOD_PATTERN, label) is None:
        raise invalid("period", f"{label[:40]!r} is not a month YYYY-MM (such as 2026-01)")
    try:
        return month(label)
    except ValueError as exc:
        raise invalid("period", str(exc)) from None


def _nano(value: Decimal) -> int:
    return int((value * NANO).to_integral_value())


def _money(nano: int) -> Decimal:
    return Decimal(nano) / NANO


# --- reading the ledger -----------------------------------------------------------------------


def closed_row(session: Session, tenant: str, period: str) -> InvoiceRow | None:
    return session.scalar(
        select(InvoiceRow).where(InvoiceRow.tenant == tenant, InvoiceRow.period == period)
    )


def _stored_lines(session: Session, tenant: str, periods: Sequence[str]) -> list[InvoiceLineRow]:
    if not periods:
        return []
    return list(
        session.scalars(
            select(InvoiceLineRow)
            .where(InvoiceLineRow.tenant == tenant, InvoiceLineRow.period.in_(list(periods)))
            .order_by(InvoiceLineRow.id)
        )
    )


def _line(row: InvoiceLineRow) -> InvoiceLine:
    return InvoiceLine(
        LineKind(row.kind), row.description, _money(row.billed_cost), sku=row.sku,
        price=row.price_id, quantity=Decimal(row.quantity).scaleb(-6) / HOUR, unit=row.unit,
        list_cost=_money(row.list_cost), contracted_cost=_money(row.contracted_cost),
        for_period=row.for_period,
    )  # fmt: skip


def month_totals(session: Session, tenant: str, period: Period) -> tuple[list[SkuTotal], str]:
    """Rating's sums of ``tenant``'s records in ``period``, per SKU and price entry, and the
    currency they are in."""
    found = usage.totals(
        session, period.start, period.end, tenant, by=("sku", "price_id", "currency")
    )
    currencies = {t.group["currency"] for t in found if t.group["currency"]}
    out = [
        SkuTotal(tenant, period.label, t.group["sku"], int(t.group["price_id"]), t.quantity,
                 t.list_cost, t.effective_cost)
        for t in found
    ]  # fmt: skip
    return out, (sorted(currencies)[0] if currencies else DEFAULT_CURRENCY)


def _closed_periods(session: Session, tenant: str) -> list[str]:
    return list(
        session.scalars(
            select(InvoiceRow.period).where(InvoiceRow.tenant == tenant).order_by(InvoiceRow.period)
        )
    )


def _late_for(
    session: Session, tenant: str, period: Period, closed: list[str]
) -> list[InvoiceLine]:
    """Late usage billed on open month ``period``: for each closed month before it whose first
    open successor is ``period``."""
    shut = set(closed)
    out: list[InvoiceLine] = []
    for label in closed:
        if label >= period.label:
            continue
        first_open = next_month(month(label))
        while first_open.label in shut:
            first_open = next_month(first_open)
        if first_open.label != period.label:
            continue
        billed = [_line(r) for r in _stored_lines(session, tenant, _after(label, shut))]
        now_totals, _ = month_totals(session, tenant, month(label))
        out += late_lines(label, now_totals, billed)
    return out


def _after(label: str, closed: set[str]) -> list[str]:
    """``label`` and the closed months after it (where its late usage may have been billed)."""
    return sorted(p for p in closed if p >= label)


def invoice_of(session: Session, tenant: str, label: str) -> Invoice:
    """``tenant``'s invoice for month ``label``: as stored when closed, computed when open."""
    period = period_named(label)
    row = closed_row(session, tenant, label)
    lines = [_line(r) for r in _stored_lines(session, tenant, [label])]
    if row is not None:
        return Invoice(tenant, period, row.currency, tuple(lines), closed=True)
    totals, currency = month_totals(session, tenant, period)
    late = _late_for(session, tenant, period, _closed_periods(session, tenant))
    return Invoice(tenant, period, currency, tuple(usage_lines(totals) + late + lines))


def invoice_out(session: Session, invoice: Invoice) -> InvoiceOut:
    row = closed_row(session, invoice.tenant, invoice.period.label) if invoice.closed else None
    return InvoiceOut(
        tenant=invoice.tenant, period=invoice.period.label,
        period_start=invoice.period.start, period_end=invoice.period.end,
        currency=invoice.currency, state="closed" if invoice.closed else "open",
        total=_text(invoice.total), lines=[_line_out(ln) for ln in invoice.lines],
        closed_at=row.closed_at if row is not None else None,
    )  # fmt: skip


def _text(value: Decimal) -> str:
    return money_text(_nano(value)) or "0"


def _line_out(line: InvoiceLine) -> InvoiceLineOut:
    return InvoiceLineOut(
        kind=line.kind.value, description=line.description, billed_cost=_text(line.billed_cost),
        sku=line.sku, price_id=line.price, quantity=format(line.quantity.normalize(), "f")
        if line.quantity else "0", unit=line.unit, list_cost=_text(line.list_cost),
        contracted_cost=_text(line.contracted_cost), for_period=line.for_period,
    )  # fmt: skip


def invoices_of(session: Session, tenant: str, now: float) -> list[Invoice]:
    """Every month of ``tenant`` with usage, lines or a closed invoice, up to the current one."""
    closed = _closed_periods(session, tenant)
    current = month_of(now).label
    months = set(closed) | {current}
    months |= {t.group["period"] for t in usage.totals(session, None, None, tenant,
                                                        by=("period",))}  # fmt: skip
    months |= set(
        session.scalars(select(InvoiceLineRow.period).where(InvoiceLineRow.tenant == tenant))
    )
    # where late usage of a closed month goes (shown when there is some)
    late = {next_month(month(label)).label for label in closed} - months
    found = [invoice_of(session, tenant, label) for label in sorted(months | late)]
    return [i for i in found if i.lines or i.period.label in months]


# --- writing ----------------------------------------------------------------------------------


def _refuse_closed(session: Session, tenant: str, label: str) -> None:
    row = closed_row(session, tenant, label)
    if row is not None:
        raise conflict(
            f"the invoice of {tenant} for period {label} is closed: it never changes "
            "(add a credit or an adjustment to an open period)",
            "period",
        )


def add_line(
    session: Session, tenant: str, label: str, body: InvoiceLineIn, who: str, now: float
) -> Invoice:
    """A credit (taken off) or an adjustment (added) on open month ``label``."""
    period = period_named(label)
    _refuse_closed(session, tenant, label)
    if period.start > now:
        raise invalid("period", f"{label} has not begun")
    try:
        kind = LineKind(body.kind)
    except ValueError:
        kind = None
    if kind not in (LineKind.CREDIT, LineKind.ADJUSTMENT):
        raise invalid("kind", f"{body.kind!r}: credit or adjustment (usage comes from metering)")
    amount = nano_of("amount", body.amount, allow_none=False)
    assert amount is not None
    if amount == 0:
        raise invalid("amount", "must be more than 0")
    billed = -amount if kind is LineKind.CREDIT else amount
    session.add(
        InvoiceLineRow(
            tenant=tenant, period=label, kind=kind.value, description=body.description, sku="",
            price_id=None, quantity=0, unit="", list_cost=0, contracted_cost=0,
            billed_cost=billed, for_period="", created_at=now, created_by=who,
        )
    )  # fmt: skip
    session.flush()
    return invoice_of(session, tenant, label)


def close(session: Session, tenant: str, label: str, who: str, now: float) -> Invoice:
    """Close ``tenant``'s month ``label`` (ended): store its usage and late-usage lines and
    the invoice; 409 when it is closed already or has not ended."""
    period = period_named(label)
    _refuse_closed(session, tenant, label)
    if period.end > now:
        raise conflict(f"period {label} has not ended: it can be closed from its end", "period")
    invoice = invoice_of(session, tenant, label)
    for line in invoice.lines:
        if line.kind is LineKind.USAGE or line.late:
            session.add(
                InvoiceLineRow(
                    tenant=tenant, period=label, kind=line.kind.value,
                    description=line.description, sku=line.sku, price_id=line.price,
                    quantity=int((line.quantity * HOUR).scaleb(6).to_integral_value()),
                    unit=line.unit, list_cost=_nano(line.list_cost),
                    contracted_cost=_nano(line.contracted_cost),
                    billed_cost=_nano(line.billed_cost), for_period=line.for_period,
                    created_at=now, created_by=who,
                )
            )  # fmt: skip
    session.add(
        InvoiceRow(
            tenant=tenant,
            period=label,
            currency=invoice.currency,
            total=_nano(invoice.total),
            closed_at=now,
            closed_by=who,
        )
    )
    session.flush()
    return invoice_of(session, tenant, label)


# --- showback, allocation, FOCUS --------------------------------------------------------------


def showback(session: Session, tenant: str, label: str, by: str) -> list[ShowbackRow]:
    """``tenant``'s month ``label`` by user, queue, cluster, job or SKU."""
    period = period_named(label)
    column = SHOWBACK.get(by)
    if column is None:
        raise invalid("by", f"{by!r}: one of {', '.join(SHOWBACK)}")
    found = usage_sums.totals(session, period.start, period.end, tenant, by=(column,))
    rows = [
        ShowbackRow(name=str(t.group[column] or "-"), cost=_text(money(t.effective_cost)),
                    list_cost=_text(money(t.list_cost)),
                    quantity=format(t.unit_hours.normalize(), "f"))
        for t in found
    ]  # fmt: skip
    return sorted(rows, key=lambda r: -Decimal(r.cost))


def allocation(
    session: Session, start: float, end: float, by: str, include_idle: bool, share_idle: bool
) -> AllocationOut:
    """The fleet's allocation view of ``[start, end)`` (provider): capacity priced at the
    provider book's on-demand list price in force at ``start``."""
    from gpuaas.service.fleet import load_nodes

    if end <= start:
        raise invalid("end", f"must be after start ({start})")
    if end - start > 93 * 86400:
        raise invalid("end", "a window is at most 93 days")
    try:
        aggregate = Aggregate(by)
    except ValueError:
        raise invalid(
            "aggregate", f"{by!r}: one of {', '.join(a.value for a in Aggregate)}"
        ) from None
    book: dict[str, list[Any]] = {}
    for entry in usage.entries(session, usage.PROVIDER_BOOK):
        book.setdefault(entry.sku, []).append(entry)

    def per_hour(sku: str) -> Decimal:
        from gpuaas.billing.metering import in_force

        entry = in_force(book.get(sku, []), start)  # the device's on-demand SKU
        return entry.list_per_hour if entry is not None else Decimal(0)

    devices = fleet_capacity(load_nodes(session), end - start, per_hour)
    records = [s.record for s in usage.records(session, None, start - 3600, end)]
    view = allocate(devices, records, start, end, aggregate, include_idle, share_idle)
    return AllocationOut(
        start=start, end=end, aggregate=aggregate.value,
        rows=[AllocationRowOut(name=r.name, sku=r.sku, hours=_hours(r.seconds),
                               cost=_text(r.cost), shared_idle=_text(r.shared_idle),
                               total=_text(r.total)) for r in view.rows],
        spot=[SpotRowOut(name=r.name, sku=r.sku, hours=_hours(r.seconds), cost=_text(r.cost),
                         billed=_text(r.billed)) for r in view.spot],
        capacity={k: _text(v) for k, v in view.capacity.items()},
        allocated={k: _text(v) for k, v in view.allocated.items()},
        idle={k: _text(v) for k, v in view.idle.items()},
    )  # fmt: skip


def _hours(seconds: Decimal) -> str:
    return format((seconds / HOUR).quantize(Decimal("1e-6")).normalize(), "f")


def focus_of(session: Session, tenant: Tenant, label: str) -> list[dict[str, Any]]:
    """The FOCUS rows of ``tenant``'s invoice for month ``label``."""
    invoice = invoice_of(session, tenant.name, label)
    period = invoice.period
    records = [s.record for s in usage.records(session, tenant.name, period.start, period.end)]
    return focus_rows(invoice, Account(str(tenant.id), tenant.name), records)
