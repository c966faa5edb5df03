"""Why a workload waits, was evicted, requeued or refused: a code from a closed set, plus fields.

Every decision the engine and the service take about a workload carries a :class:`Reason`: a
:class:`Code` (the closed, documented set below; ``docs/architecture.md`` has the table) and the
fields that make it specific (a resource, a flavor, amounts, a cohort, node counts). Code that
acts on a decision (a metric, a dashboard filter, an autoscaler, a budget hold) reads the code
and the fields; a person reads :meth:`Reason.render`, the sentence built from them. Rendering is
deferred until someone looks: the admission engine records thousands of reasons per cycle and
shows few of them.

A workload can wait for several causes at once (one per flavor it tried): such a reason is its
first cause with the others in :attr:`Reason.causes`; its code is the first cause's, its sentence
all of them joined by ``"; "`` (each once).

Placement codes (``GpuModel`` ... ``ExtendedResource``) are used at three depths: a placement
filter's verdict on one node (no fields: ``insufficient cpu``), a placement failure (field
``detail``: the placement engine's sentence, ``0/12 nodes fit: ...``), and an admission decision
(fields ``flavors`` and ``detail``: quota was there, the nodes were not).

Fields are plain JSON values (strings, numbers, lists, string-keyed dicts) so that a reason can be
stored and served as it is; amounts are integers in the resource's unit and are formatted with
:func:`~gpuaas.model.resources.describe_amount` only when rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from gpuaas.model.resources import describe_amount

_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})


class Code(StrEnum):
    """The closed set of reason codes (values are what the API and ``/metrics`` show)."""

    # waiting in the queue
    WAITING_FOR_ADMISSION = "WaitingForAdmission"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    STRICT_FIFO_BLOCKED = "StrictFIFOBlocked"
    USER_LIMIT = "UserLimit"
    CYCLE_BUDGET_SPENT = "CycleBudgetSpent"
    # waiting under a fleet queue policy (the simulator's fifo and backfill)
    FIFO_BLOCKED = "FIFOBlocked"
    WOULD_DELAY_HEAD = "WouldDelayHead"
    # quota
    RESOURCE_NOT_COVERED = "ResourceNotCovered"
    QUOTA_CAPACITY_EXCEEDED = "QuotaCapacityExceeded"
    UNUSED_QUOTA_SHORT = "UnusedQuotaShort"
    NO_PREEMPTION_POSSIBLE = "NoPreemptionPossible"
    PREEMPTION_WOULD_NOT_FIT = "PreemptionWouldNotFit"
    # flavors
    FLAVOR_NODES_FULL = "FlavorNodesFull"
    FLAVOR_TAINT_UNTOLERATED = "FlavorTaintUntolerated"
    FLAVOR_SELECTOR_MISMATCH = "FlavorSelectorMismatch"
    FLAVOR_TOPOLOGY_LEVEL_MISSING = "FlavorTopologyLevelMissing"
    # placement
    GPU_MODEL = "GpuModel"
    NODE_SELECTOR = "NodeSelector"
    TAINT = "Taint"
    INSUFFICIENT_CPU = "InsufficientCpu"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    INSUFFICIENT_GPU = "InsufficientGpu"
    INSUFFICIENT_MIG = "InsufficientMig"
    INSUFFICIENT_REPLICAS = "InsufficientReplicas"
    NO_CANDIDATE_NODES = "NoCandidateNodes"
    GANG_NOT_WHOLE = "GangNotWhole"
    TOPOLOGY_DOMAIN = "TopologyDomain"
    DEVICE_CLAIMS = "DeviceClaims"
    EXTENDED_RESOURCE = "ExtendedResource"
    INSUFFICIENT_NIC = "InsufficientNic"
    NIC_ALIGNMENT = "NicAlignment"
    DATASET_NOT_WARM = "DatasetNotWarm"
    # eviction by admission (the values are Kueue's preemption reasons)
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
    # eviction by the fleet strategy: a higher-priority workload needed its devices
    PRIORITY_PREEMPTION = "PriorityPreemption"
    # requeue: the workload lost its nodes outside admission
    NODE_DRAINED = "NodeDrained"
    NODE_REMOVED = "NodeRemoved"
    DEVICE_LOST = "DeviceLost"
    NODE_FAILED = "NodeFailed"
    BACKEND_LOST = "BackendLost"
    REQUEUED = "Requeued"
    # the job's life in the service
    SUBMITTED = "Submitted"
    ADMITTED = "Admitted"
    STARTED = "Started"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EXITED_WITH_ERROR = "ExitedWithError"
    BACKEND_REJECTED = "BackendRejected"
    BACKEND_UNAVAILABLE = "BackendUnavailable"
    MAX_RUN_TIME_EXCEEDED = "MaxRunTimeExceeded"
    CANCELLED = "Cancelled"
    SPEC_UNREADABLE = "SpecUnreadable"
    CANNOT_QUEUE = "CannotQueue"
    # a tenant cluster's life (engine/carving.py, service/clusters.py)
    CLUSTER_CARVED = "ClusterCarved"
    CLUSTER_READY = "ClusterReady"
    CLUSTER_UNAPPLIED = "ClusterUnapplied"
    CLUSTER_DRAINING = "ClusterDraining"
    CLUSTER_RELEASED = "ClusterReleased"
    CLUSTER_DELETING = "ClusterDeleting"
    PROVISION_FAILED = "ProvisionFailed"
    PROVISIONER_UNAVAILABLE = "ProvisionerUnavailable"
    # an inference job's replicas (engine/replica_scaling.py, service/replica_scaler.py)
    REPLICAS_SCALED_UP = "ReplicasScaledUp"
    REPLICAS_SCALED_DOWN = "ReplicasScaledDown"
    REPLICAS_AT_MAX = "ReplicasAtMax"
    REPLICAS_AT_MIN = "ReplicasAtMin"
    REPLICA_SPILLED = "ReplicaSpilled"
    REPLICAS_CLUSTERS_FULL = "ReplicasClustersFull"
    # the cluster autoscaler (engine/autoscale.py, service/autoscaler.py)
    SCALED_OUT_PENDING = "ScaledOutPending"
    SCALED_OUT_UTILIZATION = "ScaledOutUtilization"
    SCALED_OUT_TO_MIN = "ScaledOutToMin"
    SCALED_IN_UNNEEDED = "ScaledInUnneeded"
    SCALE_OUT_AT_MAX = "ScaleOutAtMax"
    SCALE_OUT_SHORT = "ScaleOutShort"
    # a node's GPU telemetry (service/dcgm_scrape.py): why it is missing or partial
    TELEMETRY_SCRAPE_FAILED = "TelemetryScrapeFailed"
    TELEMETRY_UNREADABLE = "TelemetryUnreadable"
    TELEMETRY_PARTIAL = "TelemetryPartial"
    # the idle-capacity pool (engine/idle_pool.py, service/idle_pool.py)
    POOL_REGISTERED = "PoolRegistered"
    POOL_SETTLED = "PoolSettled"
    POOL_GRACE_STARTED = "PoolGraceStarted"
    POOL_EVICTING = "PoolEvicting"
    POOL_RECLAIMED = "PoolReclaimed"
    # budgets (service/budget_watch.py): a scope's new admissions held
    BUDGET_EXHAUSTED = "BudgetExhausted"
    BUDGET_RATE_CAP = "BudgetRateCap"


#: Codes a placement failure can carry (see the module docstring for their three depths).
PLACEMENT_CODES = frozenset(
    {
        Code.GPU_MODEL,
        Code.NODE_SELECTOR,
        Code.TAINT,
        Code.INSUFFICIENT_CPU,
        Code.INSUFFICIENT_MEMORY,
        Code.INSUFFICIENT_GPU,
        Code.INSUFFICIENT_MIG,
        Code.INSUFFICIENT_REPLICAS,
        Code.NO_CANDIDATE_NODES,
        Code.GANG_NOT_WHOLE,
        Code.TOPOLOGY_DOMAIN,
        Code.DEVICE_CLAIMS,
        Code.EXTENDED_RESOURCE,
        Code.INSUFFICIENT_NIC,
        Code.NIC_ALIGNMENT,
        Code.DATASET_NOT_WARM,
    }
)
#: Codes of an eviction by admission (preemption or reclaim); field ``preemptor``.
EVICTION_CODES = frozenset(
    {
        Code.IN_CLUSTER_QUEUE,
        Code.IN_COHORT_RECLAMATION,
        Code.IN_COHORT_FAIR_SHARING,
        Code.IN_COHORT_RECLAIM_WHILE_BORROWING,
    }
)
#: Codes of a requeue: the workload lost its nodes (or its backend) outside admission.
REQUEUE_CODES = frozenset(
    {Code.NODE_DRAINED, Code.NODE_REMOVED, Code.DEVICE_LOST, Code.NODE_FAILED, Code.BACKEND_LOST}
)


class Reason(NamedTuple):
    """A code, its fields, and further causes (see the module docstring).

    A named tuple: the engine builds one for every flavor a pending workload tries, so it must
    cost little more than the tuple it replaced; it is immutable like one. ``args`` holds the
    fields: a mapping, or (on the engine's hot paths, where building a dict per flavor tried
    would cost more than the decision) a tuple of values in the order :data:`FIELDS` names
    them; :attr:`fields` reads either as a mapping. ``more`` holds the further causes, each a
    reason or, as the hot paths record them, a :data:`Cause` pair ``(code, args)`` (a tuple
    subclass costs four times a tuple to build: causes become reasons only when read, through
    :attr:`causes`). Two reasons are equal when their code, fields and causes are
    (:meth:`same`); ``==`` compares the stored form, as for any tuple.
    """

    code: Code
    args: Mapping[str, Any] | tuple[Any, ...] = _NO_FIELDS
    more: tuple[Reason | Cause, ...] = ()

    @property
    def causes(self) -> tuple[Reason, ...]:
        """The further causes, as reasons."""
        more = self.more
        if not more:
            return ()
        return tuple(c if type(c) is Reason else Reason(*c) for c in more)

    @property
    def fields(self) -> Mapping[str, Any]:
        """The fields by name."""
        args = self.args
        if type(args) is tuple:
            return dict(zip(FIELDS[self.code], args, strict=True))
        return args  # type: ignore[return-value]

    def same(self, other: Reason) -> bool:
        """Whether ``other`` has the same code, fields and causes (whatever their form)."""
        if self == other:
            return True
        return (
            self.code is other.code
            and dict(self.fields) == dict(other.fields)
            and len(self.causes) == len(other.causes)
            and all(a.same(b) for a, b in zip(self.causes, other.causes, strict=True))
        )

    def with_fields(self, **more: Any) -> Reason:
        """This reason with ``more`` fields."""
        return self._replace(args={**self.fields, **more})

    def render(self) -> str:
        """The sentence a person reads (each distinct cause once, joined by ``"; "``)."""
        text = _RENDER[self.code](self.fields)
        if not self.causes:
            return text
        seen = [text]
        for cause in self.causes:
            more = cause.render()
            if more not in seen:
                seen.append(more)
        return "; ".join(seen)

    def __str__(self) -> str:
        return self.render()

    def plus(self, *more: Reason) -> Reason:
        """This reason with ``more`` causes after its own."""
        return combine((self, *more), self)

    def to_json(self) -> dict[str, Any]:
        """``{code, message, fields}`` and, with several causes, ``causes`` (each without a
        message of its own: the message already says them all)."""
        return {"code": self.code.value, "message": self.render(), **self.detail()}

    def detail(self) -> dict[str, Any]:
        """What is stored beside the code: the fields and any further causes (each once)."""
        out: dict[str, Any] = {"fields": dict(self.fields)}
        causes: list[dict[str, Any]] = []
        for cause in self.causes:
            shown = {"code": cause.code.value, "fields": dict(cause.fields)}
            if shown not in causes and shown != {"code": self.code.value, **out}:
                causes.append(shown)
        if causes:
            out["causes"] = causes
        return out

    @classmethod
    def stored(cls, code: str | None, detail: Mapping[str, Any] | None) -> Reason | None:
        """The reason stored as ``code`` and :meth:`detail`; None when nothing (or a code this
        version does not know) is stored."""
        if not code or code not in _CODES:
            return None
        detail = detail or {}
        causes = tuple(
            cls(Code(c["code"]), c.get("fields") or {})
            for c in detail.get("causes") or ()
            if c.get("code") in _CODES
        )
        return cls(Code(code), detail.get("fields") or {}, causes)


_CODES = frozenset(c.value for c in Code)


#: A cause as the engine's hot paths record it: a code and its fields by position.
Cause = tuple[Code, tuple[Any, ...]]


def combine(parts: Sequence[Reason | Cause], default: Reason) -> Reason:
    """One reason for several causes, in order; ``default`` when there are none. Repeats are
    kept (comparing costs more than the rare repeat): :meth:`Reason.render` and
    :meth:`Reason.detail` say each cause once."""
    if not parts:
        return default
    first = parts[0]
    if type(first) is not Reason:
        first = Reason(*first)
    if len(parts) == 1:
        return first
    more = list(first.more)
    for part in parts[1:]:
        if type(part) is Reason and part.more:
            more.append(Reason(part.code, part.args))
            more.extend(part.more)
        else:
            more.append(part)
    return Reason(first.code, first.args, tuple(more))


def reason(code: Code, **fields: Any) -> Reason:
    """A reason with named fields (for code that is not on a hot path)."""
    return Reason(code, fields)


# --- the sentences ------------------------------------------------------------------------


def _amount(f: Mapping[str, Any], key: str) -> str:
    return describe_amount(f["resource"], int(f[key]))


def _unused(f: Mapping[str, Any]) -> str:
    text = (
        f"insufficient unused quota for {f['resource']} in flavor {f['flavor']}: "
        f"{_amount(f, 'needed')} more needed"
    )
    if f.get("cohort") is not None and f.get("lend") is not None:
        text += f"; cohort {f['cohort']} has {_amount(f, 'lend')} to lend"
    return text


def flavor_text(flavors: Mapping[str, Mapping[str, str]]) -> str:
    """``pod set: resource=flavor, ...`` per pod set, for reasons."""
    return ", ".join(
        f"{ps}: {', '.join(f'{r}={f}' for r, f in sorted(rs.items()))}"
        for ps, rs in flavors.items()
    )


def _placement(words: Callable[[Mapping[str, Any]], str]) -> Callable[[Mapping[str, Any]], str]:
    """A placement code's sentence at its three depths (see the module docstring)."""

    def render(f: Mapping[str, Any]) -> str:
        if "detail" not in f:
            return words(f)
        if "flavors" in f:
            return (
                "quota is available but the pods do not fit on the nodes of the assigned "
                f"flavors ({flavor_text(f['flavors'])}): {f['detail']}"
            )
        return str(f["detail"])

    return render


