"""Usage records and their totals, and the idle pool's usage (docs/billing.md).

``GET /v1/usage`` and ``/v1/usage/summary`` are the provider's (platform roles), over every
tenant or one (``tenant=``); ``GET /v1/tenants/{t}/usage`` and ``.../usage/summary`` a tenant's
(its members; a tenant-user sees only its own usage, as with jobs). A window is a billing
``period`` (``YYYY-MM``, UTC) or ``start``/``end`` (POSIX seconds or ISO-8601); a record is in
it when it *starts* in it (a record never spans a whole hour, so whole-hour windows take whole
records). ``GET /v1/idle-pool/usage`` (provider only): the idle-capacity pool's GPU-seconds by
GPU model, MIG profile and period.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Query

from gpuaas.billing.metering import period_bounds
from gpuaas.model.billing import UsageRecord
from gpuaas.service import usage, usage_sums
from gpuaas.service.auth import Need, Principal, Role, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import invalid
from gpuaas.service.models.billing import (
    PoolUsageList,
    PoolUsageOut,
    UsagePage,
    UsageRecordOut,
    UsageSummary,
    UsageTotalOut,
)
from gpuaas.service.models.common import PERIOD_PATTERN, TIME_PATTERN
from gpuaas.service.prices import _when

router = APIRouter(prefix="/v1", tags=["usage"])

Period = Annotated[
    str | None,
    Query(
        description="a billing period, YYYY-MM (UTC)",
        json_schema_extra={"pattern": PERIOD_PATTERN},
    ),
]
#: a time as ``prices._when`` reads it (text matched against the pattern first)
_TIME = {"pattern": TIME_PATTERN}
Start = Annotated[
    str | None,
    Query(description="window start: POSIX seconds or ISO-8601", json_schema_extra=_TIME),
]
End = Annotated[str | None, Query(description="window end (exclusive)", json_schema_extra=_TIME)]
Limit = Annotated[
    int,
    Query(description="page size (1..10000)", json_schema_extra={"minimum": 1, "maximum": 10000}),
]
After = Annotated[
    str | None, Query(min_length=1, description="cursor: the `next` of the previous page")
]
By = Annotated[
    str, Query(description=f"comma-separated columns to total by ({', '.join(usage.GROUPS)})")
]
Filter = Annotated[str | None, Query()]
JobQ = Annotated[int | None, Query(ge=1, le=2**63 - 1)]


def window(period: str | None, start: str | None, end: str | None) -> tuple[float | None, ...]:
    """The ``[start, end)`` a request asks for (422 naming the parameter)."""
    if period is not None:
        if start is not None or end is not None:
            raise invalid("period", "give a period or start/end, not both")
        try:
            return period_bounds(period)
        except ValueError as exc:
            raise invalid("period", str(exc)) from None
    lo, hi = _when("start", start), _when("end", end)
    if lo is not None and hi is not None and hi <= lo:
        raise invalid("end", "must be after start")
    return lo, hi


def record_out(row_id: int, r: UsageRecord, currency: str) -> UsageRecordOut:
    return UsageRecordOut(
        id=row_id, key=r.key, tenant=r.tenant, user=r.user, queue=r.queue, cluster=r.cluster,
        job=r.job, attempt=r.attempt, pod=r.pod, device=r.device, node=r.node, sku=r.sku,
        start=r.start, end=r.end, quantity=_text(r.quantity), price=r.price, currency=currency,
        list_cost=_text(r.list_cost), effective_cost=_text(r.effective_cost),
        utilization=r.utilization,
    )  # fmt: skip


def _text(value: Decimal) -> str:
    """A Decimal as plain text, without an exponent (``0E-9`` reads as ``0``)."""
    return f"{value.normalize():f}"


def _page(
    session: SessionDep, tenant: str | None, bounds: tuple[float | None, ...], limit: int,
    after: str | None, **filters: object,
) -> UsagePage:  # fmt: skip
    if not 1 <= limit <= 10_000:
        raise invalid("limit", "must be 1..10000")
    try:
        cursor = int(after) if after is not None else 0
    except ValueError:
        raise invalid("after", f"{after!r} is not a cursor") from None
    start, end = bounds
    found = usage.records(session, tenant, start, end, after=cursor, limit=limit + 1,
                          **filters)  # type: ignore[arg-type]  # fmt: skip
    more = len(found) > limit
    found = found[:limit]
    items = [record_out(s.id, s.record, s.currency) for s in found]
    return UsagePage(items=items, next=str(found[-1].id) if more and found else None)


def _summary(
    session: SessionDep, tenant: str | None, bounds: tuple[float | None, ...], by: str,
    **filters: object,
) -> UsageSummary:  # fmt: skip
    groups = [g.strip() for g in by.split(",") if g.strip()]
    unknown = [g for g in groups if g not in usage.GROUPS]
    if unknown or not groups:
        raise invalid("by", f"unknown column {unknown} (allowed: {', '.join(usage.GROUPS)})")
    start, end = bounds
    totals = usage_sums.totals(session, start, end, tenant, by=groups, **filters)
    return UsageSummary(
        start=start, end=end, by=groups,
        totals=[
            UsageTotalOut(group=t.group, records=t.records, quantity=_text(t.quantity),
                          unit_hours=_text(t.unit_hours.quantize(Decimal("0.000001"))),
                          list_cost=_text(t.list_cost), effective_cost=_text(t.effective_cost))
            for t in totals
        ],
    )  # fmt: skip


def _own(p: Principal, tenant_id: int, user: str | None) -> str | None:
    """A tenant-user sees only its own usage: its name, whatever ``user`` it asked for."""
    if not p.sees_everything and p.role_in(tenant_id) is Role.TENANT_USER:
        return p.user
    return user


@router.get("/usage", response_model=UsagePage)
def provider_usage(
    session: SessionDep, p: PrincipalDep, tenant: Filter = None, period: Period = None,
    start: Start = None, end: End = None, user: Filter = None, job: JobQ = None,
    sku: Filter = None, cluster: Filter = None, queue: Filter = None, limit: Limit = 1000,
    after: After = None,
) -> UsagePage:  # fmt: skip
    """Usage records of every tenant (or ``tenant``), oldest first (provider only)."""
    require_platform(p, write=False)
    return _page(session, tenant, window(period, start, end), limit, after, user=user, job=job,
                 sku=sku, cluster=cluster, queue=queue)  # fmt: skip


@router.get("/usage/summary", response_model=UsageSummary)
def provider_summary(
    session: SessionDep, p: PrincipalDep, tenant: Filter = None, period: Period = None,
    start: Start = None, end: End = None, by: By = "tenant,sku,currency",
) -> UsageSummary:  # fmt: skip
    """Totals of the window's records per group (default tenant x SKU x currency)."""
    require_platform(p, write=False)
    return _summary(session, tenant, window(period, start, end), by)


