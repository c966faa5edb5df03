"""Request and response bodies of budgets and invoices (camelCase JSON); see docs/billing.md.

Money is a decimal string (``"1000"``, ``"12.50"``), never a float: at most 9 decimal places.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from gpuaas.billing.budgets import ScopeKind
from gpuaas.billing.periods import Cadence
from gpuaas.service.models.common import MONEY_PATTERN
from gpuaas.service.models.identity import CamelIn, CamelOut, Text

#: ``"50,80,100"``: percentages 1..1000, each once (the lookahead refuses a repeated one)
THRESHOLDS_PATTERN = (
    "^(?!.*\\b([0-9]+)\\b.*\\b\\1\\b) *(([1-9][0-9]{0,2}|1000)( *, *([1-9][0-9]{0,2}|1000))*)? *$"
)
#: an http(s) URL with a host (ASCII; no brackets: ``urllib`` refuses unbalanced ones), or empty
WEBHOOK_PATTERN = (
    "^([hH][tT][tT][pP][sS]?://[-A-Za-z0-9._~%!$&'()*+,;=:@]+([/?#][^\\x00-\\x1f\\x7f]*)?)?$"
)
CURRENCY_PATTERN = "^[A-Za-z]{3}$"
#: the list form: ``_values`` refuses a percentage outside 1..1000 or given twice
_PERCENTAGES = {"items": {"type": "integer", "minimum": 1, "maximum": 1000}, "uniqueItems": True}
_MONEY_OR_EMPTY = {"pattern": MONEY_PATTERN.replace("^(", "^(|", 1)}
#: the value of a field that says nothing (left out, null, empty)
_NOTHING: dict[str, Any] = {"enum": [None, ""]}
_GIVEN = {"type": "string", "minLength": 1}
_NO_THRESHOLDS = {
    "anyOf": [
        {"type": "null"},
        {"type": "string", "pattern": "^ *$"},
        {"type": "array", "maxItems": 0},
    ]
}
#: a switch: JSON's true/false, or the text the CLI sends (``--hard true``); nothing else
_SWITCH_ANY_OF = [{"type": "boolean"}, {"type": "string", "enum": ["true", "false"]}]


def _switch_schema(schema: dict[str, Any]) -> None:
    schema.pop("type", None)
    schema["anyOf"] = _SWITCH_ANY_OF


_TRUE = {"enum": [True, "true"]}
_FALSE = {"enum": [False, "false"]}


def _either(*alternatives: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": list(alternatives)}


def _has(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": [field], "properties": {field: schema}}


def _is(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``field`` is left out (its default) or matches ``schema``."""
    return {"properties": {field: schema}}


#: The rules across fields (``service.budgets._values`` keeps them), each an ``anyOf``: a
#: scope for every kind but tenant; an amount or a rate cap; a rate cap only on a user
#: budget; thresholds, ``hard`` and ``stopRunning`` only with an amount; ``stopRunning`` only
#: on a hard budget.
BUDGET_RULES: list[dict[str, Any]] = [
    _either(_is("scopeKind", {"const": "tenant"}), _has("scope", _GIVEN)),
    _either(_has("amount", _GIVEN), _has("maxRatePerHour", _GIVEN)),
    _either(_is("maxRatePerHour", _NOTHING), _has("scopeKind", {"const": "user"})),
    _either(_is("thresholds", _NO_THRESHOLDS), _has("amount", _GIVEN)),
    _either(
        {"properties": {"hard": _FALSE, "stopRunning": _FALSE}},
        _has("amount", _GIVEN),
    ),
    _either(_is("stopRunning", _FALSE), _has("hard", _TRUE)),
]


class BudgetIn(CamelIn):
    """A budget: ``scopeKind`` tenant | queue | cluster | user and ``scope`` its name (the
    tenant's own name, a LocalQueue, a tenant cluster, a user's name); ``period`` monthly or
    weekly; ``amount`` for the period; ``thresholds`` soft percentages (``[50, 80, 100]`` or
    ``"50,80,100"``) that alert once each per period; ``hard``: hold the scope's new
    admissions once the amount is spent; ``stopRunning``: also stop its running work then
    (off by default: a budget never kills running work unless asked); ``maxRatePerHour``: a
    user's cost-rate cap (scope user only); ``webhook``: an http(s) URL alerts are POSTed to.

    The document says every rule but one that needs what is stored: a ``scope`` naming no
    LocalQueue, cluster or member of the tenant (or, on a tenant budget, another tenant) is
    a 404 naming ``scope``. Money, thresholds, webhook and currency texts are matched against
    the document's patterns before they are parsed."""

    model_config = ConfigDict(**CamelIn.model_config, json_schema_extra={"allOf": BUDGET_RULES})

    name: Text | None = Field(default=None, max_length=63)
    scope_kind: ScopeKind = ScopeKind.TENANT
    scope: Text | None = Field(default=None, max_length=253)
    period: Cadence = Cadence.MONTHLY
    amount: Text | None = Field(default=None, max_length=40, json_schema_extra=_MONEY_OR_EMPTY)
    currency: Text = Field(
        default="USD", max_length=3, json_schema_extra={"pattern": CURRENCY_PATTERN}
    )
    thresholds: (
        Annotated[list[int], Field(json_schema_extra=_PERCENTAGES)]
        | Annotated[Text, Field(json_schema_extra={"pattern": THRESHOLDS_PATTERN})]
        | None
    ) = None
    hard: bool = Field(default=False, json_schema_extra=_switch_schema)
    stop_running: bool = Field(default=False, json_schema_extra=_switch_schema)
    max_rate_per_hour: Text | None = Field(
        default=None, max_length=40, json_schema_extra=_MONEY_OR_EMPTY
    )
    webhook: Text = Field(
        default="", max_length=2048, json_schema_extra={"pattern": WEBHOOK_PATTERN}
    )

    @field_validator("thresholds", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            if re.fullmatch(THRESHOLDS_PATTERN, value) is None:
                raise ValueError(
                    f"{value[:100]!r}: percentages 1..1000, each once, separated by commas"
                )
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("hard", "stop_running", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """``true``/``false``, as JSON or as text, as the document says: not 1, ``yes``, ...
        (pydantic alone would read those too)."""
        if isinstance(value, bool) or value in ("true", "false"):
            return value
        raise ValueError(f"expected true or false, got {str(value)[:100]!r}")

    @field_validator("amount", "max_rate_per_hour", "currency", "webhook")
    @classmethod
    def _matches(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The patterns as the document says them (``re``: the thresholds' lookahead, and the
        same engine for all)."""
        pattern, meant = _TEXTS.get(info.field_name or "", _MONEY)
        if value and re.fullmatch(pattern, value) is None:
            # the sentence a user can act on; the pattern itself is in the document
            raise ValueError(f"{value[:100]!r} is not {meant}")
        return value


#: each matched text's pattern and what it means, for the error a user reads
_MONEY = (MONEY_PATTERN, "a decimal number from 0 to 1000000 with at most 9 decimals, no sign")
_TEXTS = {
    "currency": (CURRENCY_PATTERN, "a three-letter ISO 4217 currency code such as USD"),
    "webhook": (WEBHOOK_PATTERN, "an http:// or https:// URL with a host"),
}


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
