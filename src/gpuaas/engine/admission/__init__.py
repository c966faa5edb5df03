"""Admission in Kueue's semantics: quota tree, flavor assignment, preemption, fair sharing."""

from gpuaas.engine.admission.cycle import AdmissionEngine, Assignment
from gpuaas.engine.admission.fleet_changes import (
    AddNode,
    CordonNode,
    Displaced,
    FleetChange,
    RemoveNode,
    RepartitionNode,
    fleet_diff,
)
from gpuaas.engine.admission.gpu_size import GPU_MILLI, gpu_milli, mig_milli
from gpuaas.engine.admission.nodes import (
    NodeCapacity,
    NodePlacement,
    NodePool,
    node_from_capacity,
)
from gpuaas.engine.admission.profiles import profile_requests, profile_workload
from gpuaas.engine.admission.quota import QuotaTree
from gpuaas.engine.admission.state import (
    AdmissionConfig,
    AdmittedWorkload,
    Eviction,
    Mode,
    ResourceTransformation,
)

__all__ = [
    "GPU_MILLI",
    "AddNode",
    "AdmissionConfig",
    "AdmissionEngine",
    "AdmittedWorkload",
    "Assignment",
    "CordonNode",
    "Displaced",
    "Eviction",
    "FleetChange",
    "Mode",
    "NodeCapacity",
    "NodePlacement",
    "NodePool",
    "QuotaTree",
    "RemoveNode",
    "RepartitionNode",
    "ResourceTransformation",
    "fleet_diff",
    "gpu_milli",
    "mig_milli",
    "node_from_capacity",
    "profile_requests",
    "profile_workload",
]
