"""What budgets do on the live system: how much each scope has spent, which thresholds
fire, and which pending jobs a budget holds (the reconciler asks before every cycle).

**Spend** of a scope in its current period (a UTC month, or an ISO week) is its recorded
usage (:func:`gpuaas.service.usage.totals`, effective cost) plus what its running work has
held since metering last recorded it (each open job's devices priced by the provider's book
in force now, for the time since ``since``), so a budget sees a running job's cost as it
accrues, not only when the job ends. The **running rate** is the same open work per hour.

:class:`BudgetWatch` is the reconciler's: :meth:`BudgetWatch.holds` loads every budget
when ``budgets.version`` moved (a budget written: the next cycle acts on it) and otherwise
at most every :data:`REFRESH` seconds, and takes the accrual of open work to ``now`` on every
call, so a hard budget whose spend crosses its amount holds the scope's next admission at the
next cycle. Each refresh also fires the soft thresholds reached: a
:class:`~gpuaas.store.tables.BudgetEvent` row per (budget, period, threshold), unique in the
database, so a threshold fires once per period across restarts and leaders; the webhook is
handed to :class:`~gpuaas.service.webhooks.WebhookSender` (its own thread: delivery never
blocks the loop). A hard budget spent records a ``hold`` event once per period too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from gpuaas.billing.budgets import Budget, Scope, ScopeKind, crossed, exhausted, forecast
from gpuaas.billing.invoices import sku_of
from gpuaas.billing.periods import Cadence, Period, period_of
from gpuaas.engine.admission.gpu_size import gpu_milli
from gpuaas.engine.reasons import Code, Reason
from gpuaas.model.governance import AdmissionWorkload
from gpuaas.service import usage
from gpuaas.service.budgets import BUDGETS_VERSION, NANO, money_text
from gpuaas.service.models.budgets import BudgetStatus
from gpuaas.store.db import Database
from gpuaas.store.tables import BudgetEvent, BudgetRow, Meta, Tenant, UsageOpen

log = logging.getLogger("gpuaas.budgets")
ZERO = Decimal(0)
#: Seconds between two recomputations of every budget's spend (a budget written is taken at
#: the next cycle whatever this says).
REFRESH = 2.0
_GPU_SHAPES = ("whole", "mig", "timeslice", "mps")


def budget_of(row: BudgetRow, tenant: str) -> Budget:
    return Budget(
        row.name,
        Scope(tenant, ScopeKind(row.scope_kind), row.scope),
        Cadence(row.period),
        None if row.amount is None else Decimal(row.amount) / NANO,
        tuple(int(t) for t in row.thresholds or ()),
        row.hard,
        row.stop_running,
        None if row.max_rate_per_hour is None else Decimal(row.max_rate_per_hour) / NANO,
    )


# --- spend ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenWork:
    """A job whose held time is not recorded yet: since when, and what it costs per hour."""

    tenant: str
    user: str
    queue: str
    cluster: str
    since: float
    per_hour: Decimal


def open_items(session: Session, now: float) -> list[tuple[UsageOpen, str, Decimal]]:
    """What each open job holds, per item: the job's row, the SKU and what it costs per hour
    (the provider's book in force at ``now``; nothing for an unpriced SKU)."""
    rows = list(session.scalars(select(UsageOpen)))
    if not rows:
        return []
    skus = {str(h[3]) for r in rows for h in r.held or ()}
    book: dict[str, list[Any]] = {}
    for entry in usage.entries(session, usage.PROVIDER_BOOK, sorted(skus)):
        book.setdefault(entry.sku, []).append(entry)
    out = []
    for r in rows:
        for held in r.held or ():
            _pod, _device, _node, sku, num, den = held[:6]
            entry = _in_force(book.get(str(sku), ()), now)
            if entry is not None:
                rate = entry.contracted_per_hour * Decimal(int(num)) / Decimal(int(den))
                # a run of identical pods is one stored row (usage.held_runs): each pays
                out.append((r, str(sku), rate * usage.held_count(held)))
    return out


def open_work(session: Session, now: float) -> list[OpenWork]:
    """Every open job priced by the provider's book in force at ``now``."""
    rates: dict[int, Decimal] = {}
    rows: dict[int, UsageOpen] = {}
    for r, _sku, rate in open_items(session, now):
        rates[r.job_id] = rates.get(r.job_id, ZERO) + rate
        rows[r.job_id] = r
    return [
        OpenWork(r.tenant, r.user, r.queue, r.cluster, r.since, rates[job])
        for job, r in rows.items()
    ]


def _in_force(entries: Iterable[Any], t: float) -> Any:
    from gpuaas.billing.metering import in_force

    return in_force(list(entries), t)


@dataclass(slots=True)
class Spend:
    spent: Decimal = ZERO
    per_hour: Decimal = ZERO


def spend(
    session: Session, budgets: Iterable[Budget], now: float, work: list[OpenWork] | None = None
) -> dict[str, Spend]:
    """Each budget's spend in its current period (by budget name x tenant: ``tenant/name``)."""
    work = open_work(session, now) if work is None else work
    recorded: dict[tuple[str, Period], list[Any]] = {}
    out: dict[str, Spend] = {}
    for b in budgets:
        period = period_of(b.cadence, now)
        key = (b.scope.tenant, period)
        if key not in recorded:
            recorded[key] = usage.totals(
                session, period.start, period.end, b.scope.tenant, by=("user", "queue", "cluster")
            )
        s = Spend()
        for t in recorded[key]:
            g = t.group
            # usage names its user by name, as the budget's scope does
            if b.scope.covers(b.scope.tenant, g["queue"], g["cluster"] or "", g["user"]):
                s.spent += t.effective_cost
        for w in work:
            if b.scope.covers(w.tenant, w.queue, w.cluster, w.user):
                held = max(0.0, now - max(w.since, period.start))
                s.spent += w.per_hour * Decimal(held) / 3600
                s.per_hour += w.per_hour
        out[f"{b.scope.tenant}/{b.name}"] = s
    return out


def status_of(session: Session, row: BudgetRow, tenant: str, now: float) -> BudgetStatus:
    """One budget's current period, for its view."""
    b = budget_of(row, tenant)
    s = spend(session, [b], now)[f"{tenant}/{b.name}"]
    period = period_of(b.cadence, now)
    fired = session.scalars(
        select(BudgetEvent.threshold).where(
            BudgetEvent.budget_id == row.id,
            BudgetEvent.period == period.label,
            BudgetEvent.kind == "threshold",
        )
    )
    return BudgetStatus(
        period=period.label, period_start=period.start, period_end=period.end,
        spent=_text(s.spent), forecast=_text(forecast(s.spent, period, now, s.per_hour)),
        running_per_hour=_text(s.per_hour), fired=sorted(fired),
        holding=exhausted(b, s.spent),
    )  # fmt: skip


def _text(value: Decimal) -> str:
    return money_text(_nano(value)) or "0"


# --- holds ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Holds:
    """What budgets hold now: per scope (tenant, kind, key) the reason; per user (tenant,
    user id) a rate cap (budget, cap, running rate); ``stop``: scopes whose running work must
    stop too (``stopRunning``)."""

    scopes: dict[tuple[str, str, str], Reason] = field(default_factory=dict)
    caps: dict[tuple[str, str], tuple[str, Decimal, Decimal, str]] = field(default_factory=dict)
    stop: set[tuple[str, str, str]] = field(default_factory=set)
    gpu_hour: Decimal = ZERO  # the cheapest GPU unit-hour: a job's cost rate, at least

    def __bool__(self) -> bool:
        return bool(self.scopes or self.caps)

    def why(
        self, tenant: str, queue: str, cluster: str, user: str, workload: AdmissionWorkload
    ) -> Reason | None:
        """The reason a pending job of these (``user``: its id) is held, or None."""
        for kind, key in (("tenant", tenant), ("queue", queue), ("cluster", cluster),
                          ("user", user)):  # fmt: skip
            held = self.scopes.get((tenant, kind, key))
            if held is not None:
                return held
        cap = self.caps.get((tenant, user))
        if cap is not None:
            budget, limit, running, currency = cap
            gpus = Decimal(sum(gpu_milli(ps.requests) * ps.count for ps in workload.pod_sets))
            if running + gpus / 1000 * self.gpu_hour > limit:
                return Reason(
                    Code.BUDGET_RATE_CAP,
                    {"budget": budget, "user": user, "rate": _text(running),
                     "cap": _text(limit), "currency": currency},
                )  # fmt: skip
        return None

    def stops(self, tenant: str, queue: str, cluster: str, user: str) -> Reason | None:
        for kind, key in (("tenant", tenant), ("queue", queue), ("cluster", cluster),
                          ("user", user)):  # fmt: skip
            if (tenant, kind, key) in self.stop:
                return self.scopes[(tenant, kind, key)]
        return None


@dataclass(slots=True)
class _Watched:
    """One budget as loaded: its spend recorded in its period when loaded, the open work in
    its scope (since, per hour), the thresholds fired in the period."""

    row: BudgetRow
    budget: Budget
    period: Period
    recorded: Decimal
    open: list[tuple[float, Decimal]]
    fired: set[int]
    held: bool = False

    def spent(self, now: float) -> Decimal:
        start = self.period.start
        return self.recorded + sum(
            (rate * Decimal(max(0.0, now - max(since, start))) / 3600 for since, rate in self.open),
            ZERO,
        )

    @property
    def per_hour(self) -> Decimal:
        return sum((rate for _, rate in self.open), ZERO)


class BudgetWatch:
    """The reconciler's view of the budgets (see the module docstring). ``sender``: where
    webhooks go (None: events are recorded, nothing is sent).

    The budgets, their recorded spend and the open work are loaded when ``budgets.version``
    moves and at most every :data:`REFRESH` seconds; between loads every call takes the open
    work's accrual to ``now`` (arithmetic, no query), so a spend that crosses an amount holds
    at the very next cycle. (A job that ended since the last load still accrues until the next
    one, at most REFRESH seconds: a hard budget may hold that much early, never late.)"""

    def __init__(self, db: Database, sender: Any = None) -> None:
        self.db = db
        self.sender = sender
        self._version: str | None = None
        self._at = -math.inf
        self._watched: list[_Watched] = []
        self._gpu_hour = ZERO
        self._resumed = False

    def holds(self, now: float) -> Holds:
        """What budgets hold at ``now`` (empty, at the cost of one query, without budgets)."""
        with self.db.sessions() as session:
            version = session.scalar(select(Meta.value).where(Meta.key == BUDGETS_VERSION))
            if version is None:
                return Holds()
            if not self._resumed and self.sender is not None:
                self._resumed = True
                self.sender.resume()  # alerts a previous leader recorded but did not deliver
            stale = any(not w.period.holds(now) for w in self._watched)
            if version != self._version or now - self._at >= REFRESH or stale:
                self._load(session, now)
                self._version = version
                self._at = now
        return self._evaluate(now)

    def _load(self, session: Session, now: float) -> None:
        tenants = dict(session.execute(select(Tenant.id, Tenant.name)).all())
        rows = [(r, tenants.get(r.tenant_id, "")) for r in session.scalars(select(BudgetRow))]
        budgets = [(r, budget_of(r, t)) for r, t in rows if t]
        recorded = spend(session, [b for _, b in budgets], now, work=[])
        work = open_work(session, now)
        self._gpu_hour = _cheapest_gpu_hour(session, now)
        watched = []
        for row, b in budgets:
            period = period_of(b.cadence, now)
            fired = set(
                session.scalars(
                    select(BudgetEvent.threshold).where(
                        BudgetEvent.budget_id == row.id,
                        BudgetEvent.period == period.label,
                        BudgetEvent.kind == "threshold",
                    )
                )
            )
            held = session.scalar(
                select(BudgetEvent.id).where(
                    BudgetEvent.budget_id == row.id,
                    BudgetEvent.period == period.label,
                    BudgetEvent.kind == "hold",
                )
            )
            mine = [
                (w.since, w.per_hour)
                for w in work
                if b.scope.covers(w.tenant, w.queue, w.cluster, w.user)
            ]
            spent = recorded[f"{b.scope.tenant}/{b.name}"].spent
            watched.append(_Watched(row, b, period, spent, mine, fired, held is not None))
        self._watched = watched

    def _evaluate(self, now: float) -> Holds:
        holds = Holds(gpu_hour=self._gpu_hour)
        fire: list[tuple[_Watched, str, int, Decimal]] = []
        for w in self._watched:
            b, row = w.budget, w.row
            spent = w.spent(now)
            scope = (b.scope.tenant, b.scope.kind.value, row.scope_key)
            if exhausted(b, spent):
                holds.scopes.setdefault(scope, _exhausted(row, b, spent, w.period))
                if b.stop_running:
                    holds.stop.add(scope)
                if not w.held:
                    w.held = True
                    fire.append((w, "hold", 0, spent))
            if b.max_rate_per_hour is not None:
                holds.caps[(b.scope.tenant, row.scope_key)] = (
                    b.name, b.max_rate_per_hour, w.per_hour, row.currency,
                )  # fmt: skip
            for t in crossed(b, spent, w.fired):
                w.fired.add(t)
                fire.append((w, "threshold", t, spent))
        if fire:
            self._fire(fire, now)
        return holds

    def _fire(self, fire: list[tuple[_Watched, str, int, Decimal]], now: float) -> None:
        """Record each event once (the unique key decides) and hand its webhook over."""
        sent: list[tuple[int, str, dict[str, Any]]] = []
        with self.db.session() as session:
            dialect = session.get_bind().dialect.name
            maker = sqlite_insert if dialect == "sqlite" else pg_insert
            for w, kind, threshold, spent in fire:
                b, row, period = w.budget, w.row, w.period
                message = _message(b, kind, threshold, spent, period, row.currency)
                statement = (
                    maker(BudgetEvent)
                    .values(budget_id=row.id, period=period.label, kind=kind,
                            threshold=threshold, spent=_nano(spent),
                            at=now, message=message, attempts=0, error="")
                    .on_conflict_do_nothing(
                        index_elements=["budget_id", "period", "kind", "threshold"]
                    )
                    .returning(BudgetEvent.id)
                )  # fmt: skip
                event_id = session.scalar(statement)
                if event_id is None:
                    continue  # fired already this period
                log.info("budget %s/%s: %s", b.scope.tenant, b.name, message)
                if row.webhook:
                    event = BudgetEvent(kind=kind, threshold=threshold, period=period.label,
                                        spent=_nano(spent), message=message)  # fmt: skip
                    sent.append((event_id, row.webhook, alert(row, b.scope.tenant, event)))
        if self.sender is not None:
            for event_id, url, payload in sent:
                self.sender.send(event_id, url, payload)


def _exhausted(row: BudgetRow, b: Budget, spent: Decimal, period: Period) -> Reason:
    scope = (
        "tenant " + b.scope.tenant
        if b.scope.kind is ScopeKind.TENANT
        else (f"{b.scope.kind.value} {b.scope.name}")
    )
    return Reason(
        Code.BUDGET_EXHAUSTED,
        {"budget": b.name, "scope": scope, "amount": _text(b.amount or ZERO),
         "spent": _text(spent), "currency": row.currency, "period": period.label},
    )  # fmt: skip


def _message(
    b: Budget, kind: str, threshold: int, spent: Decimal, period: Period, currency: str
) -> str:
    amount = _text(b.amount or ZERO)
    if kind == "hold":
        return (
            f"{b.scope.kind.value} {b.scope.name} spent {_text(spent)} of {amount} {currency} "
            f"for {period.label}: its new admissions are held"
            + (" and its running work stopped" if b.stop_running else "")
        )
    return (
        f"{b.scope.kind.value} {b.scope.name} reached {threshold}% of its {amount} {currency} "
        f"budget for {period.label} (spent {_text(spent)})"
    )


def alert(row: BudgetRow, tenant: str, event: BudgetEvent) -> dict[str, Any]:
    """The JSON body a webhook receives for ``event`` of budget ``row``."""
    return {
        "kind": "BudgetAlert", "event": event.kind, "tenant": tenant, "budget": row.name,
        "scope": {"kind": row.scope_kind, "name": row.scope}, "period": event.period,
        "threshold": event.threshold, "amount": money_text(row.amount),
        "spent": money_text(event.spent), "currency": row.currency, "hard": row.hard,
        "message": event.message,
    }  # fmt: skip


def _nano(value: Decimal) -> int:
    return int((value * NANO).to_integral_value())


def _cheapest_gpu_hour(session: Session, now: float) -> Decimal:
    """The lowest contracted price per GPU unit-hour in force in the provider's book."""
    by_sku: dict[str, list[Any]] = {}
    for entry in usage.entries(session, usage.PROVIDER_BOOK):
        try:
            gpu = sku_of(entry.sku).shape.value in _GPU_SHAPES
        except ValueError:
            continue
        if gpu:
            by_sku.setdefault(entry.sku, []).append(entry)
    prices = [e.contracted_per_hour for e in (_in_force(v, now) for v in by_sku.values()) if e]
    return min(prices, default=ZERO)
