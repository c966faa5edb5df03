"""A small, realistic batch of work for the demo fleet, placed by the engine.

It shows what a GPU cloud asks of the placement engine in one screen: a training gang that
needs one NVLink domain, one that is too large for any domain (and says so), MIG and
time-sliced inference, GPU shares, and a DRA claim for two H100s on one NVLink domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuaas.engine.claims import DeviceClaims
from gpuaas.engine.gang import GangPlacement, place_workload
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import DEFAULT_POLICY, make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.node import Node, Toleration
from gpuaas.model.topology import Level
from gpuaas.model.workload import (
    DeviceClaim,
    PodRequest,
    PodSet,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuaas.supply.device_class import DeviceClass

GIB = 2**30
_GPU_TAINTS = (
    Toleration(key="nvidia.com/gpu", operator="Exists"),
    Toleration(key="nvidia.com/gpu.shared", operator="Exists"),
)
#: The DeviceClass the DRA claim asks for (compiled when the demo runs, not on import).
H100_SELECTOR = 'device.attributes["gpu.nvidia.com"].productName == "H100-80GB"'


def _pod(**fields: object) -> PodRequest:
    return PodRequest(tolerations=_GPU_TAINTS, **fields)  # type: ignore[arg-type]


def demo_workloads() -> list[Workload]:
    """The batch, in submission order."""
    nvlink = TopologyRequest(Level.NVLINK, TopologyMode.REQUIRED)
    node_of_h100 = _pod(cpu_milli=96_000, memory_bytes=1024 * GIB, gpus=8)
    mig_slice = _pod(cpu_milli=4_000, memory_bytes=32 * GIB, mig=(("1g.10gb", 1),))
    half_gpu = _pod(cpu_milli=4_000, memory_bytes=32 * GIB, gpus=1, gpu_milli=500)
    return [
        Workload(
            "llm-pretrain",
            (PodSet("workers", 4, node_of_h100, nvlink),),
        ),
        Workload(
            "llm-too-big",
            (PodSet("workers", 6, node_of_h100, nvlink),),
        ),
        Workload(
            "finetune",
            (
                PodSet(
                    "trainer",
                    2,
                    _pod(cpu_milli=16_000, memory_bytes=128 * GIB, gpus=4),
                    TopologyRequest(Level.RACK, TopologyMode.PREFERRED),
                ),
            ),
        ),
        Workload(
            "chat-inference",
            (PodSet("replicas", 6, mig_slice),),
        ),
        Workload(
            "embedding-api",
            (PodSet("replicas", 3, _pod(cpu_milli=2_000, memory_bytes=16 * GIB, replicas=1)),),
        ),
        Workload(
            "notebooks",
            (PodSet("users", 3, half_gpu),),
        ),
        Workload(
            "dra-pair",
            (
                PodSet(
                    "main",
                    1,
                    _pod(
                        cpu_milli=8_000,
                        memory_bytes=64 * GIB,
                        claims=(
                            DeviceClaim(
                                "pair",
                                "h100",
                                count=2,
                                match_attributes=("gpu.nvidia.com/nvlinkDomain",),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ]


@dataclass(frozen=True, slots=True)
class DemoDecision:
    workload: Workload
    result: GangPlacement | Unschedulable


def schedule_demo(nodes: Sequence[Node], policy_name: str = DEFAULT_POLICY) -> list[DemoDecision]:
    """Place the demo batch one workload at a time, as an admission cycle would."""
    snapshot = Snapshot.from_nodes(list(nodes))
    policy = make_policy(policy_name)
    claims = DeviceClaims.build(list(nodes), [DeviceClass("h100", (H100_SELECTOR,))])
    return [
        DemoDecision(workload, place_workload(snapshot, workload, policy, claims=claims))
        for workload in demo_workloads()
    ]
