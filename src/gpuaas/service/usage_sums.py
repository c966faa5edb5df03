"""Usage totals for reading (the usage summary, showback), kept as running sums.

A busy tenant's month is tens of thousands of usage records, and summing them is a scan of
every one (~120 ms of SQLite for 43,000 records, docs/benchmarks.md), on every read of the
usage page and its polls. Records are only ever added (metering inserts; nothing updates or
deletes one), so a sum taken up to record id N stays right for those records: a later read
sums only the records added since (ids in ``(N, newest]``, read along the primary key) and
adds them. Sums are kept per database and query (tenant, window, grouping, filters).

Ids are given at insert and a PostgreSQL transaction may commit after one that took a later
id, so a record committed out of id order could fall behind a sum already taken; each sum
is therefore read whole again after :data:`REREAD` seconds, which bounds how long such a
record can be missing from these reads. Invoices and every write-side check call
:func:`gpuaas.service.usage.totals` directly and always sum the records themselves.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.service import usage
from gpuaas.store.tables import UsageRow

#: seconds after which a kept sum is read whole again (see the module docstring)
REREAD = 60.0
#: sums kept at most (least recently used dropped first)
KEPT = 256


@dataclass(frozen=True, slots=True)
class _Sums:
    upto: int
    read_at: float
    totals: tuple[usage.Total, ...]


_kept: OrderedDict[tuple[Any, ...], _Sums] = OrderedDict()
_lock = threading.Lock()


def totals(
    session: Session,
    start: float | None = None,
    end: float | None = None,
    tenant: str | None = None,
    by: Sequence[str] = ("tenant", "sku", "currency"),
    **filters: Any,
) -> list[usage.Total]:
    """:func:`gpuaas.service.usage.totals`, from a kept sum brought up to date."""
    newest = session.scalar(select(func.max(UsageRow.id))) or 0
    key = (
        str(session.get_bind().url),
        tenant,
        start,
        end,
        tuple(by),
        tuple(sorted(filters.items())),
    )
    with _lock:
        kept = _kept.get(key)
    clock = time.monotonic()
    if kept is not None and kept.upto == newest and clock - kept.read_at <= REREAD:
        fresh = kept
    elif kept is not None and kept.upto < newest and clock - kept.read_at <= REREAD:
        added = usage.totals(session, start, end, tenant, by=by, ids=(kept.upto, newest), **filters)
        fresh = _Sums(newest, kept.read_at, _merged(kept.totals, added))
    else:
        whole = usage.totals(session, start, end, tenant, by=by, ids=(0, newest), **filters)
        fresh = _Sums(newest, clock, tuple(sorted(whole, key=_order)))
    with _lock:
        _kept[key] = fresh
        _kept.move_to_end(key)
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return list(fresh.totals)


def _merged(kept: Sequence[usage.Total], added: Sequence[usage.Total]) -> tuple[usage.Total, ...]:
    """Both lists' totals, a group's summed (Decimals: exact), in the groups' order."""
    out = {tuple(t.group.items()): t for t in kept}
    for t in added:
        k = tuple(t.group.items())
        was = out.get(k)
        out[k] = (
            t
            if was is None
            else usage.Total(
                was.group,
                was.records + t.records,
                was.quantity + t.quantity,
                was.list_cost + t.list_cost,
                was.effective_cost + t.effective_cost,
            )
        )
    return tuple(sorted(out.values(), key=_order))


def _order(total: usage.Total) -> tuple[tuple[bool, Any], ...]:
    """The groups' order, by each column (a NULL first, on every database)."""
    return tuple((v is not None, v) for v in total.group.values())


def forget() -> None:
    """Drop every kept sum (tests, a benchmark's "first" request)."""
    with _lock:
        _kept.clear()
