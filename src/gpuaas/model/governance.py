"""Governance vocabulary in Kueue's terms: who may use which capacity, and how much.

The objects mirror Kueue's ``kueue.x-k8s.io/v1beta2`` API (ResourceFlavor, ClusterQueue, Cohort,
LocalQueue, WorkloadPriorityClass) so that an existing Kueue configuration means the same thing
here. Amounts are canonical integers (see :mod:`gpuaas.model.resources`); a flavor-resource pair
``(flavor, resource)`` is the unit of quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from gpuaas.model.dataset import DataRequest
from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import NetworkRequest
from gpuaas.model.node import Taint, Toleration
from gpuaas.model.resources import ResourceList
from gpuaas.model.topology import Level
from gpuaas.model.workload import TopologyRequest

FlavorResource = tuple[str, str]
"""``(flavor, resource)``: the unit that quota and usage are counted in."""


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class WithinClusterQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class EvictionReason(StrEnum):
    """Kueue's preemption reasons, as written on the evicted Workload."""

    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


class FairSharingStrategy(StrEnum):
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavor. ``None`` limits mean unlimited (Kueue's nil)."""

    name: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: tuple[ResourceQuota, ...]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources that are always assigned the same flavor, tried in ``flavors`` order."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy | None = None
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A kind of capacity: the node labels it maps to and the taints its nodes carry."""

    name: str
    node_labels: dict[str, str] = field(default_factory=dict, hash=False)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    #: Kueue's ``topologyName``: the :class:`NamedTopology` whose levels a pod set admitted on
    #: this flavor may ask to share; None offers every gpuaas level.
    topology_name: str | None = None


@dataclass(frozen=True, slots=True)
class NamedTopology:
    """Kueue's ``Topology`` object: the levels of the network a flavor's nodes are grouped by,
    outermost first. ``node_labels`` are the labels as written (Kueue's ``levels[].nodeLabel``,
    e.g. ``cloud.google.com/gce-topology-block``), ``levels`` what each one is in gpuaas."""

    name: str
    node_labels: tuple[str, ...]
    levels: tuple[Level, ...]


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """A pool of quota; workloads reach it through LocalQueues."""

    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = PreemptionPolicy()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    fair_sharing_weight: Fraction | None = None
    namespace_selector: dict[str, object] | None = field(default=None, hash=False)
    explicit: frozenset[str] = field(default=frozenset(), hash=False, compare=False)
    """Spec fields the source wrote out even at their default ("preemption.withinClusterQueue"),
    so that an export reproduces the imported object unchanged."""

    @property
    def weight(self) -> Fraction:
        return Fraction(1) if self.fair_sharing_weight is None else self.fair_sharing_weight


@dataclass(frozen=True, slots=True)
class Cohort:
    """A node of the borrowing tree; it may hold quota of its own and have a parent."""

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_sharing_weight: Fraction | None = None

    @property
    def weight(self) -> Fraction:
        return Fraction(1) if self.fair_sharing_weight is None else self.fair_sharing_weight


@dataclass(frozen=True, slots=True)
class LocalQueue:
    """A tenant's entry point in a namespace, pointing at one ClusterQueue."""

    name: str
    namespace: str
    cluster_queue: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class WorkloadPriorityClass:
    name: str
    value: int
    description: str = ""


@dataclass(frozen=True, slots=True)
class ResourceRange:
    """One resource a hardware profile offers, per pod: ``minimum <= default <= maximum``
    (``maximum`` None: no upper bound). Amounts are canonical integers."""

    name: str
    minimum: int
    default: int
    maximum: int | None = None


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """A catalogue entry users pick instead of writing requests (Kueue has no such object).

    ``local_queue`` is a LocalQueue name, looked up in the submitting tenant's namespace (a
    LocalQueue is namespaced, a profile serves several tenants). ``allowed_tenants`` are the
    namespaces that may use it; empty means every namespace that has that LocalQueue.
    """

    name: str
    display_name: str
    local_queue: str
    resources: tuple[ResourceRange, ...]
    allowed_tenants: tuple[str, ...] = ()
    description: str = ""

    def queue_for(self, tenant: str) -> str:
        """The ``namespace/name`` key of the LocalQueue ``tenant`` submits to."""
        return f"{tenant}/{self.local_queue}"


@dataclass(frozen=True, slots=True)
class AdmissionPodSet:
    """Admission's view of a pod set: ``count`` pods each asking for ``requests``.

    Unlike :class:`gpuaas.model.workload.PodRequest` it carries any resource name, which is what
    quota is written in (``example.com/gpu``, ``nvidia.com/mig-1g.10gb`` ...).
    """

    name: str
    count: int
    requests: ResourceList
    node_selector: dict[str, str] = field(default_factory=dict, hash=False)
    tolerations: tuple[Toleration, ...] = ()
    #: Kueue's podset topology request: all pods in one domain of a level (required/preferred).
    topology: TopologyRequest | None = None
    #: RDMA NICs / VFs per pod (charged in quota as the pool's resource where covered).
    network: NetworkRequest | None = None

    def total(self) -> ResourceList:
        return {name: amount * self.count for name, amount in self.requests.items()}


@dataclass(frozen=True, slots=True)
class AdmissionWorkload:
    """A workload as admission sees it: where it queues, how it ranks, what it needs."""

    name: str
    queue: str  # "namespace/localqueue"
    pod_sets: tuple[AdmissionPodSet, ...]
    priority: int = 0
    created: float = 0.0
    user: str | None = None
    data: DataRequest | None = None  # the dataset it reads (placement prefers it warm)


@dataclass(slots=True)
class Governance:
    """Every governance object, by name, checked for dangling references and cycles."""

    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)  # by "ns/name"
    priority_classes: dict[str, WorkloadPriorityClass] = field(default_factory=dict)
    hardware_profiles: dict[str, HardwareProfile] = field(default_factory=dict)
    topologies: dict[str, NamedTopology] = field(default_factory=dict)

    def cohort_names(self) -> set[str]:
        """Explicit Cohort objects plus cohorts that exist only because something names them."""
        names = set(self.cohorts)
        names.update(cq.cohort for cq in self.cluster_queues.values() if cq.cohort)
        names.update(c.parent for c in self.cohorts.values() if c.parent)
        return names

    def cohort(self, name: str) -> Cohort:
        return self.cohorts.get(name) or Cohort(name=name)

    def validate(self) -> None:
        """Reject what Kueue would reject: unknown flavors, bad quotas, cycles, dangling queues."""
        for flavor in self.flavors.values():
            if flavor.topology_name is not None and flavor.topology_name not in self.topologies:
                raise InvalidValue(
                    f"ResourceFlavor {flavor.name}: spec.topologyName",
                    f"Topology {flavor.topology_name!r} does not exist" + _known(self.topologies),
                )
        for cq in self.cluster_queues.values():
            _validate_groups(f"ClusterQueue {cq.name}", cq.resource_groups, self.flavors, True)
            if cq.fair_sharing_weight is not None and cq.fair_sharing_weight < 0:
                raise InvalidValue(
                    f"ClusterQueue {cq.name}: spec.fairSharing.weight", "must not be negative"
                )
            bwc = cq.preemption.borrow_within_cohort
            if (
                cq.preemption.max_priority_threshold is not None
                and bwc != BorrowWithinCohortPolicy.LOWER_PRIORITY
            ):
                raise InvalidValue(
                    f"ClusterQueue {cq.name}: spec.preemption.borrowWithinCohort",
                    "maxPriorityThreshold needs policy LowerPriority",
                )
            if cq.cohort is None:
                for group in cq.resource_groups:
                    for flavor in group.flavors:
                        for quota in flavor.resources:
                            if quota.borrowing_limit is not None or quota.lending_limit is not None:
                                raise InvalidValue(
                                    f"ClusterQueue {cq.name}: spec.resourceGroups flavor "
                                    f"{flavor.name} resource {quota.name}",
                                    "borrowingLimit/lendingLimit need a cohortName",
                                )
        for cohort in self.cohorts.values():
            _validate_groups(f"Cohort {cohort.name}", cohort.resource_groups, self.flavors, False)
        for cohort in self.cohorts.values():
            seen = [cohort.name]
            parent = cohort.parent
            while parent is not None:
                if parent in seen:
                    cycle = " -> ".join([*seen, parent])
                    raise InvalidValue(
                        f"Cohort {cohort.name}: spec.parentName",
                        f"cycle in the cohort tree: {cycle}",
                    )
                seen.append(parent)
                parent = self.cohorts[parent].parent if parent in self.cohorts else None
        for key, lq in self.local_queues.items():
            if lq.cluster_queue not in self.cluster_queues:
                raise InvalidValue(
                    f"LocalQueue {key}: spec.clusterQueue",
                    f"ClusterQueue {lq.cluster_queue!r} does not exist"
                    + _known(self.cluster_queues),
                )
        for profile in self.hardware_profiles.values():
            _validate_profile(profile, self.local_queues)


