"""Shared admission state: admitted workloads, assignment modes, the engine's configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from gpuaas.engine.admission.nodes import NodePlacement
from gpuaas.model.governance import (
    AdmissionWorkload,
    EvictionReason,
    FairSharingStrategy,
    FlavorResource,
)


class Mode(IntEnum):
    """How a flavor (or a whole workload) can get quota; higher is better, as in Kueue."""

    NO_FIT = 0
    PREEMPT = 1
    RECLAIM = 2
    FIT = 3


@dataclass(slots=True)
class AdmittedWorkload:
    """A workload holding quota: its flavors per pod set and resource, and what that costs."""

    workload: AdmissionWorkload
    cluster_queue: str
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: dict[FlavorResource, int]
    admitted_at: float
    sequence: int  # the order of admission (admissions at the same time tie, as in Kueue)
    placement: NodePlacement | None = None  # the reserved pods, when nodes are known
    priority: int = 0
    frs: frozenset[FlavorResource] = frozenset()
    usage_key: tuple[tuple[FlavorResource, int], ...] = ()
    victim_order: tuple[int, float, str] = (0, 0.0, "")

    def __post_init__(self) -> None:
        self.priority = self.workload.priority
        self.frs = frozenset(self.usage)
        self.usage_key = tuple(sorted(self.usage.items()))
        # Kueue's candidate order: lower priority first, then most recently admitted first; Kueue
        # keeps admission times to the second and breaks ties by UID, the name here
        self.victim_order = (self.priority, -self.admitted_at, self.workload.name)

    @property
    def name(self) -> str:
        return self.workload.name


@dataclass(frozen=True, slots=True)
class ResourceTransformation:
    """Kueue's resource transformation: quota is charged ``outputs`` per unit of the input.

    Kueue's way to charge a MIG slice or a GPU share by its size (Kueue #10108): e.g.
    ``nvidia.com/mig-1g.10gb`` -> ``{nvidia.com/gpu-memory: 10Gi, example.com/gpu-sevenths: 1}``.
    gpuaas does this without any transformation for ClusterQueues that cover
    ``gpuaas.io/gpu-milli`` (see :mod:`gpuaas.engine.admission.gpu_size`).
    ``retain`` keeps the input resource in the request as well (Kueue's ``Retain`` strategy).
    """

    outputs: dict[str, int]
    retain: bool = False

    def apply(self, amount: int) -> dict[str, int]:
        return {name: per_unit * amount for name, per_unit in self.outputs.items()}


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """What Kueue keeps in its controller configuration, plus gpuaas' additions.

    ``min_run_time``: an admitted workload cannot be preempted before it has run this long
    (KAI has it; Kueue does not). ``user_limits``: per LocalQueue ("ns/name"), the most pending
    workloads of one user that may hold quota at once (asked for in Kueue PR #963).
    ``transformations``: per input resource, what quota is charged instead.
    ``reclaim_only_contested_borrowers``: in fair-sharing preemption, take from another queue
    only while it borrows a flavor-resource the preemptor contests. Kueue keeps a queue a
    target while it borrows anything (its dominant share adds a resource up over flavors), so
    a queue can be taken below its nominal quota in the contested flavor because it borrows
    another; it then reclaims back within its nominal quota, and the two chase each other
    (``tests/engine/admission/test_preemption_loop.py``). Off by default: Kueue's rule.
    ``pods_per_cycle``: the placement work one namespace (a tenant, in the service) may cost a
    :meth:`~gpuaas.engine.admission.cycle.AdmissionEngine.run`, in pods tried (0: no bound;
    see :mod:`gpuaas.engine.admission.cycle`).
    """

    fair_sharing: bool = False
    fair_sharing_strategies: tuple[FairSharingStrategy, ...] = (
        FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
    )
    min_run_time: float = 0.0
    user_limits: dict[str, int] = field(default_factory=dict, hash=False)
    transformations: dict[str, ResourceTransformation] = field(default_factory=dict, hash=False)
    max_passes: int = 10_000
    reclaim_only_contested_borrowers: bool = False
    pods_per_cycle: int = 0


@dataclass(frozen=True, slots=True)
class Eviction:
    workload: str
    reason: EvictionReason
    preemptor: str
    #: the evicted admission's :attr:`AdmittedWorkload.sequence` (tells whether it was admitted
    #: before or within the cycle that evicted it)
    sequence: int = 0
