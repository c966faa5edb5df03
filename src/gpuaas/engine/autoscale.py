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
  its causes) is a capacity reason (:func:`waits_for_capacity`: the pods do not fit the
  nodes; never a quota, budget or FIFO hold) ask for nodes, and only when every pod of the workload
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
- **Scale-in stabilization** (Kubernetes HPA's ``scaleDown.stabilizationWindowSeconds``, for
  nodes): with ``stabilization_seconds`` set, a pool is never scaled in below
  ``PoolView.recent_peak``, the most nodes it *needed* (held and not idle: allocated, busy,
  or still provisioning) at any time within that window, kept by the caller in a
  :class:`PeakWindow`. A node freed by a passing lull is kept until the lull has lasted the
  whole window: a flap (a node released and asked back minutes later) needs demand above the
  window's own peak within minutes of a release, which a window longer than the load's
  bursts makes rare (docs/benchmarks.md measures it). 0 turns it off (the peak is then 0).
- **Deterministic**: clusters by key, pools by name; the same views give the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from gpuaas.engine.fit import RULES
from gpuaas.engine.framework import CycleState, PodShape, default_assignment, feasible_nodes
from gpuaas.engine.idle_pool import PoolNode, jobs_disturbed, reclaim
from gpuaas.engine.reasons import PLACEMENT_CODES, Code, Reason, reason
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary
from gpuaas.model.workload import PodRequest, PodSet, Workload

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
_CAPACITY_VALUES = frozenset(c.value for c in CAPACITY_CODES)
#: Placement codes an admission decision waits on that a new node may answer.
_ROOM_CODES = PLACEMENT_CODES - {Code.DATASET_NOT_WARM}


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
    recent_peak: int = 0  # most nodes needed within the stabilization window (0: none kept)

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


def nodes_needed(nodes: Sequence[NodeFacts]) -> int:
    """How many of ``nodes`` a pool needs now: every node but the ready ones unneeded (what
    the caller's scale-in rule marks with ``unneeded_since``); what :class:`PeakWindow` keeps."""
    return sum(1 for n in nodes if not n.ready or n.unneeded_since is None)


class PeakWindow:
    """The most of a count seen within the last ``seconds`` (the stabilization window), one
    per pool, kept by the caller across :func:`plan` calls: :meth:`see` each cycle with the
    pool's :func:`nodes_needed`, and pass :meth:`peak` as ``PoolView.recent_peak``. Until a
    whole window has been seen (a new leader, a new pool), the peak is at least what
    ``start_at`` says, so a caller that has lost its history keeps the pool's size for one
    window rather than scaling in on a lull it never saw. A deque of falling values: amortised
    O(1) per sample. Pure: the caller gives the time."""

    __slots__ = ("_kept", "_since", "_start_at", "seconds")

    def __init__(self, seconds: float, now: float, start_at: int = 0) -> None:
        self.seconds = seconds
        self._since = now
        self._start_at = start_at
        self._kept: list[tuple[float, int]] = []  # (time, value), values strictly falling

    def see(self, now: float, value: int) -> int:
        """Record ``value`` at ``now``; returns the peak over the window ending now."""
        kept = self._kept
        while kept and kept[-1][1] <= value:
            kept.pop()
        kept.append((now, value))
        horizon = now - self.seconds
        drop = 0
        while drop < len(kept) - 1 and kept[drop][0] < horizon:
            drop += 1
        if drop:
            del kept[:drop]
        return self.peak(now)

    def peak(self, now: float) -> int:
        """The peak within the window ending at ``now`` (0 for an empty window)."""
        horizon = now - self.seconds
        best = max((v for t, v in self._kept if t >= horizon), default=0)
        if now - self._since < self.seconds:
            best = max(best, self._start_at)
        return best


def waits_for_capacity(why: Reason) -> bool:
    """Whether ``why`` (its code or any cause) says the workload waits for room on nodes: a
    capacity code; a placement failure whose per-filter counts (``rejected``) name one (the
    engine's code is the first filter that removed nodes, often the node selector that keeps
    the job to its cluster's nodes, the capacity codes coming after); or an admission
    decision on a placement code with ``flavors`` (quota was there, the nodes of the flavor
    were not: in a cluster's queue the flavor's nodes are the cluster's, and a cluster with
    none yet waits this way), except a dataset required warm, which no new node has."""
    for part in (why, *why.causes):
        if part.code in CAPACITY_CODES:
            return True
        fields = part.fields
        rejected = fields.get("rejected")
        if isinstance(rejected, Mapping) and any(k in _CAPACITY_VALUES for k in rejected):
            return True
        if part.code in _ROOM_CODES and "flavors" in fields:
            return True
    return False