def _validate_profile(profile: HardwareProfile, local_queues: Mapping[str, LocalQueue]) -> None:
    """Bounds in order, resources named once, and a LocalQueue for every allowed tenant."""
    owner = f"HardwareProfile {profile.name}"
    if not profile.resources:
        raise InvalidValue(f"{owner}: spec.resources", "must list at least one resource")
    seen: set[str] = set()
    for i, r in enumerate(profile.resources):
        where = f"{owner}: spec.resources[{i}]"
        if r.name in seen:
            raise InvalidValue(f"{where}.name", f"resource {r.name} is listed twice")
        seen.add(r.name)
        if r.minimum < 0:
            raise InvalidValue(f"{where}.min", "must not be negative")
        if r.maximum is not None and r.maximum < r.minimum:
            raise InvalidValue(
                f"{where}.max", f"{r.name}: max {r.maximum} is below min {r.minimum}"
            )
        if r.default < r.minimum:
            raise InvalidValue(
                f"{where}.default", f"{r.name}: default {r.default} is below min {r.minimum}"
            )
        if r.maximum is not None and r.default > r.maximum:
            raise InvalidValue(
                f"{where}.default", f"{r.name}: default {r.default} is above max {r.maximum}"
            )
    tenants = profile.allowed_tenants
    if len(set(tenants)) != len(tenants):
        raise InvalidValue(f"{owner}: spec.allowedTenants", "a namespace is listed twice")
    same_name = sorted(k for k, lq in local_queues.items() if lq.name == profile.local_queue)
    if not tenants and not same_name:
        raise InvalidValue(
            f"{owner}: spec.localQueue",
            f"no namespace has a LocalQueue {profile.local_queue!r}" + _known(local_queues),
        )
    for tenant in tenants:
        if profile.queue_for(tenant) not in local_queues:
            raise InvalidValue(
                f"{owner}: spec.localQueue",
                f"LocalQueue {profile.queue_for(tenant)} does not exist for allowed tenant "
                f"{tenant}" + _known(local_queues),
            )


