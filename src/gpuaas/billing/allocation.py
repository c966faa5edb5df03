"""The allocation view, in OpenCost's spirit: what the fleet's capacity cost over a window,
how much of it was allocated (to whom), and how much stood idle.

Capacity is the fleet's devices (whole GPUs, MIG instances, time-slice and MPS replicas, as
the supply plane names them), each present for some seconds of the window and priced per hour
by its capacity SKU (the device's SKU without the pool; the caller prices it, usually at the
provider's on-demand list price in force at the window's start). Allocation is the usage
records on those devices clipped to the window (``quantity`` is seconds x fraction held, so a
time-slice share allocates its fraction). Both are valued at the device's capacity price, as
OpenCost values allocations at the node's cost, so that, per capacity SKU,

    allocated cost + idle cost = capacity cost

where idle is computed from each device's own unallocated seconds (not as a difference of
totals). Billed amounts are another matter (invoices): they use the price entries the records
name. Usage sold from the idle pool (SKUs ``@idle-pool``) is allocated like any other but
listed apart (``spot``), with what it was billed.

``include_idle`` adds one ``__idle__`` row per SKU; ``share_idle`` spreads each SKU's idle
cost over that SKU's allocations in proportion to their allocated cost (a SKU with no
allocation keeps its idle row), so the rows still add up to the capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from gpuaas.billing.invoices import HOUR, ZERO, sku_of
from gpuaas.model.billing import CapacityPool, Shape, Sku, UsageRecord
from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import Node
from gpuaas.supply.devices import gpu_device_name, mig_device_name, shared_device_name

IDLE = "__idle__"
GPU_SHAPES = frozenset({Shape.WHOLE, Shape.MIG, Shape.TIME_SLICE, Shape.MPS})


class Aggregate(StrEnum):
    TENANT = "tenant"
    USER = "user"
    QUEUE = "queue"
    CLUSTER = "cluster"
    JOB = "job"


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """One device of the fleet for the window: ``seconds`` it was there, at ``per_hour``."""

    node: str
    device: str
    sku: str  # its capacity SKU (resource/shape[/profile]); a pool suffix is ignored
    seconds: Decimal
    per_hour: Decimal


@dataclass(frozen=True, slots=True)
class AllocationRow:
    name: str
    sku: str
    seconds: Decimal  # unit-seconds allocated (x fraction held)
    cost: Decimal  # at capacity price
    shared_idle: Decimal = ZERO

    @property
    def total(self) -> Decimal:
        return self.cost + self.shared_idle


@dataclass(frozen=True, slots=True)
class SpotRow:
    name: str
    sku: str
    seconds: Decimal
    cost: Decimal  # at capacity price
    billed: Decimal  # what its records were billed (the spot price)


@dataclass(slots=True)
class Allocation:
    start: float
    end: float
    aggregate: Aggregate
    rows: list[AllocationRow] = field(default_factory=list)
    spot: list[SpotRow] = field(default_factory=list)
    capacity: dict[str, Decimal] = field(default_factory=dict)  # per capacity SKU
    allocated: dict[str, Decimal] = field(default_factory=dict)
    idle: dict[str, Decimal] = field(default_factory=dict)


def fleet_capacity(
    nodes: Iterable[Node], seconds: float, per_hour: Callable[[str], Decimal]
) -> list[DeviceCapacity]:
    """Every GPU device of ``nodes`` for ``seconds``, as the supply plane names it: a whole
    GPU one unit of ``<model>/whole``, a MIG instance one unit of ``<model>/mig/<profile>``,
    each of ``n`` time-slice or MPS replicas ``1/n`` of ``<model>/timeslice/<n>`` (so a
    replica's capacity is what one share held all the time would record). ``per_hour``
    prices a device's on-demand SKU id (its list price in force, usually)."""
    out = []
    window = Decimal(seconds)
    for node in nodes:
        for gpu in node.gpus:
            partition = gpu.partition
            if partition.mode is PartitionMode.MIG:
                for inst in sorted(partition.instances):
                    sku = Sku(gpu.model, Shape.MIG, profile=inst.profile).id
                    out.append(_device(node, mig_device_name(gpu.index, inst), sku, window,
                                       per_hour))  # fmt: skip
            elif partition.shared:
                shape = Shape.MPS if partition.mode is PartitionMode.MPS else Shape.TIME_SLICE
                sku = Sku(gpu.model, shape, profile=str(partition.replicas)).id
                share = window / partition.replicas
                for r in range(partition.replicas):
                    out.append(_device(node, shared_device_name(gpu.index, r), sku, share,
                                       per_hour))  # fmt: skip
            else:
                sku = Sku(gpu.model, Shape.WHOLE).id
                out.append(_device(node, gpu_device_name(gpu.index), sku, window, per_hour))
    return out


def _device(
    node: Node, device: str, sku: str, seconds: Decimal, per_hour: Callable[[str], Decimal]
) -> DeviceCapacity:
    return DeviceCapacity(node.name, device, capacity_sku(sku), seconds, per_hour(sku))


def capacity_sku(sku: str) -> str:
    """A SKU id without its pool: what a device is, whoever holds it."""
    return sku.rpartition("@")[0] or sku


def _clipped(r: UsageRecord, start: float, end: float) -> Decimal:
    lo, hi = max(r.start, start), min(r.end, end)
    if hi <= lo or r.end <= r.start:
        return ZERO
    if lo == r.start and hi == r.end:
        return r.quantity
    return r.quantity * Decimal(hi - lo) / Decimal(r.end - r.start)


def _name(r: UsageRecord, by: Aggregate) -> str:
    if by is Aggregate.JOB:
        return f"{r.tenant}/{r.job}"
    if by is Aggregate.TENANT:
        return r.tenant
    return f"{r.tenant}/{getattr(r, by.value) or '-'}"


def allocate(
    devices: Iterable[DeviceCapacity],
    records: Iterable[UsageRecord],
    start: float,
    end: float,
    by: Aggregate = Aggregate.TENANT,
    include_idle: bool = True,
    share_idle: bool = False,
) -> Allocation:
    """The allocation view of ``[start, end)`` (see the module docstring). Records on devices
    not in ``devices`` (a node gone since) are valued at the price of their SKU's other
    devices, and count as capacity of their own, so the identity still holds."""
    out = Allocation(start, end, by)
    price: dict[tuple[str, str], Decimal] = {}
    sku_price: dict[str, Decimal] = {}
    present: dict[tuple[str, str], Decimal] = {}
    sku_of_device: dict[tuple[str, str], str] = {}
    for d in devices:
        key = (d.node, d.device)
        csku = capacity_sku(d.sku)
        price[key] = d.per_hour
        sku_price.setdefault(csku, d.per_hour)
        present[key] = present.get(key, ZERO) + d.seconds
        sku_of_device[key] = csku
    used: dict[tuple[str, str], Decimal] = {}
    rows: dict[tuple[str, str], list[Decimal]] = {}
    spot: dict[tuple[str, str], list[Decimal]] = {}
    for r in records:
        seconds = _clipped(r, start, end)
        if seconds <= 0 or sku_of(r.sku).shape not in GPU_SHAPES:
            continue  # CPU, memory and storage are not devices of the fleet's capacity
        key = (r.node, r.device)
        csku = sku_of_device.get(key) or capacity_sku(r.sku)
        per_hour = price.get(key)
        if per_hour is None:  # a device no longer in the fleet: its own capacity
            per_hour = sku_price.get(csku, ZERO)
            price[key] = per_hour
            sku_of_device[key] = csku
        used[key] = used.get(key, ZERO) + seconds
        cost = seconds * per_hour / HOUR
        name = _name(r, by)
        if sku_of(r.sku).pool is CapacityPool.SPOT:
            acc = spot.setdefault((name, csku), [ZERO, ZERO, ZERO])
            acc[2] += r.effective_cost * (seconds / r.quantity if r.quantity else 1)
        else:
            acc = rows.setdefault((name, csku), [ZERO, ZERO])
        acc[0] += seconds
        acc[1] += cost
    for key, csku in sku_of_device.items():
        there = max(present.get(key, ZERO), used.get(key, ZERO))
        per_hour = price[key]
        idle_seconds = there - used.get(key, ZERO)
        out.capacity[csku] = out.capacity.get(csku, ZERO) + there * per_hour / HOUR
        out.idle[csku] = out.idle.get(csku, ZERO) + idle_seconds * per_hour / HOUR
        out.allocated.setdefault(csku, ZERO)
    for (name, csku), (seconds, cost) in rows.items():
        out.rows.append(AllocationRow(name, csku, seconds, cost))
        out.allocated[csku] += cost
    for (name, csku), (seconds, cost, billed) in spot.items():
        out.spot.append(SpotRow(name, csku, seconds, cost, billed))
        out.allocated[csku] += cost
    if share_idle:
        out.rows = _share(out.rows, out.idle)
    if include_idle:
        shared = {r.sku for r in out.rows if r.shared_idle} if share_idle else set()
        out.rows += [
            AllocationRow(IDLE, csku, ZERO, idle)
            for csku, idle in sorted(out.idle.items())
            if csku not in shared and idle
        ]
    out.rows.sort(key=lambda r: (r.sku, r.name))
    out.spot.sort(key=lambda r: (r.sku, r.name))
    return out


def _share(rows: list[AllocationRow], idle: dict[str, Decimal]) -> list[AllocationRow]:
    """Each SKU's idle cost spread over its rows by their allocated cost (the last row takes
    what division left, so the sum is exact)."""
    by_sku: dict[str, list[AllocationRow]] = {}
    for r in rows:
        by_sku.setdefault(r.sku, []).append(r)
    out = []
    for csku, group in by_sku.items():
        pot = idle.get(csku, ZERO)
        weight = sum((r.cost for r in group), ZERO)
        if not pot or not weight:
            out += group
            continue
        given = ZERO
        for i, r in enumerate(group):
            share = pot - given if i == len(group) - 1 else pot * r.cost / weight
            given += share
            out.append(AllocationRow(r.name, r.sku, r.seconds, r.cost, share))
    return out
