"""Budgets: how much a scope (a tenant, one of its queues, clusters or users) may spend per
period, what fires when it nears the amount, and when new work is held.

- **Soft thresholds** (percentages of the amount, e.g. 50, 80, 100) fire once each per
  period: :func:`crossed` returns the thresholds the spend has reached that have not fired
  yet in this period (the service records each firing, so a restart never fires one twice).
- A **hard** budget holds the scope's *new* admissions once the spend reaches the amount
  (:func:`exhausted`); running work goes on unless the tenant-admin set ``stop_running``.
- A **rate cap** (per user, in money per hour) holds a user's new admissions while the cost
  rate of its running work plus the job's own would exceed the cap (:func:`over_rate`).
- The **forecast** to the period's end is a straight line: the spend so far plus the
  period's average burn rate (spend / elapsed) for the time left, or the cost rate of the
  work running now when that is higher (work that just started has not shown in the
  average yet). It is a projection, not a promise: it says when a budget will run out if
  the scope keeps spending as it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from gpuaas.billing.periods import Cadence, Period

ZERO = Decimal(0)
HUNDRED = Decimal(100)


class ScopeKind(StrEnum):
    TENANT = "tenant"
    QUEUE = "queue"
    CLUSTER = "cluster"
    USER = "user"


@dataclass(frozen=True, slots=True)
class Scope:
    """``name``: the tenant's name, a LocalQueue, a tenant cluster, or a user's id (as the
    workload names its user)."""

    tenant: str
    kind: ScopeKind
    name: str

    def covers(self, tenant: str, queue: str, cluster: str, user: str) -> bool:
        if tenant != self.tenant:
            return False
        if self.kind is ScopeKind.TENANT:
            return True
        return {"queue": queue, "cluster": cluster, "user": user}[self.kind.value] == self.name


@dataclass(frozen=True, slots=True)
class Budget:
    name: str
    scope: Scope
    cadence: Cadence
    amount: Decimal | None = None
    thresholds: tuple[int, ...] = ()
    hard: bool = False
    stop_running: bool = False
    max_rate_per_hour: Decimal | None = None


def crossed(budget: Budget, spent: Decimal, fired: set[int]) -> list[int]:
    """The thresholds (ascending) that ``spent`` has reached and that have not fired."""
    if budget.amount is None or budget.amount <= 0:
        return [t for t in sorted(budget.thresholds) if t not in fired and spent > 0]
    return [
        t
        for t in sorted(budget.thresholds)
        if t not in fired and spent * HUNDRED >= budget.amount * t
    ]


def exhausted(budget: Budget, spent: Decimal) -> bool:
    """Whether a hard budget now holds its scope's new admissions."""
    return budget.hard and budget.amount is not None and spent >= budget.amount


def over_rate(budget: Budget, running_per_hour: Decimal, job_per_hour: Decimal) -> bool:
    """Whether admitting a job costing ``job_per_hour`` would take the scope's running cost
    rate over the budget's cap."""
    cap = budget.max_rate_per_hour
    return cap is not None and running_per_hour + job_per_hour > cap


def forecast(
    spent: Decimal, period: Period, now: float, running_per_hour: Decimal = ZERO
) -> Decimal:
    """The spend at the period's end (see the module docstring)."""
    if now >= period.end:
        return spent
    elapsed = Decimal(max(0.0, now - period.start))
    left = Decimal(period.end - max(now, period.start))
    average = spent / elapsed if elapsed > 0 else ZERO  # per second
    rate = max(average, running_per_hour / Decimal(3600))
    return spent + rate * left
