"""Cutting held time into usage records, exactly.

Time is counted in whole microseconds (``us``): a POSIX time ``t`` is ``round(t * 1e6)``.
An interval ``[start, end)`` is cut at every whole UTC hour; a billing period is a calendar
month in UTC, and a month always starts on a whole hour, so a piece never spans two periods
either. The pieces of an interval are contiguous, so their lengths add up to exactly
``end - start``, whatever the cuts: a job's billed device-time is the time it held the device,
never a second more or less.

Quantities are *micro-units*: unit-seconds x 10^6 (a whole GPU held one second is 1,000,000;
a quarter time-slice share held one second 250,000; a MIG 1g instance held one second is one
MIG-SKU unit-second, 1,000,000, priced by its SKU). Money is *nano-units* of the currency
(10^-9): a price per unit-hour and a cost are integers, so sums in SQL are exact and a
:class:`~decimal.Decimal` is made from them only at the edge (:func:`money`).
A piece's cost is ``quantity x price / 3600`` rounded half-even to the nano-unit, once.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gpuaas.model.billing import PriceEntry, UsageRecord

US = 1_000_000  # microseconds per second
HOUR_US = 3600 * US
NANO = 10**9  # nano-units per unit of currency
_HOUR_US_NANO = 3600 * US  # divide quantity(micro-unit-seconds) x price(nano/hour) by this


def to_us(t: float) -> int:
    """A POSIX time in whole microseconds."""
    return round(t * US)


def hour_floor(t_us: int) -> int:
    return t_us - t_us % HOUR_US


def pieces(start_us: int, end_us: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut at whole UTC hours (hence at month boundaries too); nothing when
    the interval is empty."""
    a = start_us
    while a < end_us:
        b = min(end_us, hour_floor(a) + HOUR_US)
        yield a, b
        a = b


def period_of(t: float) -> str:
    """The billing period (a UTC calendar month, ``YYYY-MM``) holding ``t``."""
    when = datetime.fromtimestamp(t, UTC)
    return f"{when.year:04d}-{when.month:02d}"


def period_bounds(period: str) -> tuple[float, float]:
    """``[start, end)`` of a ``YYYY-MM`` period as POSIX seconds; ValueError when malformed."""
    year_text, _, month_text = period.partition("-")
    if len(year_text) != 4 or len(month_text) != 2:
        raise ValueError(f"{period!r} is not a period (YYYY-MM)")
    year, month = int(year_text), int(month_text)
    if not 1 <= month <= 12:
        raise ValueError(f"{period!r}: month must be 01..12")
    start = calendar.timegm((year, month, 1, 0, 0, 0))
    # the month's length, not the next month's first day: 9999-12 has no next month in datetime
    end = start + calendar.monthrange(year, month)[1] * 86_400
    return float(start), float(end)


def quantity(length_us: int, fraction: Fraction) -> int:
    """Micro-units of ``length_us`` held at ``fraction`` of one unit (rounded half-even)."""
    if fraction == 1:
        return length_us
    return round(length_us * fraction)


def cost(quantity_micro: int, price_nano_per_hour: int) -> int:
    """Nano-units of money for ``quantity_micro`` at ``price_nano_per_hour``, half-even."""
    return round(Fraction(quantity_micro * price_nano_per_hour, _HOUR_US_NANO))


def money(nano: int) -> Decimal:
    """Nano-units as a :class:`Decimal` of the currency (exact)."""
    return Decimal(nano).scaleb(-9)


def nano(amount: Decimal) -> int:
    """A :class:`Decimal` amount as nano-units; ValueError when it has finer digits."""
    scaled = amount.scaleb(9)
    if scaled != scaled.to_integral_value():
        raise ValueError("has more than 9 decimal places")
    return int(scaled)


@dataclass(frozen=True, slots=True)
class Held:
    """One thing a pod of a job holds while it is admitted: a device (or its CPU, its
    memory) named ``device`` on ``node``, as SKU ``sku``, ``fraction`` of one unit."""

    pod: str
    device: str
    node: str
    sku: str
    fraction: Fraction


@dataclass(frozen=True, slots=True)
class Piece:
    """One usage record before pricing."""

    key: str
    held: Held
    start_us: int
    end_us: int
    quantity: int  # micro-units


def record_key(job: int, attempt: int, pod: str, device: str, start_us: int) -> str:
    """The idempotent key of a record: the same piece of the same device of the same run of
    a job has the same key, so writing it again (a replay after a restart) stores nothing."""
    return f"{job}/{attempt}/{pod}/{device}/{start_us}"


def cut(job: int, attempt: int, held: Sequence[Held], start_us: int, end_us: int) -> list[Piece]:
    """Every record of ``held`` from ``start_us`` to ``end_us``, hour by hour."""
    out: list[Piece] = []
    spans = list(pieces(start_us, end_us))
    for item in held:
        for a, b in spans:
            out.append(
                Piece(record_key(job, attempt, item.pod, item.device, a), item, a, b,
                      quantity(b - a, item.fraction))
            )  # fmt: skip
    return out


