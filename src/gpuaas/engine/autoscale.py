"""The cluster autoscaler's planner: from what each cluster holds, runs, measures and waits
for, which node pools to grow and which nodes to let go. Pure: the service loop and the
simulator build the views, call :func:`plan` and carry out its decisions.

Semantics, per pool of each autoscaled cluster, at most one decision per pool per cycle:

- **Size.** A pool's *size* is every node it holds, ready or not (``PoolView.nodes``), plus
  the nodes of it still being drained out (``PoolView.leaving``). The size never goes above
  ``max_count``, the hard limit: a scale-out is held to ``max_count - size`` and one with no
  room left is a ``ScaleOutAtMax`` decision that adds nothing. A scale-in never takes the
  ready-or-not nodes below ``min_count``; a pool below its min grows to it (``ScaledOutToMin``).
- **Capacity is what is ready.** A node not ``ready`` (provisioning: its GPUs are not yet
  allocatable) is no capacity for utilisation and never a scale-in candidate, but it counts
  toward max, and pending work is assumed to land on it when it comes up (as
  cluster-autoscaler's *upcoming* nodes): one waiting job does not scale a pool twice while
  its first node provisions.
- **Scale out on pending demand.** Only workloads whose structured reason (its code or one of
  its causes) is a capacity reason (:data:`CAPACITY_CODES`: the pods do not fit the nodes;
  never a quota, budget or FIFO hold) ask for nodes, and only when every pod of the workload
  fits an empty template node of the pool by the engine's one fit rule (static filters and
  :func:`~gpuaas.engine.fit.fit_mask`, through
  :func:`~gpuaas.engine.framework.feasible_nodes`). A workload goes to the first pool (by
  name) whose template fits it. The pods of the pool's workloads, oldest workload first, are
  bin-packed first-fit (largest pod first within a workload) onto the not-ready nodes and then
  onto as many new template nodes as they need; that count of new nodes is the scale-out.
  Topology requirements and DRA claims are not modelled on templates (a scale-out may be one
  node short for a gang that needs one domain; the next cycle sees it still waiting).
- **Scale out on sustained utilisation.** When the mean of the ready nodes' measured window
  means (known telemetry only; a pool with none known is not judged) is above
  ``target_percent``, the pool grows to ``ceil(ready * mean / target)`` nodes (the HPA rule),
  unless nodes are still provisioning or a scale-out or scale-in happened within
  ``cooldown_seconds``. Pending demand and the min win when they ask for more.
- **Scale in unneeded nodes.** A ready node is a candidate when it has been unneeded since
  ``unneeded_since`` for at least ``unneeded_seconds`` *and*, now, both its allocation and its
  measured utilisation are below ``scale_in_below_percent`` (hysteresis: below the target, so
  a pool is never scaled in and out on the same reading). Unknown telemetry is never idle: a
  node with no known window is not a candidate. Candidates go cheapest to drain first
  (``drain_cost``, then unneeded longest, then name); they are taken while the pool's ready
  nodes that remain would carry its allocation and measured utilisation at or below the
  target (what is drained must fit where it goes, and must not trigger a scale-out), at most
  ``disruption_budget`` minus the nodes already draining in the cluster, never within
  ``cooldown_seconds`` of the cluster's last scale-out, and never in a pool that is scaling
  out or has pending demand. GPU allocation is what counts: a node holding only CPU pods has
  ``allocated == 0``; its pods are drained (requeued) with it and only raise its drain cost,
  so CPU pods never pin a GPU node.
- **Deterministic**: clusters by key, pools by name; the same views give the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape, default_assignment, feasible_nodes
from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary
from gpuaas.model.workload import PodRequest, Workload

#: Reasons that say a workload waits for room on nodes (what a new node could give), as
#: opposed to quota, budget, FIFO or admission holds, which no node changes.
CAPACITY_CODES = frozenset(
    {
        Code.INSUFFICIENT_CPU,
        Code.INSUFFICIENT_MEMORY,
        Code.INSUFFICIENT_GPU,
        Code.INSUFFICIENT_MIG,
        Code.INSUFFICIENT_REPLICAS,
        Code.INSUFFICIENT_NIC,
        Code.NO_CANDIDATE_NODES,
        Code.GANG_NOT_WHOLE,
        Code.TOPOLOGY_DOMAIN,
        Code.FLAVOR_NODES_FULL,
        Code.PREEMPTION_WOULD_NOT_FIT,
    }
)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node a cluster holds. ``allocated``: the fraction of its GPUs admitted work holds
    (0..1); ``util``: measured over the window (None or not ``known``: no telemetry, which
    never counts as idle); ``unneeded_since``: since when it has been both unallocated and
    below the scale-in threshold (None: needed now); ``drain_cost``: what draining it would
    disturb (0 when empty; the service weighs jobs by priority and time run); ``ready``:
    its GPUs are allocatable (a node still provisioning is not capacity)."""

    name: str
    pool: str
    allocated: float
    util: UtilSummary | None
    unneeded_since: float | None
    drain_cost: float = 0.0
    ready: bool = True


