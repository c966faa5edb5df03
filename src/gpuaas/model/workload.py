"""Demand: what a workload asks for, pod set by pod set."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuaas.model.dataset import DataRequest
from gpuaas.model.network import NetworkRequest
from gpuaas.model.node import Toleration
from gpuaas.model.topology import Level


class TopologyMode(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """All pods of a pod set must (required) or should (preferred) share one domain of ``level``."""

    level: Level
    mode: TopologyMode = TopologyMode.REQUIRED


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """A DRA-style claim: ``count`` devices of a DeviceClass, filtered by CEL selectors.

    ``match_attributes`` names attributes (e.g. ``gpu.nvidia.com/nvlinkDomain``) that every device
    of the claim must share, as DRA's ``matchAttribute`` constraint does.
    """

    name: str
    device_class: str
    count: int = 1
    selectors: tuple[str, ...] = ()
    match_attributes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod needs on one node.

    GPU forms, at most one per pod: ``gpus`` whole GPUs; ``gpu_milli`` a share of one GPU (the
    Alibaba trace's ``gpu_milli``, with ``gpus == 1`` and ``0 < gpu_milli < 1000``); ``mig`` MIG
    instances by profile; ``replicas`` time-sliced replicas; ``claims`` DRA device claims.
    ``gpu_models`` restricts the GPU model (empty = any); ``network`` asks for RDMA NICs / VFs
    beside the GPUs.
    """

    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    replicas: int = 0
    claims: tuple[DeviceClaim, ...] = ()
    gpu_models: frozenset[str] = frozenset()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    network: NetworkRequest | None = None

    @property
    def milli_gpu(self) -> int:
        """GPU asked for, in milli-GPU (a share counts its share, whole GPUs 1000 each)."""
        if self.gpus == 1 and 0 < self.gpu_milli < 1000:
            return self.gpu_milli
        return self.gpus * 1000


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods; a gang when the workload has more than one pod in all."""

    name: str
    count: int
    pod: PodRequest
    topology: TopologyRequest | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """The unit that is admitted, placed, preempted and metered: all pod sets, all or nothing.

    ``data``: the dataset it reads, which placement prefers (or requires) warm on its nodes."""

    name: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    data: DataRequest | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def pod_count(self) -> int:
        return sum(pod_set.count for pod_set in self.pod_sets)