def _evicted(f: Mapping[str, Any], code: str) -> str:
    if "preemptor_job" in f:  # as the service stores it: the preemptor is a job id
        text = f"preempted ({code})"
        return f"{text} to admit job {f['preemptor_job']}" if f["preemptor_job"] else text
    if f.get("preemptor"):
        return f"evicted ({code}) to admit {f['preemptor']}"
    return f"evicted ({code})"


def _gpu_words(f: Mapping[str, Any]) -> str:
    return "insufficient GPU"


def _mig_words(f: Mapping[str, Any]) -> str:
    return "insufficient MIG instances " + ",".join(
        f"{n}x{p}" for p, n in f.get("instances", {}).items()
    )


def _capped(f: Mapping[str, Any]) -> str:
    """An autoscaler's scale-out held to the pool's max: what was wanted."""
    wanted = f.get("wanted")
    if wanted is None or wanted <= f["count"]:
        return ""
    return f" ({wanted} wanted, held to the pool's max of {f['max']})"


def _lost(f: Mapping[str, Any]) -> str:
    return f"its devices are no longer available: {f['detail']}"


def _utilisation(f: Mapping[str, Any]) -> str:
    """``GPU utilisation 92% against a target of 50%`` (or that none was measured)."""
    target = f"a target of {float(f['target']):g}%"
    if f.get("utilization") is None:
        return f"no GPU utilisation measured (against {target})"
    return f"GPU utilisation {float(f['utilization']):.0f}% against {target}"