@dataclass(frozen=True, slots=True)
class PoolView:
    """A node pool of the cluster: its bounds (``max_count`` is the hard limit), a template
    node (what a new node of this pool looks like *to the cluster's pods*: the cluster's own
    taint, which the cluster's flavor tolerates for them, left off; the planner fits pending
    work on it), the nodes it holds, ready or not, and ``leaving``: nodes of it being drained
    out, which still count toward max."""

    name: str
    min_count: int
    max_count: int
    template: Node
    nodes: tuple[NodeFacts, ...]
    leaving: int = 0

    @property
    def size(self) -> int:
        """What the max holds: nodes held, ready or not, and those still leaving."""
        return len(self.nodes) + self.leaving


@dataclass(frozen=True, slots=True)
class Pending:
    """A workload waiting on the cluster, with the structured reason it waits for (only
    capacity reasons ask for a node: a quota or budget hold does not)."""

    job: int
    workload: Workload
    reason: Reason
    since: float


@dataclass(frozen=True, slots=True)
class ClusterView:
    key: str  # "<tenant>.<cluster>", the CLUSTER_LABEL value
    spec: AutoscaleSpec
    pools: tuple[PoolView, ...]
    pending: tuple[Pending, ...]
    last_scale_out: float | None = None
    last_scale_in: float | None = None
    draining: int = 0  # nodes being drained now (they count against the disruption budget)


class Action(StrEnum):
    SCALE_OUT = "ScaleOut"
    SCALE_IN = "ScaleIn"


@dataclass(frozen=True, slots=True)
class Decision:
    """Grow ``pool`` by ``count`` nodes, or release ``nodes`` (cheapest to drain first);
    ``reason`` is the event the service records. A ``ScaleOutAtMax`` decision has
    ``count == 0``: it adds nothing and says why."""

    cluster: str
    pool: str
    action: Action
    count: int
    nodes: tuple[str, ...]
    reason: Reason


def waits_for_capacity(why: Reason) -> bool:
    """Whether ``why`` (its code or any cause) is a capacity reason."""
    return why.code in CAPACITY_CODES or any(c.code in CAPACITY_CODES for c in why.causes)


def plan(clusters: Sequence[ClusterView], now: float) -> list[Decision]:
    """Decisions for every cluster, at most one per pool per cycle (see the module
    docstring)."""
    templates = _Templates()
    out: list[Decision] = []
    for cluster in sorted(clusters, key=lambda c: c.key):
        out.extend(_plan_cluster(cluster, now, templates))
    return out


# --- one cluster ---------------------------------------------------------------------------


def _plan_cluster(cluster: ClusterView, now: float, templates: _Templates) -> list[Decision]:
    spec = cluster.spec
    pools = sorted(cluster.pools, key=lambda p: p.name)
    demand = _pending_by_pool(cluster, pools, templates)
    out: list[Decision] = []
    growing: set[str] = set()
    for pool in pools:
        decision = _scale_out(cluster, pool, demand.get(pool.name, []), now, templates)
        if decision is not None:
            out.append(decision)
            growing.add(pool.name)
    budget = spec.disruption_budget - cluster.draining
    recent_out = cluster.last_scale_out is not None and (
        now - cluster.last_scale_out < spec.cooldown_seconds
    )
    if budget <= 0 or recent_out:
        return out
    for pool in pools:
        if budget <= 0:
            break
        if pool.name in growing or demand.get(pool.name):
            continue
        nodes = _scale_in(spec, pool, now, budget)
        if nodes:
            budget -= len(nodes)
            why = reason(
                Code.SCALED_IN_UNNEEDED,
                pool=pool.name,
                nodes=list(nodes),
                below=spec.scale_in_below_percent,
                seconds=spec.unneeded_seconds,
            )
            out.append(Decision(cluster.key, pool.name, Action.SCALE_IN, len(nodes), nodes, why))
    return out


