"""GPUs, their partitions, and devices published like Kubernetes DRA ResourceSlices."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuaas.model.quantity import Quantity


class PartitionMode(StrEnum):
    WHOLE = "whole"
    MIG = "mig"
    TIME_SLICED = "time-sliced"
    MPS = "mps"


@dataclass(frozen=True, slots=True, order=True)
class MigInstance:
    """One GPU instance: a profile placed at a start memory slice."""

    start: int
    size: int  # memory slices occupied, from ``start``
    profile: str
    compute_slices: int

    @property
    def memory_slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True, slots=True)
class Partition:
    """How one GPU is offered: whole, cut into MIG instances, or shared by ``replicas`` clients.

    Two ways to share: time-slicing (replicas take turns on the whole GPU; each sees all its
    memory, nothing is isolated) and MPS (replicas run at once, each limited to
    ``1/replicas`` of the memory and of the SMs by the MPS control daemon). Both are advertised
    as ``replicas`` x ``nvidia.com/gpu``, so the scheduler counts them the same way: one replica
    per ``nvidia.com/gpu`` asked for.
    """

    mode: PartitionMode = PartitionMode.WHOLE
    instances: tuple[MigInstance, ...] = ()
    replicas: int = 1
    config: str = ""  # the mig-parted style name it came from, if any

    @classmethod
    def whole(cls) -> Partition:
        return cls()

    @classmethod
    def time_sliced(cls, replicas: int) -> Partition:
        return cls(mode=PartitionMode.TIME_SLICED, replicas=replicas)

    @classmethod
    def mps(cls, replicas: int) -> Partition:
        return cls(mode=PartitionMode.MPS, replicas=replicas)

    @property
    def shared(self) -> bool:
        """Offered as replicas (time-slicing or MPS): each ``nvidia.com/gpu`` is one replica."""
        return self.mode is PartitionMode.TIME_SLICED or self.mode is PartitionMode.MPS

    def describe(self) -> str:
        if self.mode is PartitionMode.MIG:
            counts: dict[str, int] = {}
            for instance in self.instances:
                counts[instance.profile] = counts.get(instance.profile, 0) + 1
            return "mig " + ",".join(f"{n}x{p}" for p, n in sorted(counts.items()))
        if self.mode is PartitionMode.TIME_SLICED:
            return f"time-sliced x{self.replicas}"
        if self.mode is PartitionMode.MPS:
            return f"mps x{self.replicas}"
        return "whole"


@dataclass(frozen=True, slots=True)
class GPU:
    """A physical GPU in a node; ``pcie_root`` names the PCIe switch / root complex it hangs
    off (empty = unknown), which NICs share for GPUDirect RDMA."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    partition: Partition = field(default_factory=Partition)
    numa_node: int = 0
    pcie_root: str = ""


@dataclass(frozen=True, slots=True)
class Device:
    """A schedulable device as a DRA ResourceSlice lists it: attributes and capacity by driver."""

    name: str
    node: str
    driver: str
    kind: str  # "gpu", "mig" or "shared"
    gpu_index: int
    attributes: dict[str, str | int | bool] = field(default_factory=dict)
    capacity: dict[str, Quantity] = field(default_factory=dict)