def _scaled(way: str, f: Mapping[str, Any]) -> str:
    text = f"scaled {way} from {f['current']} to {f['desired']} replicas"
    if f["desired"] == 0:  # its replicas stop with the job
        return f"{text}: the job ended"
    if f.get("utilization") is None:  # to the bounds, not on a measurement
        return f"{text} (minReplicas / maxReplicas)"
    return f"{text}: {_utilisation(f)}"


def _cluster(name: str | None) -> str:
    return f"cluster {name}" if name else "the shared pool"


_RENDER: dict[Code, Callable[[Mapping[str, Any]], str]] = {
    Code.WAITING_FOR_ADMISSION: lambda f: "waiting for admission",
    Code.WAITING_FOR_QUOTA: lambda f: "waiting for quota",
    Code.STRICT_FIFO_BLOCKED: lambda f: (
        f"StrictFIFO: waiting behind {f['head']} in ClusterQueue {f['cluster_queue']}"
    ),
    Code.USER_LIMIT: lambda f: (
        f"user {f['user']} already has {f['limit']} admitted workloads in LocalQueue "
        f"{f['queue']} (limit {f['limit']})"
    ),
    Code.CYCLE_BUDGET_SPENT: lambda f: (
        f"deferred to the next admission cycle: namespace {f['namespace']} has had "
        f"{f['pods']:,} pods tried in this one (budget {f['pods_budget']:,} per cycle)"
    ),
    Code.FIFO_BLOCKED: lambda f: "waiting behind the head of the queue (FIFO)",
    Code.WOULD_DELAY_HEAD: lambda f: "would delay the reserved head of the queue (backfill)",
    Code.RESOURCE_NOT_COVERED: lambda f: (
        f"resource {f['resource']} unavailable in ClusterQueue {f['cluster_queue']}"
    ),
    Code.QUOTA_CAPACITY_EXCEEDED: lambda f: (
        f"insufficient quota for {f['resource']} in flavor {f['flavor']}: "
        f"{_amount(f, 'requested')} requested > {_amount(f, 'capacity')} maximum capacity of "
        f"ClusterQueue {f['cluster_queue']}"
    ),
    Code.UNUSED_QUOTA_SHORT: _unused,
    Code.NO_PREEMPTION_POSSIBLE: lambda f: "no admitted workload may be preempted for it",
    Code.PREEMPTION_WOULD_NOT_FIT: lambda f: (
        "preempting would free quota but the pods would not fit on the nodes"
    ),
    Code.FLAVOR_NODES_FULL: lambda f: (
        f"pods of pod set {f['pod_set']} do not fit on the nodes of flavor {f['flavor']}"
    ),
    Code.FLAVOR_TAINT_UNTOLERATED: lambda f: f"untolerated taint in flavor {f['flavor']}",
    Code.FLAVOR_SELECTOR_MISMATCH: lambda f: (
        f"flavor {f['flavor']} does not match the nodeSelector of pod set {f['pod_set']}"
    ),
    Code.FLAVOR_TOPOLOGY_LEVEL_MISSING: lambda f: (
        f"flavor {f['flavor']}'s Topology {f['topology']} has no level {f['level']} "
        f"(pod set {f['pod_set']})"
    ),
    Code.GPU_MODEL: _placement(
        lambda f: "gpu model not in {" + ",".join(sorted(f.get("models", ()))) + "}"
    ),
    Code.NODE_SELECTOR: _placement(
        lambda f: "node selector " + ",".join(f"{k}={v}" for k, v in f.get("selector", {}).items())
    ),
    Code.TAINT: _placement(lambda f: "untolerated taint"),
    Code.INSUFFICIENT_CPU: _placement(lambda f: "insufficient cpu"),
    Code.INSUFFICIENT_MEMORY: _placement(lambda f: "insufficient memory"),
    Code.INSUFFICIENT_GPU: _placement(_gpu_words),
    Code.INSUFFICIENT_MIG: _placement(_mig_words),
    Code.INSUFFICIENT_REPLICAS: _placement(lambda f: "insufficient time-sliced replicas"),
    Code.NO_CANDIDATE_NODES: _placement(lambda f: f"0/{f.get('nodes', 0)} nodes fit"),
    Code.GANG_NOT_WHOLE: _placement(
        lambda f: f"pod set {f.get('pod_set', '')} cannot be placed whole"
    ),
    Code.TOPOLOGY_DOMAIN: _placement(
        lambda f: f"pod set {f.get('pod_set', '')} fits in no topology domain"
    ),
    Code.DEVICE_CLAIMS: _placement(lambda f: "device claims cannot be satisfied"),
    Code.EXTENDED_RESOURCE: _placement(
        lambda f: f"node {f['node']} has {f['free']} {f['resource']} free, {f['needed']} needed"
    ),
    Code.INSUFFICIENT_NIC: _placement(
        lambda f: "insufficient free NIC VFs" + (f" of pool {f['pool']}" if f.get("pool") else "")
    ),
    Code.NIC_ALIGNMENT: _placement(
        lambda f: (
            "no free NIC VFs"
            + (f" of pool {f['pool']}" if f.get("pool") else "")
            + " aligned with the GPUs (same PCIe root or NUMA node), as the job requires"
        )
    ),
    Code.DATASET_NOT_WARM: _placement(
        lambda f: (
            f"dataset {f['dataset']} is required warm and no warm node fits "
            f"({f['warm']} warm node{'' if f['warm'] == 1 else 's'})"
        )
    ),
    Code.IN_CLUSTER_QUEUE: lambda f: _evicted(f, "InClusterQueue"),
    Code.IN_COHORT_RECLAMATION: lambda f: _evicted(f, "InCohortReclamation"),
    Code.IN_COHORT_FAIR_SHARING: lambda f: _evicted(f, "InCohortFairSharing"),
    Code.IN_COHORT_RECLAIM_WHILE_BORROWING: lambda f: _evicted(f, "InCohortReclaimWhileBorrowing"),
    Code.PRIORITY_PREEMPTION: lambda f: f"preempted by {f['preemptor']}",
    Code.NODE_DRAINED: lambda f: f"node {', '.join(f['nodes'])} is draining",
    Code.NODE_REMOVED: _lost,
    Code.DEVICE_LOST: _lost,
    Code.NODE_FAILED: lambda f: str(f["detail"]),
    Code.BACKEND_LOST: lambda f: f"the {f['backend']} backend lost it: {f['detail']}",
    Code.REQUEUED: lambda f: "requeued",
    Code.SUBMITTED: lambda f: "submitted",
    Code.ADMITTED: lambda f: (
        f"admitted by ClusterQueue {f['cluster_queue']} on flavor "
        f"{', '.join(f['flavors']) or 'no flavor'}"
        + (f"; nodes {', '.join(f['nodes'])}" if f.get("nodes") else "")
    ),
    Code.STARTED: lambda f: f"started on the {f['backend']} backend",
    Code.SUCCEEDED: lambda f: str(f.get("detail") or "succeeded"),
    Code.FAILED: lambda f: str(f.get("detail") or "failed"),
    Code.EXITED_WITH_ERROR: lambda f: (
        f"exited with code {f['exit_code']} on the {f['backend']} backend"
        + (f": {f['detail']}" if f.get("detail") else "")
    ),
    Code.BACKEND_REJECTED: lambda f: f"the {f['backend']} backend cannot run it: {f['detail']}",
    Code.BACKEND_UNAVAILABLE: lambda f: (
        f"admitted; waiting for the {f['backend']} backend, which cannot be reached: {f['detail']}"
    ),
    Code.MAX_RUN_TIME_EXCEEDED: lambda f: f"exceeded its maxRunTime of {f['limit']:g}s",
    Code.CANCELLED: lambda f: "cancelled by the user",
    Code.SPEC_UNREADABLE: lambda f: "its spec is unreadable",
    Code.CANNOT_QUEUE: lambda f: f"cannot queue: {f['detail']}",
    Code.CLUSTER_CARVED: lambda f: f"carved node {', '.join(f['nodes'])}; provisioning",
    Code.CLUSTER_READY: lambda f: f"ready on {len(f['nodes'])} node(s)",
    Code.CLUSTER_UNAPPLIED: lambda f: (
        f"carved {len(f['nodes'])} node(s); no {f['provisioner']} management cluster is "
        "configured, so nothing was applied: apply the objects of `gpuaas clusters manifest "
        f"{f['cluster']}` yourself (or set GPUAAS_CAPI_KUBECONFIG)"
    ),
    Code.CLUSTER_DRAINING: lambda f: f"draining node {', '.join(f['nodes'])} before giving it back",
    Code.CLUSTER_RELEASED: lambda f: f"gave back node {', '.join(f['nodes'])}",
    Code.CLUSTER_DELETING: lambda f: "deleting" + (" (forced)" if f.get("force") else ""),
    Code.PROVISION_FAILED: lambda f: f"the {f['provisioner']} provisioner refused: {f['detail']}",
    Code.PROVISIONER_UNAVAILABLE: lambda f: (
        f"waiting for the {f['provisioner']} provisioner, which cannot be reached: {f['detail']}"
    ),
    # an inference job's replicas
    Code.REPLICAS_SCALED_UP: lambda f: _scaled("up", f),
    Code.REPLICAS_SCALED_DOWN: lambda f: _scaled("down", f),
    Code.REPLICAS_AT_MAX: lambda f: (
        f"at maxReplicas {f['limit']}: {_utilisation(f)} asks for {f['wanted']}"
    ),
    Code.REPLICAS_AT_MIN: lambda f: f"at minReplicas {f['limit']}: {_utilisation(f)}",
    Code.REPLICA_SPILLED: lambda f: (
        f"replica job {f['job']} spilled from {_cluster(f['from_cluster'])} ({f['cause']}) "
        f"to {_cluster(f['to_cluster'])}"
    ),
    Code.REPLICAS_CLUSTERS_FULL: lambda f: (
        f"wants {f['desired']} replicas, has {f['current']}: every cluster it may use is full ("
        + ", ".join(_cluster(c) for c in f["clusters"])
        + ")"
    ),
    # the cluster autoscaler
    Code.SCALED_OUT_PENDING: lambda f: (
        f"pool {f['pool']}: adding {f['count']} node(s) for {len(f['jobs'])} waiting job(s)"
        + _capped(f)
    ),
    Code.SCALED_OUT_UTILIZATION: lambda f: (
        f"pool {f['pool']}: adding {f['count']} node(s), {_utilisation(f)}" + _capped(f)
    ),
    Code.SCALED_OUT_TO_MIN: lambda f: (
        f"pool {f['pool']}: adding {f['count']} node(s) to reach its min of {f['min']}"
    ),
    Code.SCALED_IN_UNNEEDED: lambda f: (
        f"pool {f['pool']}: releasing node {', '.join(f['nodes'])}, unneeded (allocated and "
        f"utilised below {f['below']:g}%) for {f['seconds']:g}s or more"
    ),
    Code.SCALE_OUT_AT_MAX: lambda f: (
        f"pool {f['pool']} is at its max of {f['max']} node(s); {f['wanted']} more wanted "
        f"({f['cause']})"
    ),
    Code.SCALE_OUT_SHORT: lambda f: (
        f"pool {f['pool']}: {f['missing']} node(s) short of the scale-out: {f['detail']}"
    ),
    Code.TELEMETRY_SCRAPE_FAILED: lambda f: (
        f"dcgm-exporter at {f['url']} could not be scraped: {f['detail']}"
    ),
    Code.TELEMETRY_UNREADABLE: lambda f: (
        f"dcgm-exporter at {f['url']} answered with text that is not Prometheus metrics: "
        f"{f['detail']}"
    ),
    Code.TELEMETRY_PARTIAL: lambda f: (
        "dcgm-exporter reports "
        + (
            "; ".join(
                part
                for part in (
                    f"rows matching no device: {', '.join(f['unmatched'])}"
                    if f["unmatched"]
                    else "",
                    f"nothing usable for {', '.join(f['unreported'])}" if f["unreported"] else "",
                )
                if part
            )
            or "every device"
        )
    ),
    # the idle-capacity pool
    Code.POOL_REGISTERED: lambda f: (
        "registered as the idle-capacity pool"
        + (f" of marketplace {f['marketplace']}" if f.get("marketplace") else "")
    ),
    Code.POOL_SETTLED: lambda f: f"took idle node {', '.join(f['nodes'])} into the pool",
    Code.POOL_GRACE_STARTED: lambda f: (
        f"reclaiming node {', '.join(f['nodes'])} for tenants: "
        + (
            f"pool job {', '.join(map(str, f['jobs']))} signalled to checkpoint, "
            f"evicted after {f['grace']:g}s"
            if f["jobs"]
            else "no pool job on it"
        )
    ),
    Code.POOL_EVICTING: lambda f: (
        f"grace period over on node {', '.join(f['nodes'])}: evicting pool job "
        f"{', '.join(map(str, f['jobs'])) or 'none'}"
    ),
    Code.POOL_RECLAIMED: lambda f: (
        f"gave node {f['node']} back to tenants {f['seconds']:.1f}s after it was asked for"
    ),
    Code.BUDGET_EXHAUSTED: lambda f: (
        f"held by budget {f['budget']}: {f['scope']} has spent {f['spent']} of its "
        f"{f['amount']} {f['currency']} for {f['period']}; new work waits for the next period "
        "or a larger budget"
    ),
    Code.BUDGET_RATE_CAP: lambda f: (
        f"held by budget {f['budget']}: user {f['user']} runs work costing {f['rate']} "
        f"{f['currency']}/h; this job would take it past the cap of {f['cap']} {f['currency']}/h"
    ),
}

