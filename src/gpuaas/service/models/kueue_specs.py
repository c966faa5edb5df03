"""The specs of Cohorts, ClusterQueues and HardwareProfiles as the OpenAPI document says them.

A request's ``spec`` is held by pydantic to these models before the Kueue loader
(:mod:`gpuaas.supply.kueue`) reads it, so the document and the server refuse the same specs:
every field the loader reads, with its type, enum, bounds and the rules across fields that JSON
Schema can say (a quota in whole units for a resource counted in whole units, a borrowing or
lending limit only with a cohort, ``maxPriorityThreshold`` only with policy ``LowerPriority``, a
fungibility ``preference`` only when both policies are ``TryNextFlavor``). Kueue's own limits
(its CRDs: 16 resource groups, 64 covered resources, flavors and resources) bound a spec.

What JSON Schema cannot say stays the server's, with a 422 naming the field (each operation's
reason in ``tests/service/test_schemathesis.py``): a flavor's resources must be the group's
covered resources in that order, a resource is covered by one group only, a flavor is listed
once, a ClusterQueue's ``lendingLimit`` is at most its ``nominalQuota``, a profile's
``min <= default <= max`` and its resources named once; and what needs the store (the flavors,
cohorts and LocalQueues named, a tenant's tree and grant).

A quantity is Kubernetes' syntax as :mod:`gpuaas.service.models.quantities` declares it for
every request that names resources (below 2**63 units, at most 64 characters), or a JSON number
in the same bounds; a resource counted in whole units (anything but ``cpu``, ``memory`` and
``ephemeral-storage``) takes whole numbers only (``4``, ``2k``, ``1Ki``, ``1e3``; not ``1.5`` or
``500m``). Every text is matched against the document's pattern before it is parsed, and a
mismatch says in words what it must be.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, model_validator

from gpuaas.model.governance import (
    BorrowWithinCohortPolicy,
    FungibilityPolicy,
    FungibilityPreference,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from gpuaas.service.models.common import DNS_LABEL_PATTERN, SUBDOMAIN_PATTERN
from gpuaas.service.models.governance import LABEL_KEY_PATTERN, ClusterQueueIn, ObjectIn
from gpuaas.service.models.identity import CamelIn, Text
from gpuaas.service.models.quantities import (
    AMOUNT_SCHEMA,
    FRACTIONAL,
    NAME_WORDS,
    WHOLE_SCHEMA,
    amount_problem,
    is_whole,
)

_SUBDOMAIN = re.compile(SUBDOMAIN_PATTERN)
_LABEL = re.compile(DNS_LABEL_PATTERN)
_RESOURCE = re.compile(LABEL_KEY_PATTERN)


def _amount(value: int | float | str) -> int | float | str:
    """A quantity as :data:`AMOUNT_SCHEMA` says it (Strict refuses true/false first)."""
    problem = amount_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


#: a quantity (number or Kubernetes text), checked against the document before it is parsed
Amount = Annotated[int | float | str, AfterValidator(_amount), WithJsonSchema(AMOUNT_SCHEMA)]


def _named(pattern: re.Pattern[str], what: str, limit: int) -> Any:
    def check(value: str) -> str:
        if len(value) > limit or pattern.fullmatch(value) is None:
            raise ValueError(f"{value[:100]!r} is not {what}")
        return value

    return AfterValidator(check)


_SUBDOMAIN_WORDS = (
    "a DNS-1123 subdomain (at most 253 lowercase letters, digits, '-' and '.', starting and "
    "ending with a letter or digit)"
)
_RESOURCE_WORDS = NAME_WORDS
#: a reference to a named object (a flavor, a cohort, a LocalQueue)
Subdomain = Annotated[
    str,
    _named(_SUBDOMAIN, _SUBDOMAIN_WORDS, 253),
    WithJsonSchema({"type": "string", "pattern": SUBDOMAIN_PATTERN, "maxLength": 253}),
]
#: a cohort's name, or empty (none)
_MAYBE = "^(" + SUBDOMAIN_PATTERN[1:-1] + ")?$"
CohortRef = Annotated[
    str,
    _named(re.compile(_MAYBE), f"empty (no cohort) or {_SUBDOMAIN_WORDS}", 253),
    WithJsonSchema({"type": "string", "pattern": _MAYBE, "maxLength": 253}),
]
ResourceName = Annotated[
    str,
    _named(_RESOURCE, _RESOURCE_WORDS, 253),
    WithJsonSchema({"type": "string", "pattern": LABEL_KEY_PATTERN, "maxLength": 253}),
]
TenantName = Annotated[
    str,
    _named(_LABEL, "a tenant name (a DNS-1123 label of at most 63 characters)", 63),
    WithJsonSchema({"type": "string", "pattern": DNS_LABEL_PATTERN, "maxLength": 63}),
]


def _whole_units(required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """The amounts in whole units unless the resource ``name`` may take fractions."""
    maybe = {"anyOf": [*WHOLE_SCHEMA["anyOf"], {"type": "null"}]}
    whole = {**{a: WHOLE_SCHEMA for a in required}, **{a: maybe for a in optional}}
    return {
        "anyOf": [
            {"required": ["name"], "properties": {"name": {"enum": list(FRACTIONAL)}}},
            {"properties": whole},
        ]
    }


def _check_whole(name: str, values: dict[str, Any]) -> None:
    if name in FRACTIONAL:
        return
    for field, value in values.items():
        if value is not None and not is_whole(value):
            raise ValueError(
                f"{field}: {name} is counted in whole units: a whole number such as 4, 2k, "
                f"1Ki or 1e3, got {value!r}"
            )


# --- Kueue's resource groups (ClusterQueues and Cohorts) ------------------------------------

_QUOTA_RULES = _whole_units(("nominalQuota",), ("borrowingLimit", "lendingLimit"))


class ResourceQuotaIn(CamelIn):
    """A resource's quota in one flavor: ``nominalQuota``, and with a cohort how much more it
    may borrow (``borrowingLimit``) and how much of it others may borrow (``lendingLimit``,
    at most ``nominalQuota`` in a ClusterQueue); left out or null: no limit."""

    model_config = ConfigDict(json_schema_extra=_QUOTA_RULES)

    name: ResourceName
    nominal_quota: Amount
    borrowing_limit: Amount | None = None
    lending_limit: Amount | None = None

    @model_validator(mode="after")
    def _whole_units(self) -> ResourceQuotaIn:
        _check_whole(self.name, {"nominalQuota": self.nominal_quota,
                                 "borrowingLimit": self.borrowing_limit,
                                 "lendingLimit": self.lending_limit})  # fmt: skip
        return self


class FlavorQuotasIn(CamelIn):
    """A ResourceFlavor's quotas: one per covered resource, in the group's order."""

    name: Subdomain
    resources: list[ResourceQuotaIn] = Field(min_length=1, max_length=64)


class ResourceGroupIn(CamelIn):
    """Resources that share flavors: each flavor lists a quota for every covered resource."""

    covered_resources: list[ResourceName] = Field(
        min_length=1, max_length=64, json_schema_extra={"uniqueItems": True}
    )
    flavors: list[FlavorQuotasIn] | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _once(self) -> ResourceGroupIn:
        names = self.covered_resources
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"coveredResources[{i}]: {name} is listed twice")
        return self


class FairSharingIn(CamelIn):
    """The queue's (or cohort's) weight in fair sharing: a non-negative quantity."""

    weight: Amount | None = None


ResourceGroups = Annotated[list[ResourceGroupIn] | None, Field(max_length=16)]


class _Quotas(CamelIn):
    resource_groups: ResourceGroups = None
    fair_sharing: FairSharingIn | None = None


class CohortSpec(_Quotas):
    """Kueue's Cohort: ``parentName`` (empty: a root), its own ``resourceGroups`` (a quota
    shared by the tree below it) and ``fairSharing``."""

    parent_name: CohortRef | None = None


# --- a ClusterQueue's policies --------------------------------------------------------------


class BorrowWithinCohortIn(CamelIn):
    """Preempt in the cohort to borrow: ``policy`` Never or LowerPriority (then
    ``maxPriorityThreshold`` bounds the priorities preempted)."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"maxPriorityThreshold": {"type": "null"}}},
                {"required": ["policy"], "properties": {"policy": {"const": "LowerPriority"}}},
            ]
        }
    )

    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)

    @model_validator(mode="after")
    def _threshold(self) -> BorrowWithinCohortIn:
        if (
            self.max_priority_threshold is not None
            and self.policy is not BorrowWithinCohortPolicy.LOWER_PRIORITY
        ):
            raise ValueError("maxPriorityThreshold needs policy LowerPriority")
        return self


