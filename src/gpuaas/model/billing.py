"""What is billed, at what price, for how long: SKUs, price entries and usage records.

CONTRACT (written by the lead; the ``metering`` helper owns usage records, the price book and
rating, the ``invoicing`` helper invoices, budgets, alerts and the FOCUS export).

- A **SKU** is what a second of capacity was: a GPU model held whole, as a MIG profile, or as
  a time-slice or MPS share, from a capacity pool (on-demand, reserved, or the idle pool sold
  as spot); CPU, memory and storage are SKUs too. Its id is stable text, so a price entry,
  a usage record and an export row name the same thing the same way.
- A **price entry** prices one SKU in one book (the provider's, or a tenant-admin's internal
  chargeback book) from ``valid_from`` until ``valid_until``; once a usage record names it,
  it never changes (a new price is a new entry).
- A **usage record** is append-only: one device (or CPU/memory/storage share) of one pod of one
  job attempt, from ``start`` to ``end`` within one hour and one billing period, ``quantity``
  = seconds x fraction of the device held, priced by the entry in force at ``start``. ``key``
  is idempotent: writing the same interval twice (a restart replaying a transition) stores
  it once.

Money is :class:`~decimal.Decimal`, never float.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum


class CapacityPool(StrEnum):
    ON_DEMAND = "on-demand"
    RESERVED = "reserved"
    SPOT = "idle-pool"


class Shape(StrEnum):
    """How the capacity was held."""

    WHOLE = "whole"  # a whole GPU
    MIG = "mig"  # a MIG instance of ``profile`` (e.g. 1g.10gb)
    TIME_SLICE = "timeslice"  # one of ``profile`` replicas (e.g. "4")
    MPS = "mps"
    CPU = "cpu"  # vCPU-seconds
    MEMORY = "memory"  # GiB-seconds
    STORAGE = "storage"  # GB-seconds


#: PricingUnit of each shape, as FOCUS names units
UNIT = {
    Shape.WHOLE: "GPU-Hours",
    Shape.MIG: "GPU-Hours",
    Shape.TIME_SLICE: "GPU-Hours",
    Shape.MPS: "GPU-Hours",
    Shape.CPU: "vCPU-Hours",
    Shape.MEMORY: "GiB-Hours",
    Shape.STORAGE: "GB-Hours",
}


@dataclass(frozen=True, slots=True)
class Sku:
    """``resource``: a GPU model (``H100-80GB``) or ``cpu``/``memory``/``storage``."""

    resource: str
    shape: Shape
    pool: CapacityPool = CapacityPool.ON_DEMAND
    profile: str = ""

    @property
    def id(self) -> str:
        parts = [self.resource, self.shape.value] + ([self.profile] if self.profile else [])
        return "/".join(parts) + f"@{self.pool.value}"


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """Per unit-hour of the SKU; ``contracted`` is what the tenant pays after its discount."""

    id: int
    book: str
    sku: str
    list_per_hour: Decimal
    contracted_per_hour: Decimal
    currency: str
    valid_from: float
    valid_until: float | None = None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    key: str
    tenant: str
    user: str
    queue: str
    cluster: str
    job: int
    attempt: int
    pod: str  # "<podSet>-<index>"
    device: str  # gpu-3, gpu-3-mig-1g10gb-4, gpu-3-ts-1, or cpu/memory/storage
    node: str
    sku: str
    start: float
    end: float
    quantity: Decimal  # unit-seconds x fraction held
    price: int  # PriceEntry.id in force at start
    list_cost: Decimal
    effective_cost: Decimal
    utilization: float | None = None  # mean measured, 0..1, where telemetry had it