#: The fields each code's sentence reads (a placement code's ``detail``/``flavors`` forms and
#: the optional fields are described in ``docs/architecture.md``).
FIELDS: dict[Code, tuple[str, ...]] = {
    Code.WAITING_FOR_ADMISSION: (),
    Code.WAITING_FOR_QUOTA: (),
    Code.STRICT_FIFO_BLOCKED: ("head", "cluster_queue"),
    Code.USER_LIMIT: ("user", "queue", "limit"),
    Code.CYCLE_BUDGET_SPENT: ("namespace", "pods", "pods_budget"),
    Code.FIFO_BLOCKED: (),
    Code.WOULD_DELAY_HEAD: (),
    Code.RESOURCE_NOT_COVERED: ("resource", "cluster_queue"),
    Code.QUOTA_CAPACITY_EXCEEDED: ("cluster_queue", "flavor", "resource", "requested", "capacity"),
    Code.UNUSED_QUOTA_SHORT: ("flavor", "resource", "needed", "cohort", "lend"),
    Code.NO_PREEMPTION_POSSIBLE: (),
    Code.PREEMPTION_WOULD_NOT_FIT: (),
    Code.FLAVOR_NODES_FULL: ("pod_set", "flavor"),
    Code.FLAVOR_TAINT_UNTOLERATED: ("flavor",),
    Code.FLAVOR_SELECTOR_MISMATCH: ("flavor", "pod_set"),
    Code.FLAVOR_TOPOLOGY_LEVEL_MISSING: ("flavor", "topology", "level", "pod_set"),
    Code.GPU_MODEL: ("models",),
    Code.NODE_SELECTOR: ("selector",),
    Code.TAINT: (),
    Code.INSUFFICIENT_CPU: (),
    Code.INSUFFICIENT_MEMORY: (),
    Code.INSUFFICIENT_GPU: (),
    Code.INSUFFICIENT_MIG: ("instances",),
    Code.INSUFFICIENT_REPLICAS: (),
    Code.NO_CANDIDATE_NODES: ("nodes",),
    Code.GANG_NOT_WHOLE: ("pod_set",),
    Code.TOPOLOGY_DOMAIN: ("pod_set",),
    Code.DEVICE_CLAIMS: (),
    Code.EXTENDED_RESOURCE: ("node", "resource", "free", "needed"),
    Code.INSUFFICIENT_NIC: (),
    Code.NIC_ALIGNMENT: (),
    Code.DATASET_NOT_WARM: ("dataset", "warm"),
    Code.IN_CLUSTER_QUEUE: ("preemptor",),
    Code.IN_COHORT_RECLAMATION: ("preemptor",),
    Code.IN_COHORT_FAIR_SHARING: ("preemptor",),
    Code.IN_COHORT_RECLAIM_WHILE_BORROWING: ("preemptor",),
    Code.PRIORITY_PREEMPTION: ("preemptor",),
    Code.NODE_DRAINED: ("nodes",),
    Code.NODE_REMOVED: ("detail",),
    Code.DEVICE_LOST: ("detail",),
    Code.NODE_FAILED: ("detail",),
    Code.BACKEND_LOST: ("backend", "detail"),
    Code.REQUEUED: ("cause",),
    Code.SUBMITTED: (),
    Code.ADMITTED: ("cluster_queue", "flavors", "nodes"),
    Code.STARTED: ("backend",),
    Code.SUCCEEDED: ("detail",),
    Code.FAILED: ("detail",),
    Code.EXITED_WITH_ERROR: ("backend", "exit_code", "detail"),
    Code.BACKEND_REJECTED: ("backend", "detail"),
    Code.BACKEND_UNAVAILABLE: ("backend", "detail"),
    Code.MAX_RUN_TIME_EXCEEDED: ("limit",),
    Code.CANCELLED: (),
    Code.SPEC_UNREADABLE: (),
    Code.CANNOT_QUEUE: ("detail",),
    Code.CLUSTER_CARVED: ("nodes",),
    Code.CLUSTER_READY: ("nodes",),
    Code.CLUSTER_UNAPPLIED: ("nodes", "provisioner", "cluster"),
    Code.CLUSTER_DRAINING: ("nodes",),
    Code.CLUSTER_RELEASED: ("nodes",),
    Code.CLUSTER_DELETING: ("force",),
    Code.PROVISION_FAILED: ("provisioner", "detail"),
    Code.PROVISIONER_UNAVAILABLE: ("provisioner", "detail"),
    Code.REPLICAS_SCALED_UP: ("current", "desired", "utilization", "target"),
    Code.REPLICAS_SCALED_DOWN: ("current", "desired", "utilization", "target"),
    Code.REPLICAS_AT_MAX: ("limit", "wanted", "utilization", "target"),
    Code.REPLICAS_AT_MIN: ("limit", "utilization", "target"),
    Code.REPLICA_SPILLED: ("job", "from_cluster", "to_cluster", "cause"),
    Code.REPLICAS_CLUSTERS_FULL: ("desired", "current", "clusters"),
    # the cluster autoscaler
    Code.SCALED_OUT_PENDING: ("pool", "count", "jobs", "wanted", "max"),
    Code.SCALED_OUT_UTILIZATION: ("pool", "count", "utilization", "target", "wanted", "max"),
    Code.SCALED_OUT_TO_MIN: ("pool", "count", "min"),
    Code.SCALED_IN_UNNEEDED: ("pool", "nodes", "below", "seconds"),
    Code.SCALE_OUT_AT_MAX: ("pool", "max", "wanted", "cause"),
    Code.SCALE_OUT_SHORT: ("pool", "missing", "detail"),
    Code.TELEMETRY_SCRAPE_FAILED: ("url", "detail"),
    Code.TELEMETRY_UNREADABLE: ("url", "detail"),
    Code.TELEMETRY_PARTIAL: ("unmatched", "unreported"),
    Code.POOL_REGISTERED: ("marketplace",),
    Code.POOL_SETTLED: ("nodes",),
    Code.POOL_GRACE_STARTED: ("nodes", "jobs", "grace"),
    Code.POOL_EVICTING: ("nodes", "jobs"),
    Code.POOL_RECLAIMED: ("node", "seconds"),
    Code.BUDGET_EXHAUSTED: ("budget", "scope", "amount", "spent", "currency", "period"),
    Code.BUDGET_RATE_CAP: ("budget", "user", "rate", "cap", "currency"),
}