def cut_volume(
    tenant: str, volume_id: int, name: str, held: Held, start_us: int, end_us: int
) -> list[Piece]:
    """The records of volume ``name`` (``held``) from ``start_us`` to ``end_us``, hour by
    hour, keyed ``volume/<tenant>/<name>/<id>/<start>`` (a volume is no job: a key space of
    its own, where the id tells apart a volume deleted and made again under its name)."""
    key, size = f"volume/{tenant}/{name}/{volume_id}", held.fraction
    return [
        Piece(f"{key}/{a}", held, a, b, quantity(b - a, size)) for a, b in pieces(start_us, end_us)
    ]


def in_force(entries: Sequence[PriceEntry], t: float) -> PriceEntry | None:
    """The entry of one SKU in one book that prices time ``t``: the latest ``valid_from``
    at or before ``t`` whose ``valid_until`` (when set) is after ``t``. An entry without
    ``valid_until`` lasts until the next entry starts: a new price is a new entry, and the
    entry before it never changes."""
    best: PriceEntry | None = None
    for entry in entries:
        if entry.valid_from <= t and (best is None or entry.valid_from > best.valid_from):
            best = entry
    if best is None or (best.valid_until is not None and t >= best.valid_until):
        return None
    return best


# --- rating: a piece priced, as the record that is stored -----------------------------------
#
# The service (``service/usage.py``) and the simulator (``sim/metering.py``) both turn a piece
# into a record here, so a record is priced by one rule: the entry of the SKU in force at the
# piece's *start* (a piece lies within one hour, so a price change on a whole hour never splits
# one; a change within an hour prices the hour's later pieces), list and effective cost each
# ``quantity x price / 3600`` rounded half-even to the nano-unit, once.


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a piece is: a run of a job in the simulator; the service passes a job's open row
    (``usage_open``), which has the same fields."""

    tenant: str
    user: str
    queue: str
    cluster: str
    job_id: int
    attempt: int


def book_of(entries: Iterable[PriceEntry]) -> dict[str, list[PriceEntry]]:
    """A book's entries by SKU (what :func:`stored` looks a piece's SKU up in)."""
    out: dict[str, list[PriceEntry]] = {}
    for entry in entries:
        out.setdefault(entry.sku, []).append(entry)
    return out


def rate(piece: Piece, prices: Sequence[PriceEntry]) -> tuple[PriceEntry | None, int, int]:
    """The entry in force at ``piece``'s start among ``prices`` (its SKU's entries) and the
    piece's list and effective cost in nano-units (0 and 0 when no entry prices it)."""
    entry = in_force(prices, piece.start_us / US)
    if entry is None:
        return None, 0, 0
    return (entry, cost(piece.quantity, nano(entry.list_per_hour)),
            cost(piece.quantity, nano(entry.contracted_per_hour)))  # fmt: skip


def stored(
    owner: Owner, piece: Piece, prices: Sequence[PriceEntry], no_currency: str = ""
) -> dict[str, Any]:
    """The stored columns of ``piece``'s record (integers: micro-units, nano-units), priced by
    ``prices`` (see above); utilisation is the caller's (telemetry is I/O)."""
    start = piece.start_us / US
    entry, list_cost, effective = rate(piece, prices)
    return {
        "key": piece.key, "tenant": owner.tenant, "user": owner.user, "queue": owner.queue,
        "cluster": owner.cluster, "job_id": owner.job_id, "attempt": owner.attempt,
        "pod": piece.held.pod, "device": piece.held.device, "node": piece.held.node,
        "sku": piece.held.sku, "period": period_of(start), "start": start,
        "end": piece.end_us / US, "quantity": piece.quantity,
        "price_id": entry.id if entry is not None else 0,
        "currency": entry.currency if entry is not None else no_currency,
        "list_cost": list_cost, "effective_cost": effective,
    }  # fmt: skip


def usage_record(columns: Mapping[str, Any]) -> UsageRecord:
    """A record's stored columns as the model's :class:`UsageRecord` (Decimals: quantity in
    unit-seconds, costs in the currency)."""
    c = columns
    return UsageRecord(
        key=c["key"], tenant=c["tenant"], user=c["user"], queue=c["queue"],
        cluster=c["cluster"], job=c["job_id"], attempt=c["attempt"], pod=c["pod"],
        device=c["device"], node=c["node"], sku=c["sku"], start=c["start"], end=c["end"],
        quantity=Decimal(c["quantity"]).scaleb(-6), price=c["price_id"],
        list_cost=money(c["list_cost"]), effective_cost=money(c["effective_cost"]),
        utilization=c.get("utilization"),
    )  # fmt: skip
