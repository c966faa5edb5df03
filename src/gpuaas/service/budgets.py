"""A tenant's budgets: the ``Budget`` kind of the one resource table (tenant routes: members
read, tenant admins write).

A budget's scope must exist when it is written: the tenant itself, one of its LocalQueues,
one of its clusters, or a member user (``scope`` is a 404 otherwise, naming the field: a valid
body naming what is not there; on a tenant budget a scope other than the tenant's own name is
one). Money is decimal text with at most 9 places, never negative (``amount``,
``maxRatePerHour``); thresholds are percentages 1..1000, each once. The OpenAPI document says
every other rule, those across fields included (``models.budgets.BUDGET_RULES``). Every write
bumps ``budgets.version`` so the reconciler takes the change at its next cycle
(:mod:`gpuaas.service.budget_watch`).
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any
from urllib.parse import urlparse

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.billing.budgets import ScopeKind
from gpuaas.billing.metering import money
from gpuaas.billing.periods import Cadence
from gpuaas.service import governance as gv
from gpuaas.service.errors import invalid, missing
from gpuaas.service.governance_kinds import At, TenantNamed
from gpuaas.service.models.budgets import BudgetEventOut, BudgetIn, BudgetOut
from gpuaas.service.models.common import Page
from gpuaas.service.prices import _price
from gpuaas.store.tables import (
    BudgetEvent,
    BudgetRow,
    ClusterRow,
    GovernanceObject,
    Membership,
    Meta,
    Tenant,
    User,
)

#: meta key bumped by every budget write
BUDGETS_VERSION = "budgets.version"
NANO = Decimal(10) ** 9


def nano_of(field: str, text: str | None, *, allow_none: bool = True) -> int | None:
    """Decimal text as nano-units (not negative, at most 9 places, as prices are), or a 422
    naming ``field``."""
    if text is None or text == "":
        if allow_none:
            return None
        raise invalid(field, "is required")
    amount = _price(field, text)
    if amount >= 2**62:
        raise invalid(field, f"{text} is too large")
    return amount


def money_text(nano: int | None) -> str | None:
    """Nano-units as decimal text (``"12.5"``)."""
    if nano is None:
        return None
    return format(money(nano).normalize(), "f") if nano else "0"


def bump(session: Session) -> None:
    row = session.get(Meta, BUDGETS_VERSION)
    if row is None:
        session.add(Meta(key=BUDGETS_VERSION, value="1"))
    else:
        row.value = str(int(row.value or "0") + 1)


def _scope_key(session: Session, tenant: Tenant, kind: ScopeKind, scope: str) -> str:
    """What the workloads name the scope by; 404 naming ``scope`` when it does not exist."""
    if kind is ScopeKind.TENANT:
        if scope not in ("", tenant.name):
            raise missing(
                "scope", f"no tenant {scope!r} here: a tenant budget's scope is {tenant.name}"
            )
        return tenant.name
    if not scope:
        raise invalid("scope", f"is required for a {kind.value} budget")
    if kind is ScopeKind.QUEUE:
        found = session.scalar(
            select(GovernanceObject.id).where(
                GovernanceObject.kind == gv.LOCAL_QUEUE,
                GovernanceObject.namespace == tenant.name,
                GovernanceObject.name == scope,
            )
        )
        if found is None:
            raise missing("scope", f"tenant {tenant.name} has no LocalQueue {scope!r}")
        return scope
    if kind is ScopeKind.CLUSTER:
        found = session.scalar(
            select(ClusterRow.id).where(ClusterRow.tenant_id == tenant.id, ClusterRow.name == scope)
        )
        if found is None:
            raise missing("scope", f"tenant {tenant.name} has no cluster {scope!r}")
        return scope
    user_id = session.scalar(
        select(User.id)
        .join(Membership, Membership.user_id == User.id)
        .where(User.name == scope, Membership.tenant_id == tenant.id)
    )
    if user_id is None:
        raise missing("scope", f"tenant {tenant.name} has no member user {scope!r}")
    return str(user_id)


def _values(session: Session, tenant: Tenant, body: BudgetIn) -> dict[str, Any]:
    try:
        kind = ScopeKind(body.scope_kind)
    except ValueError:
        known = ", ".join(k.value for k in ScopeKind)
        raise invalid("scopeKind", f"unknown scope kind {body.scope_kind!r} ({known})") from None
    try:
        cadence = Cadence(body.period)
    except ValueError:
        raise invalid("period", f"{body.period!r}: monthly or weekly") from None
    scope = tenant.name if kind is ScopeKind.TENANT and not body.scope else body.scope or ""
    key = _scope_key(session, tenant, kind, scope)
    amount = nano_of("amount", body.amount)
    rate = nano_of("maxRatePerHour", body.max_rate_per_hour)
    if rate is not None and kind is not ScopeKind.USER:
        raise invalid("maxRatePerHour", "a cost-rate cap is per user: set scopeKind user")
    if amount is None and rate is None:
        raise invalid("amount", "is required (or maxRatePerHour, for a user's rate cap)")
    thresholds = [int(t) for t in body.thresholds or []]
    if any(not 1 <= t <= 1000 for t in thresholds):
        raise invalid("thresholds", f"percentages must be 1..1000, got {thresholds}")
    if len(set(thresholds)) != len(thresholds):
        raise invalid("thresholds", f"each percentage once, got {thresholds}")
    if thresholds and amount is None:
        raise invalid("thresholds", "need an amount to be percentages of")
    if (body.hard or body.stop_running) and amount is None:
        raise invalid("hard", "a hard budget needs an amount")
    if body.stop_running and not body.hard:
        raise invalid("stopRunning", "only a hard budget stops running work")
    if body.webhook:
        url = urlparse(body.webhook)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise invalid("webhook", f"{body.webhook!r} is not an http(s) URL")
    currency = body.currency.upper()
    if len(currency) != 3 or not currency.isalpha():
        raise invalid("currency", f"{body.currency!r} is not a 3-letter currency code")
    return {
        "scope_kind": kind.value,
        "scope": scope,
        "scope_key": key,
        "period": cadence.value,
        "amount": amount,
        "currency": currency,
        "thresholds": sorted(thresholds),
        "hard": body.hard,
        "stop_running": body.stop_running,
        "max_rate_per_hour": rate,
        "webhook": body.webhook,
    }


def budget_out(row: BudgetRow, tenant: str) -> BudgetOut:
    return BudgetOut(
        name=row.name,
        tenant=tenant,
        scope_kind=row.scope_kind,
        scope=row.scope,
        period=row.period,
        amount=money_text(row.amount),
        currency=row.currency,
        thresholds=list(row.thresholds or []),
        hard=row.hard,
        stop_running=row.stop_running,
        max_rate_per_hour=money_text(row.max_rate_per_hour),
        webhook=row.webhook,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def event_out(e: BudgetEvent) -> BudgetEventOut:
    return BudgetEventOut(
        period=e.period, kind=e.kind, threshold=e.threshold, spent=money_text(e.spent) or "0",
        at=e.at, message=e.message, delivered_at=e.delivered_at, attempts=e.attempts,
        error=e.error,
    )  # fmt: skip


class Budgets(TenantNamed):
    """A tenant's budgets: a scope (the tenant, a LocalQueue, a cluster, a user), an amount
    per monthly or weekly period, soft thresholds that alert once each per period (webhook
    and event log), hard budgets that hold the scope's new admissions once spent (running
    work goes on unless ``stopRunning``), and per-user cost-rate caps. The view shows the
    current period: spent, forecast, what fired (docs/billing.md)."""

    kind = "Budget"
    row_type = BudgetRow

    def _view(self, at: At, row: BudgetRow) -> BudgetOut:
        from gpuaas.service.budget_watch import status_of

        out = budget_out(row, self._tenant(at).name)
        out.status = status_of(at.session, row, self._tenant(at).name, time.time())
        events = at.session.scalars(
            select(BudgetEvent)
            .where(BudgetEvent.budget_id == row.id)
            .order_by(BudgetEvent.id.desc())
            .limit(50)
        )
        out.events = [event_out(e) for e in events]
        return out

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        rows, cursor = self._rows(at, limit, after)
        return Page(items=[self._view(at, r) for r in rows], next=cursor)

    def get(self, at: At, name: str) -> BudgetOut:
        return self._view(at, self._row(at, name))

    def create(self, at: At, body: BudgetIn) -> BudgetOut:
        row = self._add(at, body.name, lambda: _values(at.session, self._tenant(at), body))
        bump(at.session)
        at.session.flush()
        return self._view(at, row)

    def update(self, at: At, name: str, body: BudgetIn) -> BudgetOut:
        self._same_name(body.name, name)
        row = self._row(at, name)
        values = _values(at.session, self._tenant(at), body)
        for key, value in values.items():
            setattr(row, key, value)
        row.updated_at = time.time()
        bump(at.session)
        at.session.flush()
        return self._view(at, row)

    def delete(self, at: At, name: str) -> None:
        at.session.delete(self._row(at, name))
        bump(at.session)
