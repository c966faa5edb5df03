"""Request and response bodies of the price book and usage (camelCase JSON); see
docs/billing.md. Prices and costs are decimal strings in JSON (never floats): ``"2.49"``."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from gpuaas.service.models.identity import CamelIn, CamelOut, Text


class PriceIn(CamelIn):
    """One price of one SKU in one book (on PUT the name may be left out: it comes from the
    path). ``listPerHour`` and ``contractedPerHour`` are per unit-hour of the SKU (a GPU-hour,
    a MIG-instance-hour, a vCPU-hour, a GiB-hour), at most 9 decimal places, not negative;
    ``contractedPerHour`` defaults to the list price. ``validFrom``/``validUntil``: POSIX
    seconds or ISO-8601 text; without ``validUntil`` the price lasts until the book's next
    entry for the SKU starts."""

    name: Text | None = Field(default=None, max_length=63)
    sku: Text = Field(min_length=1, max_length=200)
    list_per_hour: Decimal | Text
    contracted_per_hour: Decimal | Text | None = None
    currency: Text = Field(default="USD", min_length=1, max_length=8)
    valid_from: float | Text
    valid_until: float | Text | None = None
    description: Text = Field(default="", max_length=1000)


class PriceOut(CamelOut):
    id: int
    name: str
    book: str = Field(description="provider, or tenant/<name>: a tenant's chargeback book")
    tenant: str | None = None
    sku: str
    list_per_hour: str
    contracted_per_hour: str
    currency: str
    valid_from: float
    valid_until: float | None
    description: str
    used: bool = Field(description="usage was priced by it: it can no longer change")
    created_at: float
    updated_at: float


class UsageRecordOut(CamelOut):
    """One usage record: ``quantity`` unit-seconds held (device-seconds x fraction), costs
    in ``currency`` (decimal strings); ``price`` the entry in force at ``start`` (0: none)."""

    id: int
    key: str
    tenant: str
    user: str
    queue: str
    cluster: str
    job: int
    attempt: int
    pod: str
    device: str
    node: str
    sku: str
    start: float
    end: float
    quantity: str
    price: int
    currency: str
    list_cost: str
    effective_cost: str
    utilization: float | None = None


class UsagePage(CamelOut):
    items: list[UsageRecordOut]
    next: str | None = None


class UsageTotalOut(CamelOut):
    group: dict[str, str | int]
    records: int
    quantity: str = Field(description="unit-seconds")
    unit_hours: str
    list_cost: str
    effective_cost: str


class UsageSummary(CamelOut):
    start: float | None
    end: float | None
    by: list[str]
    totals: list[UsageTotalOut]


class PoolUsageOut(CamelOut):
    period: str
    gpu_model: str
    shape: str
    profile: str
    gpu_seconds: str
    gpu_hours: str
    records: int


class PoolUsageList(CamelOut):
    period: str | None
    items: list[PoolUsageOut]
