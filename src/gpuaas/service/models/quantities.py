"""Resource amounts as the OpenAPI document says them, and the server's check of the same.

A request names resources and amounts in several places: a pod set's ``resources``, a tenant's
``capacity``, ``borrowing``, ``lending`` and ``maxJob``, a ClusterQueue's quotas, a hardware
profile's ranges. What each amount may be depends on the resource it is of, and this module
declares that once, per kind of resource, so that the JSON Schema the document carries and the
check the server runs before parsing (:func:`check_amount`, :func:`pod_resources`) are built from
the same patterns and bounds:

- **fractional** (``cpu``, ``memory``, ``ephemeral-storage``): any Kubernetes quantity from 0 to
  below 2**63 units (``500m``, ``1.5``, ``64Gi``, ``1e9``), or a JSON number in those bounds;
- **whole** (every other resource: ``nvidia.com/gpu``, MIG instances, renamed GPU shares,
  NICs...): a whole number of units (``4``, ``2k``, ``1Ki``, ``1e3``; not ``1.5`` or ``500m``);
- **share** (``gpuaas.io/gpu-milli``, in a pod's requests): a share of one GPU in thousandths
  (below 1000: ``500`` is half a GPU), or whole GPUs in thousands (``2000``, ``2k``), below a
  billion GPUs; a capacity or quota of it is a whole amount like any other.

A resource's name is a Kubernetes qualified name (``nvidia.com/gpu``, ``hugepages-2Mi``) of at
most 253 characters; in a pod's requests a MIG resource is ``nvidia.com/mig-<g>g.<memory>``
with 1 to 7 compute slices (``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``), the size
the admission engine charges it by. Amounts are bounded below 2**63 units so that every one
fits a 64-bit column, and a JSON number's bound is exactly a double (a validator reading
numbers as doubles reads 2**63 - 1 as 2**63).

A pod's requests also say what the server checks of them together: at most one GPU form with a
non-zero amount (whole GPUs, a share, or MIG instances) and, without a hardware profile, at least
one resource. That not every amount is zero the server alone checks (JSON Schema can say it, at a
cost in generating requests: :data:`ASKS_FOR_SOMETHING`); whether a resource is one the platform
knows, and amounts some node and quota could ever give, need the store.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    GPU_MILLI,
    MEMORY,
    MIG_PREFIX,
    NVIDIA_GPU,
    ResourceList,
    canonical_amount,
)
from gpuaas.service.models.common import (
    BYTES_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_AMOUNT,
    MAX_BYTES_TEXT,
    SUBDOMAIN_PATTERN,
)
from gpuaas.supply.mig import COMPUTE_SLICES

#: resources whose amounts may be fractions (CPU in milli-cores, bytes rounded up)
FRACTIONAL = (CPU, MEMORY, EPHEMERAL_STORAGE)

#: a whole amount as text: digits (no point) with no suffix, a suffix of at least one unit, or
#: a non-negative exponent up to 9; bounded as the byte sizes are (below 2**63 units)
WHOLE_PATTERN = (
    "^\\+?(0*[1-9][0-9]{0,17}|0*[1-9][0-9]{0,14}(k|Ki)|0*[1-9][0-9]{0,11}(M|Mi)"
    "|0*[1-9][0-9]{0,8}(G|Gi|[eE]\\+?0*[0-9])|0*[1-9][0-9]{0,5}(T|Ti)|0*[1-9][0-9]{0,2}(P|Pi)"
    "|0*[1-8]E|0*[1-7]Ei|0+([kMGTPE]|[KMGTPE]i|[eE]\\+?0*[0-9])?)$"
)
#: the most ``gpuaas.io/gpu-milli`` a pod may ask for: whole GPUs in thousands below a billion
#: GPUs (a multiple of 1000 this far below 2**53 is exact as a double, and so is its check)
MAX_SHARE = 10**12 - 1
#: a share as text: below 1000 in digits, or whole GPUs in thousands (``2000``, ``2k``)
SHARE_PATTERN = "^\\+?(0*[0-9]{1,3}|0*[1-9][0-9]{0,8}000|0*[1-9][0-9]{0,8}k)$"
#: a text that is an amount of zero (in any of the grammars above)
ZERO_PATTERN = "^\\+?(0+\\.?0*|0*\\.0+)([numkMGTPE]|[KMGTPE]i|[eE][+-]?0*([0-9]|[12][0-9]|30))?$"
#: a MIG instance as a pod asks for it: ``nvidia.com/mig-<compute slices>g.<memory>[.me]``
MIG_NAME_PATTERN = f"^nvidia\\.com/mig-[1-{COMPUTE_SLICES}]g\\.[-A-Za-z0-9_.]{{0,55}}[A-Za-z0-9]$"
#: the longest resource name (a label key's bound: the prefix and the name together)
MAX_NAME = 253

_WHOLE = re.compile(WHOLE_PATTERN)
_ANY = re.compile(BYTES_PATTERN)
_SHARE = re.compile(SHARE_PATTERN)
_NAME = re.compile(LABEL_KEY_PATTERN)
_MIG_NAME = re.compile(MIG_NAME_PATTERN)

_EXAMPLES = "examples: '500m', '64Gi', '1.5', '2', '1e3'"
NAME_WORDS = (
    "a resource name (a Kubernetes qualified name such as 'nvidia.com/gpu' or 'memory', at "
    "most 253 characters)"
)
_MIG_WORDS = (
    f"a MIG resource is nvidia.com/mig-<compute slices, 1 to {COMPUTE_SLICES}>g.<memory>, "
    "such as nvidia.com/mig-1g.10gb or nvidia.com/mig-3g.40gb"
)


def _schema(number: dict[str, Any], pattern: str) -> dict[str, Any]:
    text = {"type": "string", "pattern": pattern, "maxLength": MAX_BYTES_TEXT}
    return {"anyOf": [number, text]}


#: a quantity of a resource that may take fractions; of one counted in whole units
AMOUNT_SCHEMA = _schema({"type": "number", "minimum": 0, "maximum": MAX_AMOUNT}, BYTES_PATTERN)
WHOLE_SCHEMA = _schema({"type": "integer", "minimum": 0, "maximum": MAX_AMOUNT}, WHOLE_PATTERN)
#: a pod's share of GPUs (``gpuaas.io/gpu-milli``)
SHARE_SCHEMA = _schema(
    {
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_SHARE,
        "anyOf": [{"maximum": 999}, {"multipleOf": 1000}],
    },
    SHARE_PATTERN,
)
#: an amount of zero (of any resource)
ZERO_SCHEMA = {"anyOf": [{"const": 0}, {"type": "string", "pattern": ZERO_PATTERN}]}


def is_whole(value: int | float | str) -> bool:
    """Whether an amount the document admits (:data:`AMOUNT_SCHEMA`) is also a whole one."""
    if isinstance(value, str):
        return _WHOLE.fullmatch(value) is not None
    return float(value).is_integer()


def amount_problem(value: object) -> str | None:
    """Why ``value`` is not what :data:`AMOUNT_SCHEMA` says (None: it is)."""
    if isinstance(value, str):
        if len(value) > MAX_BYTES_TEXT or _ANY.fullmatch(value) is None:
            return (
                f"{value[:MAX_BYTES_TEXT]!r} is not a quantity from 0 to below 2**63 ({_EXAMPLES})"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a quantity (a number or a text such as '500m'), got {value!r}"
    if not (math.isfinite(value) and 0 <= value <= MAX_AMOUNT):
        return f"must be a quantity from 0 to 9.2e18, got {value}"
    return None


def _whole_problem(name: str, value: object) -> str | None:
    if amount_problem(value) is None and is_whole(value):  # type: ignore[arg-type]
        return None
    shown = value[:MAX_BYTES_TEXT] if isinstance(value, str) else value
    return (
        f"{name} is counted in whole units: a whole number from 0 to below 2**63 such as 4, "
        f"2k, 1Ki or 1e3, got {shown!r}"
    )


def _share_problem(value: object) -> str | None:
    problem = amount_problem(value)
    if problem is not None:
        return problem
    if isinstance(value, str):
        ok = _SHARE.fullmatch(value) is not None
    else:
        number = float(value)  # type: ignore[arg-type]
        ok = number.is_integer() and (number <= 999 or (number <= MAX_SHARE and number % 1000 == 0))
    if ok:
        return None
    return (
        f"a share of one GPU in thousandths below 1000 (500: half a GPU), or whole GPUs in "
        f"thousands (2000 or '2k'), at most 999,999,999,000; got {value!r}"
    )


def check_amount(field: str, name: str, value: object, *, pod: bool = False) -> None:
    """InvalidValue naming ``field`` unless ``value`` is what the document says of an amount
    of ``name`` (``pod``: in a pod's requests, where ``gpuaas.io/gpu-milli`` is a share)."""
    if name in FRACTIONAL:
        problem = amount_problem(value)
    elif pod and name == GPU_MILLI:
        problem = _share_problem(value)
    else:
        problem = _whole_problem(name, value)
    if problem is not None:
        raise InvalidValue(field, problem)


def check_name(field: str, name: str, *, pod: bool = False) -> None:
    """InvalidValue naming ``field`` unless ``name`` is a resource name the document admits
    (``pod``: a MIG resource's name says its compute slices)."""
    if len(name) > MAX_NAME or _NAME.fullmatch(name) is None:
        raise InvalidValue(field, f"{name[:80]!r} is not {NAME_WORDS}")
    if pod and name.startswith(MIG_PREFIX) and _MIG_NAME.fullmatch(name) is None:
        raise InvalidValue(field, f"{name[:80]!r}: {_MIG_WORDS}")


#: (name, type, value) -> canonical amount of what a pod asked for and passed the checks: a
#: cluster sees the same few ("nvidia.com/gpu", int, 1) over and over
_CHECKED: dict[tuple[str, type, object], int] = {}


def pod_resources(values: Mapping[str, object], field: str) -> ResourceList:
    """A pod's requests as canonical integers, each name and amount checked against the
    document first; InvalidValue naming ``<field>.<resource>``."""
    out: ResourceList = {}
    for name, value in values.items():
        key = (name, type(value), value)
        amount = _CHECKED.get(key)
        if amount is None:
            where = f"{field}.{name}"
            check_name(where, name, pod=True)
            check_amount(where, name, value, pod=True)
            amount = canonical_amount(name, value, where)  # type: ignore[arg-type]
            if len(_CHECKED) < 100_000:
                _CHECKED[key] = amount
        out[name] = amount
    return out


# --- the document's side ----------------------------------------------------------------------

#: a MIG resource's name, as a pattern the other names must not match
_MIG_START = "^nvidia\\.com/mig-"


def _names(pod: bool) -> dict[str, Any]:
    names: dict[str, Any] = {"pattern": LABEL_KEY_PATTERN, "maxLength": MAX_NAME}
    if pod:
        names["anyOf"] = [{"pattern": MIG_NAME_PATTERN}, {"not": {"pattern": _MIG_START}}]
    return names


def _nonzero(name: str) -> dict[str, Any]:
    return {"required": [name], "properties": {name: {"not": ZERO_SCHEMA}}}


#: some MIG resource asked for with a non-zero amount
_SOME_MIG = {"not": {"patternProperties": {_MIG_START: ZERO_SCHEMA}}}
#: two GPU forms asked for at once (with non-zero amounts): what a pod may not do
_TWO_FORMS = {
    "anyOf": [
        {"allOf": [_nonzero(NVIDIA_GPU), _nonzero(GPU_MILLI)]},
        {"allOf": [_nonzero(NVIDIA_GPU), _SOME_MIG]},
        {"allOf": [_nonzero(GPU_MILLI), _SOME_MIG]},
    ]
}


def amounts_schema(*, pod: bool = False, fractions: bool = True) -> dict[str, Any]:
    """``{resource: amount}`` as the document says it, each amount by its resource's kind.
    ``pod``: a pod's requests (MIG names, a share, one GPU form); ``fractions``: a fractional
    resource's JSON number may have a fraction (otherwise a JSON integer, or any text)."""
    fractional = AMOUNT_SCHEMA
    if not fractions:
        fractional = {"anyOf": [WHOLE_SCHEMA["anyOf"][0], AMOUNT_SCHEMA["anyOf"][1]]}
    schema: dict[str, Any] = {
        "type": "object",
        "propertyNames": _names(pod),
        "properties": {name: fractional for name in FRACTIONAL},
        "additionalProperties": WHOLE_SCHEMA,
    }
    if pod:
        schema["properties"][GPU_MILLI] = SHARE_SCHEMA
        schema["not"] = _TWO_FORMS
    return schema


def refuse_booleans(value: Any, path: str = "") -> Any:
    """A map of amounts (or of such maps) as given, refusing JSON's true/false before pydantic
    reads them as 1/0: a boolean is no quantity, and the document says so."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(item, bool):
                raise ValueError(f"{where}: expected a quantity, got {item!r}")
            refuse_booleans(item, where)
    return value


#: a pod's requests: per resource name, and at most one GPU form (the server's
#: ``jobs._check_gpu_form`` after :func:`pod_resources`)
POD_RESOURCES_SCHEMA = amounts_schema(pod=True)
#: requests that ask for something, as far as the document says it: at least one resource. That
#: not every amount is zero is the server's (``jobs._check_gpu_form``): JSON Schema can say it
#: (``not`` every property zero), but schemathesis then took twice as long to generate a job
ASKS_FOR_SOMETHING = {"type": "object", "minProperties": 1}
#: a pod's requests as a request body gives them
PodResources = Annotated[
    dict[str, int | float | str],
    BeforeValidator(refuse_booleans),
    WithJsonSchema(POD_RESOURCES_SCHEMA),
]
#: ``{resource: amount}`` of a tenant's terms (``maxJob``): a JSON integer or a quantity text
AMOUNTS_SCHEMA = amounts_schema(fractions=False)
Amounts = Annotated[
    dict[str, str | int], BeforeValidator(refuse_booleans), WithJsonSchema(AMOUNTS_SCHEMA)
]
#: ``{flavor: {resource: amount}}`` (a tenant's ``capacity``, ``borrowing``, ``lending``)
FLAVOR_AMOUNTS_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": SUBDOMAIN_PATTERN, "maxLength": 253},
    "additionalProperties": AMOUNTS_SCHEMA,
}
FlavorAmounts = Annotated[
    dict[str, dict[str, str | int]],
    BeforeValidator(refuse_booleans),
    WithJsonSchema(FLAVOR_AMOUNTS_SCHEMA),
]