def _pending_by_pool(
    cluster: ClusterView, pools: Sequence[PoolView], templates: _Templates
) -> dict[str, list[Pending]]:
    """Each capacity-waiting workload under the first pool whose template fits all its pods."""
    out: dict[str, list[Pending]] = {}
    waiting = sorted(
        (p for p in cluster.pending if waits_for_capacity(p.reason)),
        key=lambda p: (p.since, p.job),
    )
    for pending in waiting:
        for pool in pools:
            if templates.fits(pool.template, pending.workload):
                out.setdefault(pool.name, []).append(pending)
                break
    return out


def _scale_out(
    cluster: ClusterView,
    pool: PoolView,
    pending: Sequence[Pending],
    now: float,
    templates: _Templates,
) -> Decision | None:
    """The one scale-out decision of ``pool`` (or None): the largest of what its min, its
    pending work and its utilisation ask, held to its max."""
    spec = cluster.spec
    asks: list[tuple[int, Reason]] = []  # (nodes wanted, the reason), best first on ties
    if pending:
        upcoming = sum(1 for n in pool.nodes if not n.ready)
        need = templates.nodes_needed(pool.template, pending, upcoming)
        if need:
            jobs = sorted(p.job for p in pending)
            asks.append((need, reason(Code.SCALED_OUT_PENDING, pool=pool.name, count=0,
                                      jobs=jobs, wanted=need, max=pool.max_count)))  # fmt: skip
    if len(pool.nodes) < pool.min_count:
        need = pool.min_count - len(pool.nodes)
        asks.append((need, reason(Code.SCALED_OUT_TO_MIN, pool=pool.name, count=0,
                                  min=pool.min_count)))  # fmt: skip
    mean = _utilisation(pool)
    cooling = any(
        last is not None and now - last < spec.cooldown_seconds
        for last in (cluster.last_scale_out, cluster.last_scale_in)
    )
    ready = sum(1 for n in pool.nodes if n.ready)
    # nothing provisioning either: a new node's capacity is not yet in the readings
    hot = mean is not None and mean * 100 > spec.target_percent
    if hot and not cooling and ready == len(pool.nodes):
        assert mean is not None
        need = max(1, math.ceil(ready * mean * 100 / spec.target_percent) - ready)
        asks.append((need, reason(Code.SCALED_OUT_UTILIZATION, pool=pool.name, count=0,
                                  utilization=round(mean * 100, 1), target=spec.target_percent,
                                  wanted=need, max=pool.max_count)))  # fmt: skip
    if not asks:
        return None
    wanted, why = max(asks, key=lambda a: a[0])  # first of the largest: pending, min, util
    room = max(0, pool.max_count - pool.size)
    count = min(wanted, room)
    if count == 0:
        cause = {
            Code.SCALED_OUT_PENDING: "pending",
            Code.SCALED_OUT_TO_MIN: "min",
            Code.SCALED_OUT_UTILIZATION: "utilization",
        }[why.code]
        why = reason(
            Code.SCALE_OUT_AT_MAX, pool=pool.name, max=pool.max_count, wanted=wanted, cause=cause
        )
        return Decision(cluster.key, pool.name, Action.SCALE_OUT, 0, (), why)
    why = why.with_fields(count=count)
    return Decision(cluster.key, pool.name, Action.SCALE_OUT, count, (), why)


def _utilisation(pool: PoolView) -> float | None:
    """The mean of the ready nodes' known window means (None: none known)."""
    known = [n.util.mean for n in pool.nodes if n.ready and n.util is not None and n.util.known]
    return sum(known) / len(known) if known else None