# --- the common ones, built where they happen ------------------------------------------------

WAITING_FOR_ADMISSION = Reason(Code.WAITING_FOR_ADMISSION)
WAITING_FOR_QUOTA = Reason(Code.WAITING_FOR_QUOTA)
NO_PREEMPTION_POSSIBLE = Reason(Code.NO_PREEMPTION_POSSIBLE)
PREEMPTION_WOULD_NOT_FIT = Reason(Code.PREEMPTION_WOULD_NOT_FIT)
FIFO_BLOCKED = Reason(Code.FIFO_BLOCKED)
WOULD_DELAY_HEAD = Reason(Code.WOULD_DELAY_HEAD)
CANCELLED = Reason(Code.CANCELLED)
SPEC_UNREADABLE = Reason(Code.SPEC_UNREADABLE)


def quota_capacity_exceeded(
    cluster_queue: str, flavor: str, resource: str, requested: int, capacity: int
) -> Reason:
    return Reason(
        Code.QUOTA_CAPACITY_EXCEEDED, (cluster_queue, flavor, resource, requested, capacity)
    )


def unused_quota_short(
    cohort: str | None, flavor: str, resource: str, needed: int, lend: int | None
) -> Reason:
    """``needed`` more than is unused; ``lend``: what the ``cohort`` could lend (None without
    a cohort)."""
    return Reason(Code.UNUSED_QUOTA_SHORT, (flavor, resource, needed, cohort, lend))


def evicted(code: Code, preemptor: str = "") -> Reason:
    """Evicted by admission for ``code`` (one of :data:`EVICTION_CODES`) to admit ``preemptor``."""
    if code not in EVICTION_CODES:
        raise ValueError(f"{code} is not an eviction code")
    return Reason(code, {"preemptor": preemptor} if preemptor else _NO_FIELDS)


def placement_failed(unschedulable_code: Code, detail: str, **fields: Any) -> Reason:
    """A placement failure (its code, the placement engine's sentence, and the numbers)."""
    return Reason(unschedulable_code, {**fields, "detail": detail})


def node_failed(detail: str) -> Reason:
    """A workload lost its node (the node failed or left) and is queued again."""
    return Reason(Code.NODE_FAILED, {"detail": detail})
