"""Request and response bodies of the price book and usage (camelCase JSON); see
docs/billing.md. Prices and costs are decimal strings in JSON (never floats): ``"2.49"``."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import Field, ValidationInfo, WithJsonSchema, field_validator

from gpuaas.model.billing import CapacityPool, Shape
from gpuaas.service.models.common import MONEY_PATTERN, TIME_PATTERN, TIME_WORDS
from gpuaas.service.models.identity import CamelIn, CamelOut, Text

#: ISO 4217 codes a price may be in
PRICE_CURRENCIES = (
    "USD", "EUR", "GBP", "JPY", "CNY", "INR", "CHF", "CAD", "AUD", "NZD", "SEK", "NOK", "DKK",
    "PLN", "CZK", "HUF", "KRW", "SGD", "HKD", "TWD", "BRL", "MXN", "ZAR", "AED", "SAR", "ILS",
    "TRY", "THB", "MYR", "IDR", "PHP", "VND",
)  # fmt: skip
#: a SKU as ``billing.skus.parse_sku`` reads it: ``<resource>/<shape>[/<profile>]@<pool>``
#: (the resource and profile any text without ``/`` or the control characters Text refuses)
_SKU_PART = "[^/\\x00-\\x08\\x0b-\\x1f]+"
SKU_PATTERN = (
    f"^{_SKU_PART}/({'|'.join(s.value for s in Shape)})(/{_SKU_PART})?"
    f"@({'|'.join(p.value for p in CapacityPool)})$"
)
_SKU = re.compile(SKU_PATTERN)
_SKU_WORDS = (
    "a SKU: <GPU model>/<whole|mig|timeslice|mps>[/<profile>]@<on-demand|reserved|idle-pool>, "
    "or cpu/cpu@..., memory/memory@..., storage/storage[/<storage class>]@..."
)
_TIME = re.compile(TIME_PATTERN)
_MONEY = re.compile(MONEY_PATTERN)
_MONEY_WORDS = "a decimal number from 0 to 1000000 with at most 9 decimals, no sign"
#: a price per unit-hour: a JSON number (at most 9 decimal places, which JSON Schema cannot say
#: of a binary number) or decimal text as the document's pattern says it (matched first)
Money = (
    Annotated[
        Decimal,
        Field(ge=0, le=1_000_000),
        WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1_000_000}),
    ]
    | Annotated[Text, Field(max_length=40, json_schema_extra={"pattern": MONEY_PATTERN})]
)
#: a time: POSIX seconds (a number, or its text) or ISO-8601 text
When = Annotated[float, Field(ge=0)] | Annotated[Text, Field(json_schema_extra={
    "pattern": TIME_PATTERN})]  # fmt: skip


class PriceIn(CamelIn):
    """One price of one SKU in one book (on PUT the name may be left out: it comes from the
    path). ``listPerHour`` and ``contractedPerHour`` are per unit-hour of the SKU (a GPU-hour,
    a MIG-instance-hour, a vCPU-hour, a GiB-hour), at most 9 decimal places, not negative;
    ``contractedPerHour`` defaults to the list price. ``validFrom``/``validUntil``: POSIX
    seconds or ISO-8601 text; without ``validUntil`` the price lasts until the book's next
    entry for the SKU starts."""

    name: Text | None = Field(default=None, max_length=63)
    sku: Text = Field(min_length=1, max_length=200, json_schema_extra={"pattern": SKU_PATTERN})
    list_per_hour: Money
    contracted_per_hour: Money | None = None
    currency: Text = Field(default="USD", json_schema_extra={"enum": list(PRICE_CURRENCIES)})
    valid_from: When
    valid_until: When | None = None
    description: Text = Field(default="", max_length=1000)

    @field_validator("sku", "currency", "valid_from", "valid_until", "list_per_hour",
                     "contracted_per_hour")  # fmt: skip
    @classmethod
    def _as_documented(cls, value: object, info: ValidationInfo) -> object:
        """The SKU grammar, the currencies and the times as the document says them (in
        words: the pattern is the document's)."""
        if not isinstance(value, str):
            return value
        if info.field_name == "sku" and _SKU.fullmatch(value) is None:
            raise ValueError(f"{value[:100]!r} is not {_SKU_WORDS}")
        if info.field_name == "currency" and value not in PRICE_CURRENCIES:
            raise ValueError(f"unknown currency {value[:20]!r} (ISO 4217, e.g. USD)")
        money = info.field_name in ("list_per_hour", "contracted_per_hour")
        if money and _MONEY.fullmatch(value) is None:
            raise ValueError(f"{value[:100]!r} is not {_MONEY_WORDS}")
        if info.field_name in ("valid_from", "valid_until") and _TIME.fullmatch(value) is None:
            raise ValueError(f"{value[:100]!r} is not {TIME_WORDS}")
        return value


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
