"""Request and response bodies of the fleet routes (camelCase JSON)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from gpuaas.service.models.identity import CamelIn, CamelOut

_PARTITIONING = {"anyOf": [{"type": "string"}, {"type": "object"}, {"type": "null"}]}


class PartitionIn(CamelIn):
    """How every GPU of the node is offered, and per-GPU exceptions (docs/inventory.md):
    ``partitioning: whole | all-1g.10gb | {mig: {...}} | {timeSlicing: {replicas: N}} |
    {mps: {replicas: N}}``."""

    #: text or a mapping (null: whole), as the document says; which layouts the node's GPU model
    #: takes is the server's to say, naming ``partitioning`` (MIG profiles are per model:
    #: ``supply.partition.partition_gpu``)
    partitioning: Annotated[Any, WithJsonSchema(_PARTITIONING)] = "whole"
    per_gpu: list[dict[str, Any]] | None = None


class MigInstanceOut(CamelOut):
    profile: str
    start: int
    size: int


class PartitionOut(CamelOut):
    mode: str  # whole, mig, time-sliced or mps
    config: str
    replicas: int
    instances: list[MigInstanceOut]


class GpuOut(CamelOut):
    index: int
    uuid: str
    model: str
    memory_mib: int
    numa_node: int
    pcie_root: str = Field(default="", description="the PCIe switch / root it hangs off")
    partition: PartitionOut


class NicOut(CamelOut):
    """One RDMA / SR-IOV NIC and the GPUs it is aligned with (docs/networks.md)."""

    name: str
    pool: str
    link: str
    speed_gbps: int
    rdma: bool
    vfs: int
    pcie_root: str
    numa_node: int | None
    rail: str
    fabric: str
    pci_address: str
    pcie_gpus: list[int] = Field(description="GPUs under the same PCIe root")
    numa_gpus: list[int] = Field(description="GPUs that only share its NUMA node")


class TaintOut(CamelOut):
    key: str
    value: str
    effect: str


class PodOnNode(CamelOut):
    """One admitted or running pod on the node, with the devices it holds."""

    job_id: int
    tenant: str
    state: str
    pod_set: str | None
    index: int | None
    assignment: Any = None


class NodeOut(CamelOut):
    name: str
    cordoned: bool
    draining: bool
    gpu_model: str
    gpu_count: int
    allocatable: dict[str, str]
    topology: dict[str, str]
    labels: dict[str, str]
    taints: list[TaintOut]
    gpus: list[GpuOut]
    nics: list[NicOut] = Field(default_factory=list)
    spec: dict[str, Any] = Field(description="the stored inventory entry")
    allocated: list[PodOnNode] | None = Field(
        default=None, description="pods placed here (only when one node is read)"
    )
    created_at: float
    updated_at: float


class NodesApplied(CamelOut):
    """What ``PUT /v1/nodes`` did, by node name."""

    created: list[str]
    updated: list[str]
    unchanged: list[str]