@router.get("/tenants/{tenant}/usage", response_model=UsagePage)
def tenant_usage(
    tenant: str, session: SessionDep, p: PrincipalDep, period: Period = None,
    start: Start = None, end: End = None, user: Filter = None, job: JobQ = None,
    sku: Filter = None, cluster: Filter = None, queue: Filter = None, limit: Limit = 1000,
    after: After = None,
) -> UsagePage:  # fmt: skip
    """The tenant's usage records, oldest first (a tenant-user: its own)."""
    row = tenant_for(session, p, tenant, Need.READ)
    return _page(session, row.name, window(period, start, end), limit, after,
                 user=_own(p, row.id, user), job=job, sku=sku, cluster=cluster,
                 queue=queue)  # fmt: skip


@router.get("/tenants/{tenant}/usage/summary", response_model=UsageSummary)
def tenant_summary(
    tenant: str, session: SessionDep, p: PrincipalDep, period: Period = None,
    start: Start = None, end: End = None, by: By = "sku,currency",
) -> UsageSummary:  # fmt: skip
    """Totals of the tenant's records per group (a tenant-user: its own)."""
    row = tenant_for(session, p, tenant, Need.READ)
    user = _own(p, row.id, None)
    filters = {"user": user} if user is not None else {}
    return _summary(session, row.name, window(period, start, end), by, **filters)


@router.get("/idle-pool/usage", response_model=PoolUsageList)
def idle_pool_usage(session: SessionDep, p: PrincipalDep, period: Period = None) -> PoolUsageList:
    """GPU-seconds sold from the idle-capacity pool, by period, GPU model and MIG profile
    (provider only)."""
    require_platform(p, write=False)
    if period is not None:
        window(period, None, None)
    items = [
        PoolUsageOut(period=u.period, gpu_model=u.gpu_model, shape=u.shape, profile=u.profile,
                     gpu_seconds=_text(u.gpu_seconds),
                     gpu_hours=_text((u.gpu_seconds / 3600).quantize(Decimal("0.000001"))),
                     records=u.records)
        for u in usage.pool_usage(session, period)
    ]  # fmt: skip
    return PoolUsageList(period=period, items=items)
