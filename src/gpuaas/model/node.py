"""Nodes: a server's CPU, memory, GPUs, labels, taints and place in the topology."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuaas.model.devices import GPU
from gpuaas.model.network import Nic
from gpuaas.model.topology import Topology


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


#: What Kubernetes puts on a cordoned node; the engine then places nothing new there.
UNSCHEDULABLE = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration: ``operator`` is ``Equal`` or ``Exists``; empty effect matches all."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(slots=True)
class Node:
    """A GPU server. CPU in milli-cores, memory in bytes; ``extra`` holds other allocatables;
    ``nics`` the RDMA / SR-IOV NICs beside the GPUs (see :mod:`gpuaas.model.network`);
    ``dcgm_exporter`` the URL of its dcgm-exporter's metrics, if GPU telemetry is scraped
    there (docs/telemetry.md; a URL is no valid label value, hence a field)."""

    name: str
    cpu_milli: int
    memory_bytes: int
    gpus: list[GPU] = field(default_factory=list)
    topology: Topology = field(default_factory=Topology)
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    extra: dict[str, int] = field(default_factory=dict)
    nics: list[Nic] = field(default_factory=list)
    dcgm_exporter: str = ""

    @property
    def gpu_model(self) -> str:
        """The node's GPU model (nodes are homogeneous in practice); empty when it has none."""
        return self.gpus[0].model if self.gpus else ""


@dataclass(slots=True)
class Fleet:
    """A set of nodes, e.g. one inventory file."""

    nodes: list[Node] = field(default_factory=list)
    source: str = ""

    @property
    def gpu_count(self) -> int:
        return sum(len(node.gpus) for node in self.nodes)
