"""Resource names and canonical integer amounts.

As in Kubernetes' scheduler, CPU is counted in milli-cores and every other resource in whole
units (bytes for memory, devices for ``nvidia.com/*``). A :data:`ResourceList` maps a name to
that integer so sums and comparisons are exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpuaas.model.errors import InvalidValue
from gpuaas.model.quantity import Quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
#: A share of one GPU, or whole GPUs in thousands (see gpuaas.engine.admission.gpu_size).
GPU_MILLI = "gpuaas.io/gpu-milli"
#: Time-sliced or MPS replicas, when the device plugin renames them (``renameByDefault``).
SHARED_GPU = "nvidia.com/gpu.shared"
#: Resources whose amounts are bytes (memory-like): only these keep a binary suffix.
BYTE_RESOURCES = (MEMORY, EPHEMERAL_STORAGE)
GPU_DRIVER = "gpu.nvidia.com"

ResourceList = dict[str, int]


def mig_resource(profile: str) -> str:
    """The extended resource the GPU operator advertises for a MIG profile (mixed strategy).

    The device plugin turns ``+`` into ``.`` (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``)
    because ``+`` is not allowed in a resource name.
    """
    return f"{MIG_PREFIX}{profile.replace('+', '.')}"


#: Amounts already parsed, by (resource, type, value): a cluster sees the same few quantities
#: ("8", "32Gi", 1) over and over, and exact parsing is the costly part of reading a request.
_PARSED: dict[tuple[str, type, object], int] = {}


def canonical_amount(name: str, value: str | int | float | Quantity, field: str = "") -> int:
    """Integer amount of ``value`` for ``name``; rejects negatives and fractional devices."""
    cacheable = type(value) is str or type(value) is int
    if cacheable:
        found = _PARSED.get((name, type(value), value))
        if found is not None:
            return found
    amount = _canonical_amount(name, value, field)
    if cacheable and len(_PARSED) < 100_000:
        _PARSED[(name, type(value), value)] = amount
    return amount


def _canonical_amount(name: str, value: str | int | float | Quantity, field: str) -> int:
    where = field or name
    quantity = Quantity.parse(value, where)
    if quantity.is_negative():
        raise InvalidValue(where, f"must not be negative, got {value!r}")
    if name == CPU:
        return quantity.milli()
    if quantity.amount.denominator != 1 and name not in (MEMORY, EPHEMERAL_STORAGE):
        raise InvalidValue(where, f"{name} must be a whole number, got {value!r}")
    return quantity.value()


_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_resource_name(name: str, field: str) -> None:
    """A resource name is a Kubernetes qualified name: an optional DNS-subdomain prefix and
    ``/``, then at most 63 letters, digits, ``-``, ``_`` or ``.``, starting and ending with a
    letter or digit (``nvidia.com/mig-1g.10gb``, ``hugepages-2Mi``); ``../../etc`` is not."""
    prefix, slash, rest = name.rpartition("/")
    ok = bool(_NAME_PART.fullmatch(rest)) and (
        not slash or (len(prefix) <= 253 and bool(_PREFIX.fullmatch(prefix)))
    )
    if not ok:
        raise InvalidValue(
            field,
            f"{name[:80]!r} is not a resource name (a Kubernetes qualified name such as "
            "'nvidia.com/gpu' or 'memory')",
        )


def parse_resource_list(values: Mapping[str, object], field: str = "resources") -> ResourceList:
    """Parse ``{"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 1}`` into canonical integers."""
    if not isinstance(values, Mapping):
        raise InvalidValue(field, f"expected a mapping of resource to quantity, got {values!r}")
    out: ResourceList = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise InvalidValue(field, f"resource name must be a non-empty string, got {name!r}")
        check_resource_name(name, f"{field}.{name}")
        out[name] = canonical_amount(name, value, f"{field}.{name}")  # type: ignore[arg-type]
    return out


_FORMATTED: dict[tuple[str, int], str] = {}


def is_bytes(name: str) -> bool:
    """Whether ``name`` is counted in bytes (memory, ephemeral storage, huge pages)."""
    return name in BYTE_RESOURCES or name.startswith("hugepages-")


def format_amount(name: str, amount: int) -> str:
    """A canonical amount as a Kubernetes quantity, the form API documents and exports carry.

    ``cpu`` 1500 -> ``1500m``, memory -> ``64Gi``; every other resource counts things (GPUs, MIG
    instances, replicas), and a count is written as its plain number: ``1024`` GPUs, never
    ``1Ki``. What a person reads in a sentence is :func:`describe_amount`.
    """
    found = _FORMATTED.get((name, amount))
    if found is None:
        if name == CPU:
            found = str(Quantity.from_milli(amount))
        elif is_bytes(name):
            found = str(Quantity.parse(amount))
        else:
            found = str(amount)
        if len(_FORMATTED) < 100_000:
            _FORMATTED[(name, amount)] = found
    return found


def describe_amount(name: str, amount: int) -> str:
    """An amount as a person reads it in a reason, an error or a table: the one display rule.

    GPUs are GPUs (``3 GPUs``; ``gpuaas.io/gpu-milli`` 1500 is ``1.5 GPUs``), MIG instances are
    instances of their profile (``2 x nvidia.com/mig-1g.10gb``), renamed time-sliced or MPS
    replicas are shares (``4 GPU shares``), other counted resources are their number; CPU and
    memory keep their Kubernetes forms (``1500m``, ``64Gi``). A negative amount (a deficit)
    reads as its magnitude with a minus sign.
    """
    if amount < 0:
        return f"-{describe_amount(name, -amount)}"
    if name == NVIDIA_GPU:
        return f"{amount} GPU" if amount == 1 else f"{amount} GPUs"
    if name == GPU_MILLI:
        whole, milli = divmod(amount, 1000)
        text = str(whole) if not milli else f"{whole}.{milli:03d}".rstrip("0")
        return f"{text} GPU" if amount == 1000 else f"{text} GPUs"
    if name.startswith(MIG_PREFIX):
        return f"{amount} x {name}"
    if name == SHARED_GPU:
        return f"{amount} GPU share" if amount == 1 else f"{amount} GPU shares"
    return format_amount(name, amount)


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in request.items())
