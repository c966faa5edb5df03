from __future__ import annotations

from decimal import Decimal

from gpuaas.billing.budgets import (
    Budget,
    Scope,
    ScopeKind,
    crossed,
    exhausted,
    forecast,
    over_rate,
)
from gpuaas.billing.periods import Cadence, month

NOV = month("2026-11")
B = Budget("b", Scope("acme", ScopeKind.QUEUE, "q"), Cadence.MONTHLY, Decimal(100),
           (50, 80, 100), hard=True)  # fmt: skip


def test_thresholds_fire_once_each_in_order():
    fired: set[int] = set()
    assert crossed(B, Decimal(49), fired) == []
    now = crossed(B, Decimal(85), fired)
    assert now == [50, 80]
    fired |= set(now)
    assert crossed(B, Decimal(90), fired) == []
    assert crossed(B, Decimal(100), fired) == [100]


def test_hard_budget_holds_at_the_amount_and_rate_caps():
    assert not exhausted(B, Decimal("99.99"))
    assert exhausted(B, Decimal(100))
    assert not exhausted(Budget("s", B.scope, Cadence.MONTHLY, Decimal(1)), Decimal(5))
    capped = Budget("c", Scope("acme", ScopeKind.USER, "7"), Cadence.MONTHLY,
                    max_rate_per_hour=Decimal(10))  # fmt: skip
    assert not over_rate(capped, Decimal(6), Decimal(4))
    assert over_rate(capped, Decimal(6), Decimal("4.01"))


def test_scope_covers_its_jobs_only():
    assert B.scope.covers("acme", "q", "", "1")
    assert not B.scope.covers("acme", "other", "", "1")
    assert not B.scope.covers("globex", "q", "", "1")
    assert Scope("acme", ScopeKind.TENANT, "acme").covers("acme", "x", "c", "2")


def test_forecast_is_a_straight_line_or_the_running_rate():
    half = NOV.start + (NOV.end - NOV.start) / 2
    assert forecast(Decimal(50), NOV, half) == Decimal(100)
    # a rate running now above the average wins
    hours_left = Decimal((NOV.end - half) / 3600)
    assert forecast(Decimal(50), NOV, half, Decimal(1)) == Decimal(50) + hours_left
    assert forecast(Decimal(7), NOV, NOV.end + 5) == Decimal(7)
