"""Resource names and canonical integer amounts.

As in Kubernetes' scheduler, CPU is counted in milli-cores and every other resource in whole
units (bytes for memory, devices for ``nvidia.com/*``). A :data:`ResourceList` maps a name to
that integer so sums and comparisons are exact.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuaas.model.errors import InvalidValue
from gpuaas.model.quantity import Quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
GPU_DRIVER = "gpu.nvidia.com"

ResourceList = dict[str, int]


def mig_resource(profile: str) -> str:
    """The extended resource the GPU operator advertises for a MIG profile (mixed strategy).

    The device plugin turns ``+`` into ``.`` (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``)
    because ``+`` is not allowed in a resource name.
    """
    return f"{MIG_PREFIX}{profile.replace('+', '.')}"


def canonical_amount(name: str, value: str | int | float | Quantity, field: str = "") -> int:
    """Integer amount of ``value`` for ``name``; rejects negatives and fractional devices."""
    where = field or name
    quantity = Quantity.parse(value, where)
    if quantity.is_negative():
        raise InvalidValue(where, f"must not be negative, got {value!r}")
    if name == CPU:
        return quantity.milli()
    if quantity.amount.denominator != 1 and name not in (MEMORY, EPHEMERAL_STORAGE):
        raise InvalidValue(where, f"{name} must be a whole number, got {value!r}")
    return quantity.value()


def parse_resource_list(values: Mapping[str, object], field: str = "resources") -> ResourceList:
    """Parse ``{"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 1}`` into canonical integers."""
    if not isinstance(values, Mapping):
        raise InvalidValue(field, f"expected a mapping of resource to quantity, got {values!r}")
    out: ResourceList = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise InvalidValue(field, f"resource name must be a non-empty string, got {name!r}")
        out[name] = canonical_amount(name, value, f"{field}.{name}")  # type: ignore[arg-type]
    return out


def format_amount(name: str, amount: int) -> str:
    """Human text for a canonical amount (``cpu`` 1500 -> ``1500m``, memory -> ``64Gi``)."""
    if name == CPU:
        return str(Quantity.from_milli(amount))
    return str(Quantity.parse(amount))


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in request.items())
