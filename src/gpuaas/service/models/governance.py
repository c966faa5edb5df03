"""Request and response bodies of governance objects (camelCase JSON).

Objects carry their Kueue ``spec`` unchanged (``kueue.x-k8s.io/v1beta2``; a HardwareProfile's is
``gpuaas.io/v1``), so what a Kueue user knows applies as is.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from gpuaas.model.node import TaintEffect
from gpuaas.service.models.common import DNS_LABEL_PATTERN, LABEL_KEY_PATTERN
from gpuaas.service.models.identity import CamelIn, CamelOut, Text

#: What the schema says of an object's name (``governance.check_name`` checks it): a DNS-1123
#: subdomain
_NAME = {
    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "minLength": 1,
    "maxLength": 253,
}


class ObjectIn(CamelIn):
    """A flavor, cohort or hardware profile: its name and Kueue spec (on PUT the name may be
    left out; it comes from the path)."""

    name: str | None = Field(default=None, json_schema_extra=_NAME)
    spec: dict[str, Any] = Field(default_factory=dict)


# --- a ResourceFlavor's spec, as the document says it ----------------------------------------
#
# Kueue's ResourceFlavor spec as gpuaas reads it (``supply.kueue._flavor`` and
# ``governance._check_flavor``): node labels and taint keys and values are Kubernetes labels.
# The request body is held to the same rules by pydantic, so the OpenAPI document and the
# server refuse the same specs. Stricter than the YAML import, where a label value may be a
# YAML number: in JSON a label value is a string, and a label key is at most 253 characters
# (so its DNS-subdomain prefix is too).

#: empty, or 1-63 letters, digits, ``-``, ``_``, ``.``, starting and ending alphanumeric
LABEL_VALUE_PATTERN = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
_LABEL_KEY_SCHEMA = {"type": "string", "pattern": LABEL_KEY_PATTERN, "maxLength": 253}
_LABEL_VALUE_SCHEMA = {"type": "string", "pattern": LABEL_VALUE_PATTERN, "maxLength": 63}


def _label_key(key: str) -> str:
    """A label key as the document's pattern says it; refused in words, not the pattern."""
    if len(key) > 253 or _LABEL_KEY.fullmatch(key) is None:
        raise ValueError(
            f"{key[:100]!r} is not a label key: an optional DNS-subdomain prefix and '/', then "
            "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit "
            "(at most 253 characters in all), such as 'gpuaas.io/pool' or 'zone'"
        )
    return key


def _label_value(value: str) -> str:
    if len(value) > 63 or _LABEL_VALUE.fullmatch(value) is None:
        raise ValueError(
            f"{value[:100]!r} is not a label value: empty, or at most 63 letters, digits, '-', "
            "'_' or '.', starting and ending with a letter or digit"
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key), WithJsonSchema(_LABEL_KEY_SCHEMA)]
LabelValue = Annotated[str, AfterValidator(_label_value), WithJsonSchema(_LABEL_VALUE_SCHEMA)]
#: pydantic says a constrained key as ``patternProperties`` (other keys allowed): say it exactly
Labels = Annotated[
    dict[LabelKey, LabelValue],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": LABEL_KEY_PATTERN, "maxLength": 253},
            "additionalProperties": _LABEL_VALUE_SCHEMA,
        }
    ),
]


class TaintIn(CamelIn):
    """A taint the flavor's nodes carry (``value`` left out: empty)."""

    key: LabelKey
    value: LabelValue | None = None
    effect: TaintEffect


class TolerationIn(CamelIn):
    """A toleration the flavor's pods get (``operator`` left out or empty: ``Equal``)."""

    key: Text | None = None
    operator: Literal["", "Equal", "Exists"] | None = None
    value: Text | None = None
    effect: Text | None = None


class FlavorSpec(CamelIn):
    """``topologyName``: a Topology that exists (else a 404 naming ``spec.topologyName``)."""

    node_labels: Labels | None = None
    node_taints: list[TaintIn] | None = None
    tolerations: list[TolerationIn] | None = None
    topology_name: Text | None = Field(default=None, min_length=1)


class FlavorIn(ObjectIn):
    """A ResourceFlavor: its name and Kueue spec, held to :class:`FlavorSpec`."""

    spec: FlavorSpec = Field(default_factory=FlavorSpec)  # type: ignore[assignment]


class ClusterQueueIn(ObjectIn):
    """``tenant``: the owning tenant (provider routes only); its capacity bounds the quota."""

    tenant: str | None = Field(
        default=None, json_schema_extra={"pattern": DNS_LABEL_PATTERN, "maxLength": 63}
    )


class ObjectOut(CamelOut):
    kind: str
    name: str
    tenant: str | None = Field(default=None, description="the owning tenant; null: the provider")
    spec: dict[str, Any]
    created_at: float
    updated_at: float


class ResourceUsage(CamelOut):
    name: str = Field(description="the resource")
    total: str = Field(description="what the queue's workloads hold, a quantity")
    borrowed: str = Field(description="the part of total above the nominal quota (0: none)")


class FlavorUsage(CamelOut):
    name: str = Field(description="the ResourceFlavor")
    resources: list[ResourceUsage]


class ClusterQueueStatus(CamelOut):
    """Kueue's ClusterQueue status (gpuaas.service.queue_status)."""

    flavors_usage: list[FlavorUsage] = Field(
        description="per flavor and resource of the spec (then any other held): what the "
        "admitted and running workloads hold, and how much of it is borrowed"
    )
    pending_workloads: int = Field(description="jobs waiting in a LocalQueue that feeds it")
    reserving_workloads: int = Field(description="jobs holding its quota")
    admitted_workloads: int = Field(description="jobs admitted (Admitted or Running)")


class ClusterQueueOut(ObjectOut):
    status: ClusterQueueStatus | None = Field(
        default=None,
        description="what the queue holds now; null only for a queue another server wrote "
        "in the last second (not yet in this server's governance)",
    )


class LocalQueueIn(CamelIn):
    name: str | None = Field(default=None, json_schema_extra=_NAME)
    cluster_queue: str = Field(json_schema_extra=_NAME)
    user_limit: int | None = Field(
        default=None, ge=1, description="most workloads of one user holding quota at once"
    )


class LocalQueueOut(CamelOut):
    name: str
    tenant: str
    cluster_queue: str
    user_limit: int | None
    pending: int | None = None
    admitted: int | None = None
    running: int | None = None
    created_at: float
    updated_at: float


class PriorityClassIn(CamelIn):
    name: str | None = Field(default=None, json_schema_extra=_NAME)
    value: int = Field(ge=-(2**31), le=2**31 - 1)
    description: Text = Field(default="", max_length=2000)


class PriorityClassOut(CamelOut):
    name: str
    value: int
    description: str
    tenant: str | None = Field(default=None, description="null: a global class")
    created_at: float
    updated_at: float


class ImportResult(CamelOut):
    dry_run: bool
    created: list[str]
    updated: list[str]
    #: objects that mean what is stored already (quantities compared by amount): left alone
    unchanged: list[str]