def plan(clusters: Sequence[ClusterView], now: float) -> list[Decision]:
    """Decisions for every cluster, at most one per pool per cycle (see the module
    docstring)."""
    templates = _TEMPLATES
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
    held = len(pool.nodes)
    ready = 0
    known = 0
    total = 0.0
    for n in pool.nodes:
        if n.ready:
            ready += 1
            util = n.util
            if util is not None and util.samples > 0:
                known += 1
                total += util.mean
    # (nodes wanted, code, fields): the first of the largest wins (pending, min, utilisation)
    asks: list[tuple[int, Code, dict[str, object]]] = []
    if pending:
        need = templates.nodes_needed(pool.template, pending, held - ready)
        if need:
            jobs = sorted(p.job for p in pending)
            asks.append((need, Code.SCALED_OUT_PENDING, {"jobs": jobs}))
    if held < pool.min_count:
        asks.append((pool.min_count - held, Code.SCALED_OUT_TO_MIN, {"min": pool.min_count}))
    # judged on known telemetry only, when nothing is provisioning (a new node's capacity is
    # not yet in the readings) and outside the cooldowns
    mean = total / known if known else 0.0
    if known and mean * 100 > spec.target_percent and ready == held:
        cooling = any(
            last is not None and now - last < spec.cooldown_seconds
            for last in (cluster.last_scale_out, cluster.last_scale_in)
        )
        if not cooling:
            need = max(1, math.ceil(ready * mean * 100 / spec.target_percent) - ready)
            fields = {"utilization": round(mean * 100, 1), "target": spec.target_percent}
            asks.append((need, Code.SCALED_OUT_UTILIZATION, fields))
    if not asks:
        return None
    wanted, code, fields = asks[0]
    for ask in asks[1:]:
        if ask[0] > wanted:
            wanted, code, fields = ask
    room = max(0, pool.max_count - pool.size)
    count = min(wanted, room)
    if count == 0:
        why = reason(
            Code.SCALE_OUT_AT_MAX,
            pool=pool.name,
            max=pool.max_count,
            wanted=wanted,
            cause=_CAUSE[code],
        )
        return Decision(cluster.key, pool.name, Action.SCALE_OUT, 0, (), why)
    if code is not Code.SCALED_OUT_TO_MIN:
        fields.update(wanted=wanted, max=pool.max_count)
    why = Reason(code, {"pool": pool.name, "count": count, **fields})
    return Decision(cluster.key, pool.name, Action.SCALE_OUT, count, (), why)


#: What a scale-out held at max was for (the ``cause`` of ``ScaleOutAtMax``).
_CAUSE = {
    Code.SCALED_OUT_PENDING: "pending",
    Code.SCALED_OUT_TO_MIN: "min",
    Code.SCALED_OUT_UTILIZATION: "utilization",
}


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
    spare = len(pool.nodes) - max(pool.min_count, pool.recent_peak)
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

#: What one pod takes of each resource of the fit rule: ``(rule index, key, amount)``.
_Takes = tuple[tuple[int, object, int], ...]