class PreemptionIn(CamelIn):
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortIn | None = None


_TRY_NEXT = {"const": "TryNextFlavor"}


class FlavorFungibilityIn(CamelIn):
    """Whether admission tries the next flavor when it could borrow or preempt in this one;
    ``preference`` only when it tries the next flavor in both cases."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"preference": {"type": "null"}}},
                {
                    "required": ["whenCanBorrow"],
                    "properties": {"whenCanBorrow": _TRY_NEXT, "whenCanPreempt": _TRY_NEXT},
                },
            ]
        }
    )

    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None

    @model_validator(mode="after")
    def _preference(self) -> FlavorFungibilityIn:
        tries = FungibilityPolicy.TRY_NEXT_FLAVOR
        if self.preference is not None and not (
            self.when_can_borrow is tries and self.when_can_preempt is tries
        ):
            raise ValueError(
                "preference can only be set when both whenCanBorrow and whenCanPreempt are "
                "TryNextFlavor"
            )
        return self


def _every(value: dict[str, Any]) -> dict[str, Any]:
    if value:
        raise ValueError(
            "only {} (every namespace) is supported: gpuaas does not know namespace labels"
        )
    return value


EverySelector = Annotated[
    dict[str, Any], AfterValidator(_every), WithJsonSchema({"type": "object", "maxProperties": 0})
]
_NO_LIMIT = {"type": "null"}
#: no borrowingLimit or lendingLimit anywhere in the groups (a queue without a cohort)
_NO_LIMITS = {
    "properties": {
        "resourceGroups": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "array",
                    "items": {"properties": {"flavors": {"anyOf": [{"type": "null"}, {
                        "type": "array",
                        "items": {"properties": {"resources": {"items": {"properties": {
                            "borrowingLimit": _NO_LIMIT, "lendingLimit": _NO_LIMIT,
                        }}}}},
                    }]}}},
                },
            ]
        }
    }
}  # fmt: skip


class ClusterQueueSpec(_Quotas):
    """Kueue's ClusterQueue as gpuaas reads it: quota per flavor and resource, the cohort it
    borrows in and lends to (``cohortName``; a borrowing or lending limit needs one), its
    queueing strategy, preemption and flavor fungibility policies, its fair-sharing weight;
    ``namespaceSelector`` only ``{}`` (gpuaas knows no namespace labels) and ``stopPolicy``
    only ``None`` (holding a queue is the service's)."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["cohortName"],
                    "properties": {"cohortName": {"type": "string", "minLength": 1}},
                },
                _NO_LIMITS,
            ]
        }
    )

    cohort_name: CohortRef | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: PreemptionIn | None = None
    flavor_fungibility: FlavorFungibilityIn | None = None
    namespace_selector: EverySelector | None = None
    stop_policy: Literal["None"] | None = None

    @model_validator(mode="after")
    def _limits_need_a_cohort(self) -> ClusterQueueSpec:
        if self.cohort_name:
            return self
        for gi, group in enumerate(self.resource_groups or ()):
            for fi, flavor in enumerate(group.flavors or ()):
                for ri, quota in enumerate(flavor.resources):
                    if quota.borrowing_limit is not None or quota.lending_limit is not None:
                        raise ValueError(
                            f"resourceGroups[{gi}].flavors[{fi}].resources[{ri}]: "
                            "borrowingLimit/lendingLimit need a cohortName"
                        )
        return self


