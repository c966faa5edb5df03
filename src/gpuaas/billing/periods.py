"""Billing periods in UTC: calendar months (invoices, monthly budgets) and ISO weeks (weekly
budgets, Monday 00:00 UTC to the next Monday).

A period is named by its label (``2026-11``, ``2026-W48``) and spans ``[start, end)`` in epoch
seconds, so that a usage record split at period boundaries (the metering contract) falls in
exactly one period.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from gpuaas.billing import metering


class Cadence(StrEnum):
    MONTHLY = "monthly"
    WEEKLY = "weekly"


@dataclass(frozen=True, slots=True)
class Period:
    label: str
    start: float
    end: float

    def holds(self, at: float) -> bool:
        return self.start <= at < self.end


_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def month_of(at: float) -> Period:
    """The calendar month (UTC) that holds ``at`` (metering's billing period)."""
    return month(metering.period_of(at))


def month(label: str) -> Period:
    """The month labelled ``YYYY-MM``; ValueError when the label is not one."""
    if _MONTH.fullmatch(label) is None:
        raise ValueError(f"{label!r} is not a month (YYYY-MM)")
    return Period(label, *metering.period_bounds(label))


def next_month(period: Period) -> Period:
    return month_of(period.end)


def week_of(at: float) -> Period:
    """The ISO week (Monday 00:00 UTC) that holds ``at``."""
    day = datetime.fromtimestamp(at, UTC)
    monday = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=day.weekday())
    year, week, _ = monday.isocalendar()
    return Period(f"{year:04d}-W{week:02d}", monday.timestamp(),
                  (monday + timedelta(days=7)).timestamp())  # fmt: skip


def period_of(cadence: Cadence, at: float) -> Period:
    return month_of(at) if cadence is Cadence.MONTHLY else week_of(at)


def iso(at: float) -> str:
    """``YYYY-MM-DDTHH:mm:ssZ`` (FOCUS's Date/Time format)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