class _Templates:
    """Template nodes, read through the engine's one fit rule
    (:data:`gpuaas.engine.fit.RULES`): whether a pod fits an empty template (static filters
    and every rule, :func:`~gpuaas.engine.framework.feasible_nodes` on a one-node snapshot),
    and how many template nodes a list of pods needs, packed first-fit.

    Packing keeps, per node, the free amount of each rule-and-key the pods ask for (read
    from the template's snapshot) and takes each pod's amounts from it: exact for every rule
    whose free amount falls by what a pod takes (cpu, memory, whole GPUs, MIG instances of a
    profile, time-sliced replicas, NIC VFs). A share of one GPU does not (shares do not span
    GPUs), so a pool whose pods include shares is packed on a snapshot of template nodes,
    reserving each pod's devices as placement would."""

    #: Templates remembered at most; past it every cache starts afresh (a fleet has a few
    #: pool shapes, so this is only a bound on memory).
    LIMIT = 4096

    def __init__(self) -> None:
        self._known: dict[str, list[tuple[Node, int, Snapshot]]] = {}  # by name
        self._tokens = 0
        self._fits: dict[tuple[int, PodRequest], bool] = {}
        self._free: dict[tuple[int, int, object], int] = {}
        self._needs: dict[PodRequest, _Takes] = {}

    def _entry(self, template: Node) -> tuple[Node, int, Snapshot]:
        """The template's token and one-node snapshot, kept across :func:`plan` calls: the
        same node object (the simulator's template) or an equal one (the service builds its
        templates afresh every step) is a hit; a changed one gets a new token, so nothing
        cached for the old one is read for it."""
        same = self._known.get(template.name)
        if same is not None:
            for found in same:
                if found[0] is template:
                    return found
            for found in same:
                if found[0] == template:
                    return found
        if len(self._known) >= self.LIMIT or len(self._fits) + len(self._free) >= self.LIMIT * 64:
            self._known.clear()
            self._fits.clear()
            self._free.clear()
            same = None
        if len(self._needs) >= self.LIMIT * 16:
            self._needs.clear()
        self._tokens += 1
        found = (template, self._tokens, Snapshot.from_nodes([template]))
        if same is None:
            same = self._known[template.name] = []
        elif len(same) >= 8:  # a name whose node keeps changing: keep its newest few
            del same[0]
        same.append(found)
        return found

    def _one(self, template: Node) -> Snapshot:
        return self._entry(template)[2]

    def fits(self, template: Node, workload: Workload) -> bool:
        """Every pod of ``workload`` fits an empty ``template``."""
        return all(self._pod_fits(template, ps.pod) for ps in workload.pod_sets if ps.count)

    def _pod_fits(self, template: Node, pod: PodRequest) -> bool:
        key = (self._entry(template)[1], pod)
        found = self._fits.get(key)
        if found is None:
            found = self._fits[key] = len(_feasible(self._one(template), pod)) > 0
        return found

    def nodes_needed(self, template: Node, pending: Sequence[Pending], upcoming: int) -> int:
        """New ``template`` nodes the pods of ``pending`` need, first-fit onto ``upcoming``
        empty nodes (provisioning) and then new ones; each workload fits an empty template.
        Pods of a workload go largest first; workloads in the order given (oldest first)."""
        groups: list[tuple[PodRequest, int]] = []
        for p in pending:
            sets = p.workload.pod_sets
            if len(sets) > 1:
                sets = sorted(sets, key=_largest_first)
            groups.extend((ps.pod, ps.count) for ps in sets if ps.count)
        if not groups:
            return 0
        if any(pod.claims or PodShape.of(pod).share for pod, _ in groups):
            return self._pack_on_snapshot(template, groups, upcoming)
        return self._pack(template, groups, upcoming)

    def _takes(self, pod: PodRequest) -> _Takes:
        found = self._needs.get(pod)
        if found is None:
            shape = PodShape.of(pod)
            found = self._needs[pod] = tuple(
                (i, key, amount)
                for i, rule in enumerate(RULES)
                for key, amount in rule.needs(shape)
                if amount
            )
        return found

    def _capacity(self, template: Node, rule: int, key: object) -> int:
        """The rule's free amount on an empty template node."""
        k = (self._entry(template)[1], rule, key)
        found = self._free.get(k)
        if found is None:
            free = RULES[rule].free(self._one(template), slice(0, 1), key)
            found = self._free[k] = 0 if free is None else int(free[0])
        return found

    def _pack(self, template: Node, groups: list[tuple[PodRequest, int]], upcoming: int) -> int:
        bins: list[dict[tuple[int, object], int]] = [{} for _ in range(upcoming)]
        for pod, count in groups:
            takes = self._takes(pod)
            left = count
            start = 0
            while left:
                for b in range(start, len(bins)):
                    room = bins[b]
                    fit = left
                    for rule, key, amount in takes:
                        have = room.get((rule, key))
                        if have is None:
                            have = room[(rule, key)] = self._capacity(template, rule, key)
                        fit = min(fit, have // amount)
                        if not fit:
                            break
                    if fit:
                        for rule, key, amount in takes:
                            room[(rule, key)] -= fit * amount
                        left -= fit
                        if not left:
                            break
                    start = b + 1
                else:
                    bins.append({})
        return len(bins) - upcoming

    def _pack_on_snapshot(
        self, template: Node, groups: list[tuple[PodRequest, int]], upcoming: int
    ) -> int:
        size = upcoming + sum(count for _, count in groups)  # at most one new node per pod
        nodes = [replace(template, name=f"{template.name}#{i}") for i in range(size)]
        snap = Snapshot.from_nodes(nodes)
        used = upcoming
        for pod, count in groups:
            state = CycleState(pod=pod, shape=PodShape.of(pod))
            for _ in range(count):
                found = _feasible(snap, pod)
                if not len(found):  # cannot happen: each pod fits an empty template
                    continue
                node = int(found[0])
                snap.reserve(node, default_assignment(state, snap, node))
                used = max(used, node + 1)
        return used - upcoming


#: Kept across :func:`plan` calls (building the one-node snapshot was a third of a cycle).
_TEMPLATES = _Templates()


def _largest_first(pod_set: PodSet) -> tuple[int, int, int]:
    pod = pod_set.pod
    return (-pod.milli_gpu, -pod.cpu_milli, -pod.memory_bytes)


def _feasible(snap: Snapshot, pod: PodRequest) -> np.ndarray:
    return feasible_nodes(CycleState(pod=pod, shape=PodShape.of(pod)), snap, None)


# --- which nodes a scale-out takes ------------------------------------------------------------

#: The issue's flap: a node removed from a cluster and added back to it within this long.
FLAP_WINDOW_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class ScaleOutNodes:
    """The nodes a scale-out takes: ``free`` ones to carve now (in the caller's order) and
    pool nodes to ``reclaim`` (in the order to take them); ``flaps``: those of them the
    cluster released within the flap window (each a flap, taken because nothing else would
    do and the demand had waited ``max_wait``); ``held``: recently released nodes that were
    there but held back (the demand had not waited long enough: the scale-out is short by
    them for now)."""

    free: tuple[str, ...]
    reclaim: tuple[str, ...]
    flaps: tuple[str, ...] = ()
    held: int = 0

    @property
    def count(self) -> int:
        return len(self.free) + len(self.reclaim)


def nodes_for_scale_out(
    count: int,
    free: Sequence[str],
    pool: Sequence[PoolNode],
    matches: Callable[[str], bool],
    released: Mapping[str, float],
    now: float,
    *,
    window: float = FLAP_WINDOW_SECONDS,
    disturbed: Collection[int] = (),
    reclaiming: int = 0,
    waited: float = 0.0,
    max_wait: float = math.inf,
) -> ScaleOutNodes:
    """Which ``count`` nodes a cluster's scale-out takes, so that it does not take back a node
    it released minutes ago when another would do (a flap: issue 17's "a node removed and
    re-added within 10 min").

    Semantics. ``free``: the free nodes that match the pool, in the caller's order of
    preference (the service's topology rule, the simulator's rank); ``pool``: the idle pool's
    nodes not already being reclaimed, of which ``matches`` accepts those the pool could use;
    ``released``: when this cluster last released each node (older entries are ignored).
    A node is *recent* when this cluster released it at or after ``now - window``. The
    choice, in this order, until ``count`` nodes are had:

    1. free nodes that are not recent (the caller's order);
    2. pool nodes that are not recent, chosen by :func:`~gpuaas.engine.idle_pool.reclaim`
       among them (fewest pool jobs disturbed; ``disturbed``: jobs already in their grace).
       ``reclaiming`` nodes already on their way back from the pool for this demand count
       here, so a scale-out does not reclaim twice what is coming;
    3. only then recent nodes, and only once the demand has waited ``waited >= max_wait``:
       recent free nodes released longest ago first, then recent pool nodes by the reclaim's
       order (the jobs disturbed by step 2 cost nothing more). Each is a flap (``flaps``).
       Before that they are ``held``: the scale-out is short by them, the demand waits, and
       at most until the node's release leaves the window (or ``max_wait`` is reached).

    ``max_wait`` is the policy for a cluster whose only candidates are nodes it just released:
    0 takes one at once and counts the flap; ``inf`` (the default) never flaps and waits at
    most ``window`` for that node; in between, a bounded wait. A recently released node is
    preferred to nothing only by that rule, never to any other node: a free recent node comes
    after a pool node that disturbs spot work (its grace period is the price of no flap)."""
    if count <= 0:
        return ScaleOutNodes((), ())
    since = now - window

    def recent(name: str) -> bool:
        at = released.get(name)
        return at is not None and at >= since

    take = [n for n in free if not recent(n)][:count]
    rest = count - len(take) - max(reclaiming, 0)
    fresh_pool = [p for p in pool if not recent(p.name)]
    back = reclaim(fresh_pool, rest, matches, disturbed) if rest > 0 else []
    rest -= len(back)
    if rest <= 0:
        return ScaleOutNodes(tuple(take), tuple(back))
    old_free = sorted((n for n in free if recent(n)), key=lambda n: released[n])
    old_pool = [p for p in pool if recent(p.name) and matches(p.name)]
    if waited < max_wait:
        return ScaleOutNodes(
            tuple(take), tuple(back), held=min(rest, len(old_free) + len(old_pool))
        )
    late_free = old_free[:rest]
    rest -= len(late_free)
    now_disturbed = set(disturbed) | jobs_disturbed(pool, back)
    late_pool = reclaim(old_pool, rest, matches, now_disturbed) if rest > 0 else []
    return ScaleOutNodes((*take, *late_free), (*back, *late_pool), flaps=(*late_free, *late_pool))