# --- gpuaas' HardwareProfile ----------------------------------------------------------------

_RANGE_RULES = _whole_units(("min", "default"), ("max",))


class ResourceRangeIn(CamelIn):
    """What one pod of the profile gets of a resource: ``default``, and what a job may ask
    instead, from ``min`` to ``max`` (left out or null: no upper bound)."""

    model_config = ConfigDict(json_schema_extra=_RANGE_RULES)

    name: ResourceName
    min: Amount
    default: Amount
    max: Amount | None = None

    @model_validator(mode="after")
    def _whole_units(self) -> ResourceRangeIn:
        _check_whole(self.name, {"min": self.min, "default": self.default, "max": self.max})
        return self


class HardwareProfileSpec(CamelIn):
    """A catalogue entry users pick: ``displayName``, the ``localQueue`` its jobs go to (in
    each allowed tenant's namespace), the ``resources`` a pod gets, and the tenants it serves
    (``allowedTenants``; left out: every tenant with that LocalQueue)."""

    display_name: Text = Field(min_length=1, max_length=253)
    description: Text | None = Field(default=None, min_length=1, max_length=2000)
    local_queue: Subdomain
    allowed_tenants: list[TenantName] | None = Field(
        default=None, max_length=1000, json_schema_extra={"uniqueItems": True}
    )
    resources: list[ResourceRangeIn] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _tenants_once(self) -> HardwareProfileSpec:
        tenants = self.allowed_tenants or []
        for i, tenant in enumerate(tenants):
            if tenant in tenants[:i]:
                raise ValueError(f"allowedTenants[{i}]: {tenant} is listed twice")
        return self


# --- the request bodies ---------------------------------------------------------------------


class CohortIn(ObjectIn):
    """A Cohort: its name and Kueue spec, held to :class:`CohortSpec`."""

    spec: CohortSpec = Field(default_factory=CohortSpec)  # type: ignore[assignment]


class TenantClusterQueueIn(ObjectIn):
    """A tenant's ClusterQueue: its name and Kueue spec, held to :class:`ClusterQueueSpec`."""

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)  # type: ignore[assignment]


class ProviderClusterQueueIn(ClusterQueueIn):
    """A ClusterQueue on the provider's routes (``tenant``: its owner)."""

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)  # type: ignore[assignment]


class HardwareProfileIn(ObjectIn):
    """A HardwareProfile: its name and spec, held to :class:`HardwareProfileSpec`."""

    spec: HardwareProfileSpec  # type: ignore[assignment]
