"""Request and response bodies of budgets and invoices (camelCase JSON); see docs/billing.md.

Money is a decimal string (``"1000"``, ``"12.50"``), never a float: at most 9 decimal places.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from gpuaas.service.models.identity import CamelIn, CamelOut, Text


class BudgetIn(CamelIn):
    """A budget: ``scopeKind`` tenant | queue | cluster | user and ``scope`` its name (the
    tenant's own name, a LocalQueue, a tenant cluster, a user's name); ``period`` monthly or
    weekly; ``amount`` for the period; ``thresholds`` soft percentages (``[50, 80, 100]`` or
    ``"50,80,100"``) that alert once each per period; ``hard``: hold the scope's new
    admissions once the amount is spent; ``stopRunning``: also stop its running work then
    (off by default: a budget never kills running work unless asked); ``maxRatePerHour``: a
    user's cost-rate cap (scope user only); ``webhook``: an http(s) URL alerts are POSTed to."""

    name: Text | None = Field(default=None, max_length=63)
    scope_kind: Text = "tenant"
    scope: Text | None = Field(default=None, max_length=253)
    period: Text = "monthly"
    amount: Text | None = Field(default=None, max_length=40)
    currency: Text = Field(default="USD", max_length=3)
    thresholds: list[int] | Text | None = None
    hard: bool = False
    stop_running: bool = False
    max_rate_per_hour: Text | None = Field(default=None, max_length=40)
    webhook: Text = Field(default="", max_length=2048)

    @field_validator("thresholds", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value


class BudgetStatus(CamelOut):
    """The budget in its current period: spent so far (recorded usage plus the time running
    work has held since it was last recorded), the forecast to the period's end, the cost
    rate of the scope's running work, and whether it holds new admissions now."""

    period: str
    period_start: float
    period_end: float
    spent: str
    forecast: str
    running_per_hour: str
    fired: list[int] = Field(default_factory=list)
    holding: bool = False


class BudgetEventOut(CamelOut):
    period: str
    kind: str
    threshold: int
    spent: str
    at: float
    message: str
    delivered_at: float | None
    attempts: int
    error: str


class BudgetOut(CamelOut):
    name: str
    tenant: str
    scope_kind: str
    scope: str
    period: str
    amount: str | None
    currency: str
    thresholds: list[int]
    hard: bool
    stop_running: bool
    max_rate_per_hour: str | None
    webhook: str
    status: BudgetStatus | None = None
    events: list[BudgetEventOut] = Field(default_factory=list)
    created_at: float
    updated_at: float


class InvoiceLineIn(CamelIn):
    """A credit (``kind`` credit: the amount is taken off) or an adjustment (either sign) on
    the tenant's open month ``period``."""

    kind: Text
    amount: Text = Field(max_length=40)
    description: Text = Field(min_length=1, max_length=500)


class InvoiceLineOut(CamelOut):
    kind: str
    description: str
    billed_cost: str
    sku: str = ""
    price_id: int | None = None
    quantity: str = "0"
    unit: str = ""
    list_cost: str = "0"
    contracted_cost: str = "0"
    for_period: str = ""


class InvoiceOut(CamelOut):
    tenant: str
    period: str
    period_start: float
    period_end: float
    currency: str
    state: str = Field(description="open (computed from usage now) or closed (immutable)")
    total: str
    lines: list[InvoiceLineOut]
    closed_at: float | None = None


class ShowbackRow(CamelOut):
    name: str
    cost: str
    list_cost: str
    quantity: str = Field(description="unit-hours")


class AllocationRowOut(CamelOut):
    name: str
    sku: str
    hours: str
    cost: str
    shared_idle: str = "0"
    total: str


class SpotRowOut(CamelOut):
    name: str
    sku: str
    hours: str
    cost: str
    billed: str


class AllocationOut(CamelOut):
    start: float
    end: float
    aggregate: str
    rows: list[AllocationRowOut]
    spot: list[SpotRowOut]
    capacity: dict[str, str]
    allocated: dict[str, str]
    idle: dict[str, str]