def _idle(facts: NodeFacts, spec: AutoscaleSpec, now: float) -> bool:
    """Unneeded long enough, and now both allocated and utilised below the threshold."""
    below = spec.scale_in_below_percent
    return (
        facts.ready
        and facts.unneeded_since is not None
        and now - facts.unneeded_since >= spec.unneeded_seconds
        and facts.allocated * 100 < below
        and facts.util is not None
        and facts.util.known
        and facts.util.mean * 100 < below
    )


def _scale_in(spec: AutoscaleSpec, pool: PoolView, now: float, budget: int) -> tuple[str, ...]:
    """The nodes of ``pool`` to release now, cheapest to drain first (see the docstring)."""
    spare = len(pool.nodes) - pool.min_count
    if spare <= 0:
        return ()
    candidates = sorted(
        (n for n in pool.nodes if _idle(n, spec, now)),
        key=lambda n: (n.drain_cost, n.unneeded_since, n.name),
    )
    if not candidates:
        return ()
    ready = [n for n in pool.nodes if n.ready]
    allocated = sum(n.allocated for n in ready)
    known = [n for n in ready if n.util is not None and n.util.known]
    used = sum(n.util.mean for n in known if n.util is not None)
    target = spec.target_percent / 100
    chosen: list[str] = []
    for facts in candidates:
        if len(chosen) >= min(spare, budget):
            break
        left = len(ready) - len(chosen) - 1
        known_left = len(known) - len(chosen) - 1  # every candidate is ready and known
        if left <= 0:
            if allocated > 0 or used > 0:
                break  # the last ready node carries what remains
        elif allocated / left > target or (known_left > 0 and used / known_left > target):
            break
        chosen.append(facts.name)
    return tuple(chosen)


# --- templates and the fit rule ------------------------------------------------------------


class _Templates:
    """Snapshots of template nodes for one :func:`plan` call: whether a workload fits an
    empty template, and how many template nodes a set of workloads needs, bin-packed by the
    engine's fit rule."""

    def __init__(self) -> None:
        self._empty: dict[int, tuple[Node, Snapshot]] = {}
        self._fits: dict[tuple[int, int], bool] = {}

    def _one(self, template: Node) -> Snapshot:
        found = self._empty.get(id(template))
        if found is None or found[0] is not template:
            found = (template, Snapshot.from_nodes([template]))
            self._empty[id(template)] = found
        return found[1]

    def fits(self, template: Node, workload: Workload) -> bool:
        """Every pod of ``workload`` fits an empty ``template``."""
        key = (id(template), id(workload))
        if key not in self._fits:
            snap = self._one(template)
            self._fits[key] = all(
                len(_feasible(snap, ps.pod)) > 0 for ps in workload.pod_sets if ps.count
            )
        return self._fits[key]

    def nodes_needed(self, template: Node, pending: Sequence[Pending], upcoming: int) -> int:
        """New ``template`` nodes the pods of ``pending`` need, first-fit onto ``upcoming``
        empty nodes (provisioning) and then new ones; each workload fits an empty template."""
        pods: list[PodRequest] = []
        for p in pending:
            mine = [ps.pod for ps in p.workload.pod_sets for _ in range(ps.count)]
            mine.sort(key=lambda pod: (-pod.milli_gpu, -pod.cpu_milli, -pod.memory_bytes))
            pods.extend(mine)
        if not pods:
            return 0
        size = upcoming + len(pods)  # at most one new node per pod
        nodes = [replace(template, name=f"{template.name}#{i}") for i in range(size)]
        snap = Snapshot.from_nodes(nodes)
        used = upcoming
        for pod in pods:
            found = _feasible(snap, pod)
            if not len(found):  # cannot happen: each pod fits an empty template
                continue
            node = int(found[0])
            state = CycleState(pod=pod, shape=PodShape.of(pod))
            snap.reserve(node, default_assignment(state, snap, node))
            used = max(used, node + 1)
        return used - upcoming


def _feasible(snap: Snapshot, pod: PodRequest) -> np.ndarray:
    return feasible_nodes(CycleState(pod=pod, shape=PodShape.of(pod)), snap, None)