def _known(names: Mapping[str, object]) -> str:
    return f" (known: {', '.join(sorted(names))})" if names else " (none defined)"


def _validate_groups(
    owner: str,
    groups: tuple[ResourceGroup, ...],
    flavors: Mapping[str, ResourceFlavor],
    lending_within_nominal: bool,
) -> None:
    covered: set[str] = set()
    used_flavors: set[str] = set()
    for gi, group in enumerate(groups):
        where = f"{owner}: spec.resourceGroups[{gi}]"
        if not group.covered_resources:
            raise InvalidValue(f"{where}.coveredResources", "must not be empty")
        for resource in group.covered_resources:
            if resource in covered:
                raise InvalidValue(
                    f"{where}.coveredResources", f"{resource} is covered by two resource groups"
                )
            covered.add(resource)
        for fi, flavor in enumerate(group.flavors):
            fwhere = f"{where}.flavors[{fi}]"
            if flavor.name not in flavors:
                raise InvalidValue(
                    f"{fwhere}.name",
                    f"unknown ResourceFlavor {flavor.name!r}" + _known(flavors),
                )
            if flavor.name in used_flavors:
                raise InvalidValue(f"{fwhere}.name", f"flavor {flavor.name} is listed twice")
            used_flavors.add(flavor.name)
            names = [quota.name for quota in flavor.resources]
            if names != list(group.covered_resources):
                raise InvalidValue(
                    f"{fwhere}.resources",
                    f"must list exactly the covered resources {list(group.covered_resources)} "
                    f"in that order, got {names}",
                )
            for ri, quota in enumerate(flavor.resources):
                rwhere = f"{fwhere}.resources[{ri}]"
                for label, value in (
                    ("nominalQuota", quota.nominal),
                    ("borrowingLimit", quota.borrowing_limit),
                    ("lendingLimit", quota.lending_limit),
                ):
                    if value is not None and value < 0:
                        raise InvalidValue(f"{rwhere}.{label}", "must not be negative")
                if (
                    lending_within_nominal
                    and quota.lending_limit is not None
                    and quota.lending_limit > quota.nominal
                ):
                    raise InvalidValue(f"{rwhere}.lendingLimit", "must not exceed nominalQuota")
