"""Admission in Kueue's semantics: quota tree, flavor assignment, preemption, fair sharing."""

from gpuaas.engine.admission.cycle import AdmissionEngine, Assignment
from gpuaas.engine.admission.nodes import NodeCapacity, NodePool
from gpuaas.engine.admission.quota import QuotaTree
from gpuaas.engine.admission.state import (
    AdmissionConfig,
    AdmittedWorkload,
    Eviction,
    Mode,
    ResourceTransformation,
)

__all__ = [
    "AdmissionConfig",
    "AdmissionEngine",
    "AdmittedWorkload",
    "Assignment",
    "Eviction",
    "Mode",
    "NodeCapacity",
    "NodePool",
    "QuotaTree",
    "ResourceTransformation",
]
