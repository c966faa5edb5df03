"""The price book: versioned prices of SKUs, immutable once they priced usage.

Two kinds of book (docs/billing.md). The **provider's** (``provider``, written by the provider
admin at ``/v1/prices``) prices every usage record as it is written: list and contracted price
per unit-hour of a SKU. A **tenant's chargeback book** (``tenant/<name>``, written by that
tenant's admin at ``/v1/tenants/{t}/prices``) is the internal price the tenant charges its
users; it rates the tenant's records (:func:`chargeback`) and changes nothing the provider
bills.

An entry prices one SKU from ``valid_from``; without ``valid_until`` it lasts until the next
entry of the same SKU in the same book starts, so a price change is a *new* entry and the old
one never changes. Refused, naming the field: a negative price or more than 9 decimal places
(``listPerHour``, ``contractedPerHour``), an unknown currency (``currency``), a SKU that is
not one (``sku``), ``validUntil`` not after ``validFrom``, and an entry whose validity overlaps
another's explicit period or starts when another starts (``validFrom``, 422). Refused with 409,
naming the entry: changing or deleting an entry that priced usage, and a new entry that would
take over time an entry already priced (its ``validFrom`` before that usage).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from gpuaas.billing.metering import cost, in_force, money, nano
from gpuaas.billing.skus import parse_sku
from gpuaas.model.billing import PriceEntry
from gpuaas.service import governance as gv
from gpuaas.service.errors import conflict, invalid, not_found
from gpuaas.service.governance_kinds import At, _check_limit
from gpuaas.service.models.billing import PRICE_CURRENCIES, PriceIn, PriceOut
from gpuaas.service.models.common import TIME_PATTERN, TIME_WORDS, Page
from gpuaas.service.usage import PROVIDER_BOOK, Total, entries, price_entry, totals
from gpuaas.store.tables import PriceEntryRow, UsageRow

#: ISO 4217 codes a price may be in (the document's enum).
CURRENCIES = frozenset(PRICE_CURRENCIES)


_TIME = re.compile(TIME_PATTERN)

#: The highest price per unit-hour: a record's cost (an hour of 2 TiB of memory at this price)
#: still fits the 64-bit integer of nano-units it is stored as.
MAX_PRICE = Decimal(1_000_000)


def book_of(at: At) -> str:
    """The book a scope writes: the provider's, or the tenant's chargeback book."""
    return PROVIDER_BOOK if at.tenant is None else f"tenant/{at.tenant.name}"


def _when(field: str, value: float | str | None) -> float | None:
    """A time as the document says it (``models.common.TIME_PATTERN``: text is matched
    first), as POSIX seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        if _TIME.fullmatch(value) is None:
            raise invalid(field, f"{value[:100]!r} is not {TIME_WORDS}")
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:  # the pattern holds only what it reads: never, but say so
            raise invalid(field, f"{value!r} is not {TIME_WORDS}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value) or value < 0:
        raise invalid(field, f"must be a time (POSIX seconds), got {value}")
    return float(value)


def _price(field: str, value: Decimal | str) -> int:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise invalid(field, f"{value!r} is not a decimal number") from None
    if not amount.is_finite():
        raise invalid(field, f"must be a finite number, got {value}")
    if amount < 0:
        raise invalid(field, f"must not be negative, got {amount}")
    if amount > MAX_PRICE:
        raise invalid(field, f"must be at most {MAX_PRICE} per unit-hour, got {amount}")
    try:
        return nano(amount)
    except ValueError as exc:
        raise invalid(field, f"{amount} {exc}") from None


def _values(body: PriceIn) -> dict[str, Any]:
    sku = parse_sku(body.sku)
    if sku is None or sku.id != body.sku:
        raise invalid(
            "sku",
            f"{body.sku!r} is not a SKU: <GPU model>/<whole|mig|timeslice|mps>[/<profile>]"
            "@<on-demand|reserved|idle-pool>, or cpu/cpu@..., memory/memory@..., "
            "storage/storage[/<storage class>]@...",
        )
    if body.currency not in CURRENCIES:
        raise invalid("currency", f"unknown currency {body.currency!r} (ISO 4217, e.g. USD)")
    listed = _price("listPerHour", body.list_per_hour)
    contracted = listed
    if body.contracted_per_hour is not None:
        contracted = _price("contractedPerHour", body.contracted_per_hour)
    valid_from = _when("validFrom", body.valid_from)
    valid_until = _when("validUntil", body.valid_until)
    assert valid_from is not None
    if valid_until is not None and valid_until <= valid_from:
        raise invalid("validUntil", "must be after validFrom")
    return {
        "sku": body.sku, "list_per_hour": listed, "contracted_per_hour": contracted,
        "currency": body.currency, "valid_from": valid_from, "valid_until": valid_until,
        "description": body.description,
    }  # fmt: skip


def _overlap(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    """Whether two validity periods collide: the same start, or one starts inside the
    other's *explicit* period (an open-ended entry yields to the next one by design)."""
    if a[0] == b[0]:
        return True
    return (b[1] is not None and b[0] < a[0] < b[1]) or (a[1] is not None and a[0] < b[0] < a[1])


def _end(entry: PriceEntry, book: list[PriceEntry]) -> float:
    """Where ``entry`` stops pricing: its ``valid_until``, or the next entry's start."""
    later = [e.valid_from for e in book if e.valid_from > entry.valid_from]
    ends = [t for t in (entry.valid_until, min(later, default=None)) if t is not None]
    return min(ends, default=math.inf)


def used_from(session: Session, entry: PriceEntry, since: float, book: list[PriceEntry]) -> bool:
    """Whether usage starting at or after ``since`` was priced by ``entry`` (a provider
    entry: records name it; a chargeback entry: the tenant's records of its SKU in its
    period)."""
    c = UsageRow.__table__.c
    if entry.book == PROVIDER_BOOK:
        where = [c.price_id == entry.id, c.start >= since]
    else:
        tenant = entry.book.removeprefix("tenant/")
        where = [c.tenant == tenant, c.sku == entry.sku, c.start >= max(since, entry.valid_from)]
        end = _end(entry, book)
        if end != math.inf:
            where.append(c.start < end)
    return bool(session.scalar(select(exists().where(*where))))


def _check_book(
    session: Session, book: str, values: dict[str, Any], replacing: int | None = None
) -> None:
    """Overlaps with the book's other entries for the SKU (422), and a new start that would
    take over time an entry already priced (409)."""
    others = [e for e in entries(session, book, [values["sku"]]) if e.id != replacing]
    mine = (values["valid_from"], values["valid_until"])
    for other in others:
        if _overlap(mine, (other.valid_from, other.valid_until)):
            raise invalid(
                "validFrom",
                f"overlaps entry {_name(session, other.id)} of {values['sku']} in book {book}"
                f" (from {other.valid_from}"
                + (f" until {other.valid_until})" if other.valid_until is not None else ")"),
            )
    before = in_force(others, values["valid_from"])
    if before is not None and used_from(session, before, values["valid_from"], others):
        raise conflict(
            f"price entry {_name(session, before.id)} already priced usage of {values['sku']} "
            f"from {values['valid_from']} on; a new price must start after that usage",
            "validFrom",
        )


def _name(session: Session, entry_id: int) -> str:
    return session.scalar(select(PriceEntryRow.name).where(PriceEntryRow.id == entry_id)) or str(
        entry_id
    )


def _out(session: Session, row: PriceEntryRow, book: list[PriceEntry] | None = None) -> PriceOut:
    entry = price_entry(row)
    if book is None:
        book = entries(session, row.book, [row.sku])
    return PriceOut(
        id=row.id, name=row.name, book=row.book,
        tenant=row.book.removeprefix("tenant/") if row.book != PROVIDER_BOOK else None,
        sku=row.sku, list_per_hour=str(entry.list_per_hour.normalize()),
        contracted_per_hour=str(entry.contracted_per_hour.normalize()), currency=row.currency,
        valid_from=row.valid_from, valid_until=row.valid_until, description=row.description,
        used=used_from(session, entry, entry.valid_from, book), created_at=row.created_at,
        updated_at=row.updated_at,
    )  # fmt: skip


class Prices:
    """The price book: the provider's (``/v1/prices``, what tenants pay; written by the
    provider admin, read by anyone) and a tenant's internal chargeback book for its users
    (``/v1/tenants/{t}/prices``, written by its admin). An entry prices one SKU per unit-hour
    from ``validFrom`` (until ``validUntil`` or the SKU's next entry); once it priced usage it
    never changes: a new price is a new entry (docs/billing.md)."""

    kind = "Price"

    def _row(self, at: At, name: str) -> PriceEntryRow:
        book = book_of(at)
        row = at.session.scalar(
            select(PriceEntryRow).where(PriceEntryRow.book == book, PriceEntryRow.name == name)
        )
        if row is None:
            raise not_found(f"price {name} in book {book}")
        return row

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        _check_limit(limit)
        stmt = select(PriceEntryRow).where(PriceEntryRow.book == book_of(at))
        if filters.get("sku"):
            stmt = stmt.where(PriceEntryRow.sku == filters["sku"])
        if after is not None:
            stmt = stmt.where(PriceEntryRow.name > after)
        rows = list(at.session.scalars(stmt.order_by(PriceEntryRow.name).limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            items=[_out(at.session, r) for r in rows], next=rows[-1].name if more and rows else None
        )

    def get(self, at: At, name: str) -> PriceOut:
        return _out(at.session, self._row(at, name))

    def create(self, at: At, body: PriceIn) -> PriceOut:
        if body.name is None:
            raise invalid("name", "is required")
        name = gv.check_name("name", body.name, label=True)
        book = book_of(at)
        values = _values(body)
        taken = at.session.scalar(
            select(PriceEntryRow.id).where(PriceEntryRow.book == book, PriceEntryRow.name == name)
        )
        if taken is not None:
            raise conflict(f"price {name} already exists in book {book}", "name")
        _check_book(at.session, book, values)
        now = time.time()
        row = PriceEntryRow(book=book, name=name, created_at=now, updated_at=now, **values)
        at.session.add(row)
        at.session.flush()
        return _out(at.session, row)

    def update(self, at: At, name: str, body: PriceIn) -> PriceOut:
        if body.name is not None and body.name != name:
            raise invalid("name", f"{body.name!r} differs from the name in the path {name!r}")
        row = self._row(at, name)
        self._refuse_used(at.session, row, "changed")
        values = _values(body)
        _check_book(at.session, row.book, values, replacing=row.id)
        for key, value in values.items():
            setattr(row, key, value)
        row.updated_at = time.time()
        at.session.flush()
        return _out(at.session, row)

    def delete(self, at: At, name: str) -> None:
        row = self._row(at, name)
        self._refuse_used(at.session, row, "deleted")
        at.session.delete(row)

    @staticmethod
    def _refuse_used(session: Session, row: PriceEntryRow, what: str) -> None:
        entry = price_entry(row)
        if used_from(session, entry, entry.valid_from, entries(session, row.book, [row.sku])):
            raise conflict(
                f"price {row.name} in book {row.book} priced usage already and cannot be "
                f"{what}; add a new entry with a later validFrom instead",
                "name",
            )


def chargeback(
    session: Session,
    tenant: str,
    start: float | None = None,
    end: float | None = None,
    by: tuple[str, ...] = ("user", "sku"),
) -> list[Total]:
    """The tenant's usage in ``[start, end)`` rated with its own chargeback book, per group
    (default per user x SKU): for each entry of the book, the records of its SKU that start
    while it is in force, summed per group in SQL and priced once per group and entry (list
    and contracted price). Records of a SKU the book does not price are left out."""
    book = entries(session, f"tenant/{tenant}")
    sums: dict[tuple[Any, ...], list[int]] = {}
    groups = tuple(dict.fromkeys((*by, "sku")))
    for entry in book:
        lo = max(entry.valid_from, start if start is not None else -math.inf)
        hi = min(_end(entry, [e for e in book if e.sku == entry.sku]),
                 end if end is not None else math.inf)  # fmt: skip
        if lo >= hi:
            continue
        for total in totals(session, lo, None if hi == math.inf else hi, tenant, by=groups,
                            sku=entry.sku):  # fmt: skip
            quantity = int(total.quantity.scaleb(6))
            key = tuple(total.group[g] for g in groups)
            acc = sums.setdefault(key, [0, 0, 0, 0])
            acc[0] += total.records
            acc[1] += quantity
            acc[2] += cost(quantity, nano(entry.list_per_hour))
            acc[3] += cost(quantity, nano(entry.contracted_per_hour))
    return [
        Total(dict(zip(groups, key, strict=True)), n, Decimal(q).scaleb(-6), money(lc), money(ec))
        for key, (n, q, lc, ec) in sorted(sums.items())
    ]
