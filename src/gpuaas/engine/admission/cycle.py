"""The admission cycle: which pending workloads get quota, on which flavors, and who is evicted.

A pass considers every pending workload of every ClusterQueue. Within a ClusterQueue workloads
queue by priority then creation time; across queues the next candidate is the one that needs the
least borrowing (with fair sharing: the lowest dominant resource share once admitted), then the
higher priority, then the earlier creation, as in Kueue. Unlike Kueue, which takes one head per
ClusterQueue per cycle, a pass admits as many workloads of a queue as fit: after a queue's head
is decided its next workload joins the candidates at once. StrictFIFO stops a queue at the first
workload that cannot be admitted; BestEffortFIFO moves past it. Passes repeat until one changes
nothing. The engine is pure: time is an input and nothing here does I/O.

A run's placement work is bounded per namespace (the LocalQueue's namespace: a tenant in the
service) by ``AdmissionConfig.pods_per_cycle``, so one tenant's huge gangs cannot make every
other tenant wait on the run (the engine reads no clock, so work is counted, not time). Each
workload tried (placed, or found not to fit) charges its pods to its namespace; once the
namespace has spent the budget its other workloads are not tried in this run and wait with
``CycleBudgetSpent``, to be tried first in the next one (they are not marked inadmissible). The
first workload a namespace tries in a run is always tried, whatever its size, so a job larger
than the budget still gets its turn, one per run. StrictFIFO queues keep their order: the rest
of such a queue waits behind a deferred head.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from gpuaas.engine.admission.fleet_changes import (
    AddNode,
    CordonNode,
    Displaced,
    FleetChange,
    RemoveNode,
    RepartitionNode,
    devices_gone,
    keeps_devices,
    no_room_after_repartition,
)
from gpuaas.engine.admission.gpu_size import GPU_MILLI, MILLI, gpu_milli, is_gpu_device, mig_milli
from gpuaas.engine.admission.nodes import (
    DEFAULT_ADMISSION_POLICY,
    NodeCapacity,
    NodePlacement,
    NodePool,
    pod_request,
    tolerated,
)
from gpuaas.engine.admission.preemption import Preemptor
from gpuaas.engine.admission.quota import QuotaNode, QuotaTree
from gpuaas.engine.admission.state import (
    AdmissionConfig,
    AdmittedWorkload,
    Eviction,
    Mode,
    ResourceTransformation,
)
from gpuaas.engine.framework import reserve_hooks
from gpuaas.engine.gang import PodPlacement
from gpuaas.engine.nics import quota_resource, vfs_per_pod
from gpuaas.engine.reasons import (
    NO_PREEMPTION_POSSIBLE,
    PREEMPTION_WOULD_NOT_FIT,
    WAITING_FOR_QUOTA,
    Cause,
    Code,
    Reason,
    combine,
    evicted,
    reason,
)
from gpuaas.engine.snapshot import OvercommitError
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    BorrowWithinCohortPolicy,
    EvictionReason,
    FlavorFungibility,
    FlavorResource,
    FungibilityPolicy,
    FungibilityPreference,
    Governance,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    WithinClusterQueue,
)
from gpuaas.model.node import UNSCHEDULABLE, Node
from gpuaas.model.resources import NVIDIA_GPU

_VICTIM_ORDER = attrgetter("victim_order")
_UNUSED = Code.UNUSED_QUOTA_SHORT  # fields as in reasons.unused_quota_short
_CAPACITY = Code.QUOTA_CAPACITY_EXCEEDED  # fields as in reasons.quota_capacity_exceeded


def _without_node(placement: NodePlacement, node: int) -> NodePlacement:
    """``placement`` without its pods and extended resources on ``node``."""
    gang = dataclasses.replace(
        placement.gang, pods=tuple(p for p in placement.gang.pods if p.placement.node != node)
    )
    extended = tuple(e for e in placement.extended if e[0] != node)
    return NodePlacement(gang, extended, placement.nodes)


def _queue_order(wl: AdmissionWorkload) -> tuple[int, float, str]:
    """A ClusterQueue's order: higher priority first, then earlier creation, then name."""
    return (-wl.priority, wl.created, wl.name)


@dataclass(slots=True)
class Assignment:
    """Flavors chosen for one workload and how it could get them."""

    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    mode: Mode = Mode.FIT
    borrow: int = 0
    need_preemption: set[FlavorResource] = field(default_factory=set)
    # why flavors were refused: reasons, or (code, positional fields) pairs from the hot path
    # (see gpuaas.engine.reasons.Cause); combined into one reason only on failure
    reasons: list[Reason | Cause] = field(default_factory=list)
    simulated: bool = True  # False: preemption was assumed possible, not checked

    def reason(self) -> Reason:
        """Why the workload cannot have these flavors: every cause met, each once."""
        return combine(self.reasons, WAITING_FOR_QUOTA)

    def message(self) -> str:
        return self.reason().render()


class RenderedReasons(Mapping[str, str]):
    """The engine's reasons as sentences, rendered when read (see
    :mod:`gpuaas.engine.reasons`): for callers that show them."""

    __slots__ = ("_why",)

    def __init__(self, why: Mapping[str, Reason]) -> None:
        self._why = why

    def __getitem__(self, name: str) -> str:
        return self._why[name].render()

    def __iter__(self) -> Iterator[str]:
        return iter(self._why)

    def __len__(self) -> int:
        return len(self._why)


def _offers_level(gov: Governance, flavor: ResourceFlavor, ps: AdmissionPodSet) -> bool:
    """Whether a pod set's topology request can be met on ``flavor``: as in Kueue, a flavor that
    names a Topology offers only that Topology's levels (required or preferred alike); a flavor
    without one offers every gpuaas level."""
    if ps.topology is None or flavor.topology_name is None:
        return True
    topology = gov.topologies.get(flavor.topology_name)
    return topology is None or ps.topology.level in topology.levels


def _should_try_next(mode: Mode, borrow: int, fung: FlavorFungibility) -> bool:
    if mode in (Mode.PREEMPT, Mode.RECLAIM):
        return fung.when_can_preempt != FungibilityPolicy.MAY_STOP_SEARCH
    if mode == Mode.FIT:
        return borrow > 0 and fung.when_can_borrow != FungibilityPolicy.MAY_STOP_SEARCH
    return True


def _preferred(a: tuple[Mode, int], b: tuple[Mode, int], fung: FlavorFungibility) -> bool:
    if fung.preference == FungibilityPreference.PREEMPTION_OVER_BORROWING:
        return (a[1], -a[0]) < (b[1], -b[0])
    return (-a[0], a[1]) < (-b[0], b[1])


class AdmissionEngine:
    """Quota, admitted and pending workloads of one governance configuration.

    With ``nodes`` (model :class:`~gpuaas.model.node.Node` objects, or
    :class:`~gpuaas.engine.admission.nodes.NodeCapacity` ones from a scenario), a workload is
    admitted only if the placement engine also places all its pods, with the placement
    ``policy`` (a name for :func:`~gpuaas.engine.policies.make_policy`); see
    :mod:`gpuaas.engine.admission.nodes`.
    """

    def __init__(
        self,
        gov: Governance,
        config: AdmissionConfig | None = None,
        nodes: Sequence[Node | NodeCapacity] | None = None,
        policy: str = DEFAULT_ADMISSION_POLICY,
    ) -> None:
        self.gov = gov
        self.config = config or AdmissionConfig()
        self.tree = QuotaTree(gov)
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.by_cq: dict[str, dict[str, AdmittedWorkload]] = {
            name: {} for name in gov.cluster_queues
        }
        self.pending: dict[str, dict[str, AdmissionWorkload]] = {
            name: {} for name in gov.cluster_queues
        }
        #: why each pending workload waits (or was last evicted or requeued), structured;
        #: :attr:`reasons` shows the same as sentences
        self.why: dict[str, Reason] = {}
        self.reasons: Mapping[str, str] = RenderedReasons(self.why)
        self.evictions: list[Eviction] = []
        self.pool = NodePool(nodes, gov.flavors, policy) if nodes is not None else None
        self.ordered: dict[str, list[AdmittedWorkload]] = {name: [] for name in gov.cluster_queues}
        self.preemptor = Preemptor(
            self.tree, gov.cluster_queues, self.by_cq, self.config, self.ordered
        )
        self.now = 0.0
        self.oscillated = False  # set when a run stopped on a preemption loop
        self._sequence = 0
        self._version = 0  # bumped on every change (node state is shared by all queues)
        self._root_of = {name: node.root().name for name, node in self.tree.cqs.items()}
        self._versions: dict[str, int] = dict.fromkeys(self._root_of.values(), 0)
        self._inadmissible: dict[str, tuple[tuple[int, int], float]] = {}
        # each ClusterQueue's pending workloads in queue order, kept sorted as they come and go,
        # and how many of the first ones are known to be inadmissible in a given state: a long
        # backlog that cannot move costs a pass nothing but its new arrivals
        self._order: dict[str, list[AdmissionWorkload]] = {name: [] for name in gov.cluster_queues}
        self._frontier: dict[str, tuple[tuple[tuple[int, int], float], int]] = {}
        self._preempt_cache: dict[tuple[object, ...], tuple[int, Mode, int]] = {}
        self._known: set[str] = set()
        self._flavor_sets: dict[tuple[object, ...], dict[str, dict[str, str]]] = {}
        #: while a new leader still loads its backlog (gpuaas.service.backlog): the queue key
        #: (:func:`_queue_order`) of the last pending workload loaded; every workload not yet
        #: loaded sorts after it. None: every pending workload is here.
        self.loaded_until: tuple[int, float, str] | None = None
        #: pods tried per namespace in the current run (``AdmissionConfig.pods_per_cycle``), and
        #: whether the run deferred a workload for it (the next cycle has work even if nothing
        #: else changes)
        self._spent: dict[str, int] = {}
        self.deferred = False

        #: node index -> admitted workloads with a pod there (what a fleet change displaces)
        self._on_node: dict[int, set[str]] = {}
        self._user_admitted: dict[tuple[str, str], int] = {}
        self._group_of: dict[str, dict[str, int]] = {}
        self._label_keys: dict[str, list[set[str]]] = {}
        for name, cq in gov.cluster_queues.items():
            self._group_of[name] = {
                r: gi for gi, g in enumerate(cq.resource_groups) for r in g.covered_resources
            }
            self._label_keys[name] = [
                {k for f in g.flavors for k in gov.flavors[f.name].node_labels}
                for g in cq.resource_groups
            ]

    # --- inputs ---------------------------------------------------------------------------

    def cluster_queue_of(self, wl: AdmissionWorkload) -> str:
        lq = self.gov.local_queues.get(wl.queue)
        if lq is None:
            known = ", ".join(sorted(self.gov.local_queues)) or "none"
            raise InvalidValue(
                f"workload {wl.name}: queue",
                f"LocalQueue {wl.queue!r} does not exist (known: {known})",
            )
        return lq.cluster_queue

    def submit(self, wl: AdmissionWorkload) -> None:
        """Queue ``wl``; it is considered from the next :meth:`run`."""
        if wl.name in self._known:
            raise InvalidValue(f"workload {wl.name}", "name is used twice")
        cq_name = self.cluster_queue_of(wl)
        by_size = GPU_MILLI in self._group_of[cq_name]
        for ps in wl.pod_sets:
            if by_size:  # the charge needs the MIG profile's size: an unknown one is an error
                gpu_milli(ps.requests, f"workload {wl.name}: podSets.{ps.name}.requests")
            if self.pool is not None:
                pod_request(
                    ps.requests, {}, (), f"workload {wl.name}: podSets.{ps.name}"
                )  # a malformed GPU form is an error now, not a pending reason later
        self._enqueue(cq_name, wl)
        self._known.add(wl.name)

    def admit_existing(
        self,
        wl: AdmissionWorkload,
        flavors: Mapping[str, Mapping[str, str]],
        at: float,
        placement: NodePlacement | None = None,
    ) -> None:
        """Record a workload already holding quota on ``flavors`` (pod set/resource/flavor).

        ``placement``: the pods' devices, already reserved in :attr:`pool` by the caller (see
        :mod:`gpuaas.engine.admission.restore`); without it the pool places the pods anew.
        """
        cq_name = self.cluster_queue_of(wl)
        cq = self.gov.cluster_queues[cq_name]
        usage: dict[FlavorResource, int] = {}
        chosen: dict[str, dict[str, str]] = {}
        pod_sets = {ps.name: ps for ps in wl.pod_sets}
        for ps_name in flavors:
            if ps_name not in pod_sets:
                raise InvalidValue(
                    f"workload {wl.name}: admitted.flavors.{ps_name}", "no such pod set"
                )
        for ps in wl.pod_sets:
            given = flavors.get(ps.name, {})
            chosen[ps.name] = {}
            for resource, amount in self.quota_requests(ps, cq_name).items():
                if amount == 0:
                    continue
                where = f"workload {wl.name}: admitted.flavors.{ps.name}.{resource}"
                flavor = given.get(resource)
                if flavor is None:
                    raise InvalidValue(where, "no flavor given for a requested resource")
                gi = self._group_of[cq_name].get(resource)
                if gi is None or flavor not in {f.name for f in cq.resource_groups[gi].flavors}:
                    raise InvalidValue(
                        where,
                        f"flavor {flavor!r} has no quota for {resource} in ClusterQueue {cq_name}",
                    )
                chosen[ps.name][resource] = flavor
                usage[(flavor, resource)] = usage.get((flavor, resource), 0) + amount
        if wl.name in self._known:
            raise InvalidValue(f"workload {wl.name}", "name is used twice")
        if placement is None and self.pool is not None:
            placement = self.pool.place(wl, chosen)
            if placement is None:  # it cannot hold quota for pods that are nowhere
                raise InvalidValue(
                    f"workload {wl.name}: admitted",
                    f"its pods do not fit on the nodes: {self.pool.last_reason.render()}",
                )
        self._known.add(wl.name)
        self._record(wl, cq_name, chosen, usage, at, placement)

    def withdraw(self, name: str) -> bool:
        """Forget the pending workload ``name`` (cancelled before admission, or held out of
        admission by a budget: it may be submitted again); False when it is not pending.
        Quota is unchanged: a pending workload holds none."""
        for cq, pending in self.pending.items():
            if name in pending:
                self._dequeue(cq, name)
                self.why.pop(name, None)
                self._inadmissible.pop(name, None)
                self._known.discard(name)
                return True
        return False

    def _enqueue(self, cq: str, wl: AdmissionWorkload) -> None:
        self.pending[cq][wl.name] = wl
        order = self._order[cq]
        i = bisect.bisect_left(order, _queue_order(wl), key=_queue_order)
        order.insert(i, wl)
        known = self._frontier.get(cq)
        if known is not None and i < known[1]:
            self._frontier[cq] = (known[0], i)  # it sits among the known: they end before it

    def _dequeue(self, cq: str, name: str) -> None:
        wl = self.pending[cq].pop(name)
        order = self._order[cq]
        i = bisect.bisect_left(order, _queue_order(wl), key=_queue_order)
        del order[i]
        known = self._frontier.get(cq)
        if known is not None and i < known[1]:
            self._frontier[cq] = (known[0], known[1] - 1)

    def _advance_frontier(self, cq: str) -> None:
        """Move ``cq``'s frontier past the workloads now known to be inadmissible in its current
        state (from the old frontier if that state has not changed, else from the start)."""
        state = (self._state(cq), self._clock())
        known = self._frontier.get(cq)
        i = known[1] if known is not None and known[0] == state else 0
        order = self._order[cq]
        inadmissible = self._inadmissible
        while i < len(order) and inadmissible.get(order[i].name) == state:
            i += 1
        self._frontier[cq] = (state, i)

    def quota_requests(self, ps: AdmissionPodSet, cq_name: str | None = None) -> dict[str, int]:
        """What ``ps`` is charged in quota: its requests times its count, transformed.

        In a ClusterQueue ``cq_name`` that covers ``gpuaas.io/gpu-milli`` every GPU form is also
        charged there by its real size (:mod:`~gpuaas.engine.admission.gpu_size`), and a GPU
        device resource the ClusterQueue does not cover is not charged as such. A pod set's
        NIC VFs (``ps.network``) are charged as their pool's resource
        (:func:`~gpuaas.engine.nics.quota_resource`) in a ClusterQueue that covers it, and not
        at all in one that does not (as Kueue's ``excludeResourcePrefixes`` would): a NIC
        pool is limited only where an operator writes quota for it.
        """
        covered = self._group_of[cq_name] if cq_name is not None else None
        return quota_charge(ps, covered, self.config.transformations)

    # --- the cycle ------------------------------------------------------------------------

    def run(self, now: float) -> int:
        """Run passes at time ``now`` until one changes nothing; returns the number of passes."""
        if now != self.now:
            self._preempt_cache.clear()
        self.now = now
        self.preemptor.now = now
        self._spent.clear()
        self.deferred = False
        seen: set[frozenset[str]] = set()
        for passes in range(1, self.config.max_passes + 1):
            if not self._pass():
                return passes
            if self.loaded_until is not None:
                return passes  # see _pass: the next pass waits for the rest of the backlog
            # Preemption rules that are each fair can still chase each other in a loop (Kueue
            # throttles such loops with requeue back-off; we have no clock to wait on). The pass
            # is deterministic in the admitted set, so a repeated set means a loop: stop there.
            state = frozenset(self.admitted)
            if state in seen:
                self.oscillated = True
                return passes
            seen.add(state)
        raise GpuaasError(
            f"admission did not settle after {self.config.max_passes} passes "
            "(workloads keep preempting each other)"
        )

    def _key(self, wl: AdmissionWorkload, cq: str, a: Assignment) -> tuple[float, int, float, str]:
        if self.config.fair_sharing:
            first = self.tree.share(self.tree.cqs[cq], plus=a.usage)
        else:
            first = float(a.borrow)
        return (first, -wl.priority, wl.created, wl.name)

    def _pass(self) -> bool:
        """One pass over the queues' heads (see the module docstring).

        While the backlog is still loading (:attr:`loaded_until`), the pass decides only what a
        pass over the whole backlog would decide first: a workload not yet loaded sorts after
        the last one loaded in its queue, and its key here is at least (no borrowing, that
        queue key), so the pass stops where such a key would come out of the heap: everything
        decided before it comes first in the whole pass as well. The run then ends with this
        pass: a second pass would look again at workloads the whole first pass had not finished
        with yet.
        """
        changed = False
        queues: dict[str, list[AdmissionWorkload]] = {}
        heap: list[
            tuple[tuple[float, int, float, str], int, str, AdmissionWorkload, Assignment]
        ] = []
        position: dict[str, int] = {}

        def push_next(cq: str) -> None:
            items = queues[cq]
            while position[cq] < len(items):
                wl = items[position[cq]]
                if self._inadmissible.get(wl.name) == (self._state(cq), self._clock()):
                    # nothing in its cohort tree changed since it last failed: it still fails
                    if strict[cq]:
                        block(cq, wl)
                        return
                    position[cq] += 1
                    continue
                if self._defer(wl):
                    if strict[cq]:
                        block(cq, wl)
                        return
                    position[cq] += 1
                    continue
                limit_reason = self._user_limit_reason(wl)
                if limit_reason is None:
                    # ordering needs borrowing/share only: skip the costly preemption
                    # simulation until the workload's turn comes
                    a = self.assign(wl, cq, simulate=False)
                    heapq.heappush(heap, (self._key(wl, cq, a), self._tree(cq), cq, wl, a))
                    return
                self.why[wl.name] = limit_reason
                position[cq] += 1

        strict = {
            name: cq.queueing_strategy == QueueingStrategy.STRICT_FIFO
            for name, cq in self.gov.cluster_queues.items()
        }

        def block(cq: str, head: AdmissionWorkload) -> None:
            for blocked in queues[cq][position[cq] + 1 :]:
                self.why[blocked.name] = Reason(
                    Code.STRICT_FIFO_BLOCKED, {"head": head.name, "cluster_queue": cq}
                )

        for cq, pending in self.pending.items():
            if pending:
                queues[cq] = list(self._order[cq])  # admissions change the list during the pass
                position[cq] = 0
                known = self._frontier.get(cq)
                if (
                    not strict[cq]
                    and known is not None
                    and known[0] == (self._state(cq), self._clock())
                ):
                    position[cq] = known[1]
                push_next(cq)
        if self.loaded_until is not None:
            lowest = -math.inf if self.config.fair_sharing else 0.0
            p, created, name = self.loaded_until
            # sorts after the last loaded workload's own key and before any later one's
            heap.append(((lowest, p, created, name + "\x00"), -1, "", None, None))  # type: ignore[arg-type]
            heapq.heapify(heap)
        while heap:
            key, version, cq, wl, a = heapq.heappop(heap)
            if wl is None:
                break  # the rest of the backlog could come first from here on
            # an assignment depends on the cohort tree only (nodes are checked at admission);
            # a FIT found without simulating preemption is the same as with it
            if version != self._tree(cq) or (not a.simulated and a.mode != Mode.FIT):
                a = self.assign(wl, cq)
                new_key = self._key(wl, cq, a)
                if new_key > key and heap and new_key > heap[0][0]:
                    heapq.heappush(heap, (new_key, self._tree(cq), cq, wl, a))
                    continue
            if self._defer(wl, charge=True):  # its namespace may have spent it since
                if strict[cq]:
                    block(cq, wl)
                    continue
                position[cq] += 1
                push_next(cq)
                continue
            if self._try_admit(wl, cq, a):
                changed = True
            else:
                self._inadmissible[wl.name] = (self._state(cq), self._clock())
                if strict[cq]:
                    block(cq, wl)
                    continue
            position[cq] += 1
            push_next(cq)
        for cq in queues:
            if not strict[cq]:
                self._advance_frontier(cq)
        return changed

    def _clock(self) -> float:
        """The time a decision depends on: only a minimum run time makes it matter (who may be
        preempted); without one an unchanged queue stays inadmissible from run to run."""
        return self.now if self.config.min_run_time > 0 else 0.0

    def _state(self, cq: str) -> tuple[int, int]:
        """What a decision for ``cq`` depends on: its cohort tree, and the nodes if known."""
        return (self._versions[self._root_of[cq]], self._version if self.pool is not None else 0)

    def _tree(self, cq: str) -> int:
        """The version of ``cq``'s cohort tree: what quota decisions for ``cq`` depend on."""
        return self._versions[self._root_of[cq]]

    def _bump(self, cq: str) -> None:
        self._versions[self._root_of[cq]] += 1
        self._version += 1

    def _defer(self, wl: AdmissionWorkload, charge: bool = False) -> bool:
        """Whether ``wl`` waits for the next run because its namespace has spent this run's
        placement budget (recording why); if not and ``charge`` (it is about to be tried), its
        pods are charged to the namespace."""
        budget = self.config.pods_per_cycle
        if not budget:
            return False
        namespace = wl.queue.partition("/")[0]
        spent = self._spent.get(namespace, 0)
        if spent >= budget:
            self.why[wl.name] = Reason(
                Code.CYCLE_BUDGET_SPENT,
                {"namespace": namespace, "pods": spent, "pods_budget": budget},
            )
            self.deferred = True
            return True
        if charge:
            self._spent[namespace] = spent + sum(ps.count for ps in wl.pod_sets)
        return False

    def _user_limit_reason(self, wl: AdmissionWorkload) -> Reason | None:
        limit = self.config.user_limits.get(wl.queue)
        if limit is None or wl.user is None:
            return None
        if self._user_admitted.get((wl.queue, wl.user), 0) < limit:
            return None
        return Reason(Code.USER_LIMIT, {"user": wl.user, "queue": wl.queue, "limit": limit})

    def _try_admit(self, wl: AdmissionWorkload, cq: str, a: Assignment) -> bool:
        if a.mode == Mode.NO_FIT:
            self.why[wl.name] = a.reason()
            return False
        if a.mode == Mode.FIT:
            return self._admit_placed(wl, cq, a)
        targets = self.preemptor.targets(wl, cq, a.usage, a.need_preemption)
        if not targets:
            self.why[wl.name] = a.reason().plus(NO_PREEMPTION_POSSIBLE)
            return False
        if self.pool is not None and not self._fits_nodes_after(wl, cq, targets):
            self.why[wl.name] = a.reason().plus(PREEMPTION_WOULD_NOT_FIT)
            return False
        for victim, cause in targets:
            self.evict(victim.name, cause, wl.name)
        fresh = self.assign(wl, cq)
        if fresh.mode == Mode.FIT:
            self._admit_placed(wl, cq, fresh)  # on failure it records why
        else:
            self.why[wl.name] = fresh.reason()
        return True

    def _fits_nodes_after(
        self, wl: AdmissionWorkload, cq: str, targets: Sequence[tuple[AdmittedWorkload, object]]
    ) -> bool:
        """Whether ``wl`` would fit on the nodes once ``targets`` are gone (state is restored)."""
        assert self.pool is not None
        for victim, _ in targets:
            self.tree.remove_usage(self.tree.cqs[victim.cluster_queue], victim.usage)
            if victim.placement is not None:
                self.pool.release(victim.workload, victim.placement)
        # no simulation here: the tree is temporarily altered and must not reach the caches
        trial = self.assign(wl, cq, simulate=False)
        placement = self.pool.place(wl, trial.flavors) if trial.mode == Mode.FIT else None
        if placement is not None:
            self.pool.release(wl, placement)
        for victim, _ in targets:
            self.tree.add_usage(self.tree.cqs[victim.cluster_queue], victim.usage)
            if victim.placement is not None:
                self.pool.reserve(victim.workload, victim.placement)
        return placement is not None

    def _admit_placed(self, wl: AdmissionWorkload, cq: str, a: Assignment) -> bool:
        placement = None
        if self.pool is not None:
            # Quota and physical fit together: when the pods do not fit on the nodes of a
            # flavor, try the next flavor that has quota, as if that flavor had none.
            excluded: set[tuple[str, str]] = set()
            while (placement := self.pool.place(wl, a.flavors)) is None:
                failed = self.pool.last_failed or ""
                tried = {(failed, f) for f in a.flavors.get(failed, {}).values()}
                if tried <= excluded:
                    break
                excluded |= tried
                retry = self.assign(wl, cq, exclude=frozenset(excluded))
                if retry.mode != Mode.FIT:
                    break
                a = retry
            if placement is None:
                failed = self.pool.last_reason
                self.why[wl.name] = failed.with_fields(flavors=self._shared(a.flavors))
                return False
        self._dequeue(cq, wl.name)
        self._record(wl, cq, a.flavors, a.usage, self.now, placement)
        return True

    def _shared(self, flavors: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        """One copy of each distinct flavor assignment for the reasons that name it: thousands
        of workloads waiting for room on the same flavors hold one dict, not one each."""
        key = tuple((ps, tuple(rs.items())) for ps, rs in flavors.items())
        return self._flavor_sets.setdefault(key, flavors)

    def _record(
        self,
        wl: AdmissionWorkload,
        cq: str,
        flavors: dict[str, dict[str, str]],
        usage: dict[FlavorResource, int],
        at: float,
        placement: NodePlacement | None,
    ) -> None:
        self._sequence += 1
        aw = AdmittedWorkload(wl, cq, flavors, usage, at, self._sequence, placement)
        self.admitted[wl.name] = aw
        self._index(aw, add=True)
        self.by_cq[cq][wl.name] = aw
        bisect.insort(self.ordered[cq], aw, key=_VICTIM_ORDER)
        self.tree.add_usage(self.tree.cqs[cq], usage)
        self.why.pop(wl.name, None)
        if wl.user is not None:
            key = (wl.queue, wl.user)
            self._user_admitted[key] = self._user_admitted.get(key, 0) + 1
        self._bump(cq)

    def _take_back(self, name: str) -> AdmittedWorkload:
        """Remove ``name`` from the admitted set: its quota and its nodes are free again."""
        aw = self.admitted.pop(name)
        self._index(aw, add=False)
        del self.by_cq[aw.cluster_queue][name]
        ordered = self.ordered[aw.cluster_queue]
        del ordered[bisect.bisect_left(ordered, aw.victim_order, key=_VICTIM_ORDER)]
        self.tree.remove_usage(self.tree.cqs[aw.cluster_queue], aw.usage)
        if self.pool is not None and aw.placement is not None:
            self.pool.release(aw.workload, aw.placement)
        if aw.workload.user is not None:
            self._user_admitted[(aw.workload.queue, aw.workload.user)] -= 1
        return aw

    def finish(self, name: str) -> None:
        """``name`` has completed: give back its quota and nodes; it does not queue again."""
        if name not in self.admitted:
            raise InvalidValue(f"workload {name}", "is not admitted, so it cannot finish")
        aw = self._take_back(name)
        self.why.pop(name, None)
        self._bump(aw.cluster_queue)

    def requeue(self, name: str, reason: Reason) -> None:
        """``name`` lost its nodes outside admission (a node failed or left): give back its
        quota and devices and queue it again with its original creation time. Not a preemption,
        so it is not listed in :attr:`evictions`. ``reason`` is one of
        :data:`~gpuaas.engine.reasons.REQUEUE_CODES`."""
        if name not in self.admitted:
            raise InvalidValue(f"workload {name}", "is not admitted, so it cannot be requeued")
        aw = self._take_back(name)
        self._enqueue(aw.cluster_queue, aw.workload)
        self.why[name] = reason
        self._bump(aw.cluster_queue)

    def nodes_changed(self, changes: Sequence[FleetChange] = ()) -> list[Displaced]:
        """The fleet changed: apply ``changes`` in place and take every decision that depended
        on the nodes again at the next :meth:`run`.

        Each change (:mod:`gpuaas.engine.admission.fleet_changes`: :class:`AddNode`,
        :class:`RemoveNode`, :class:`CordonNode`, :class:`RepartitionNode`) costs the changed
        node and the workloads with pods there, never a rebuild: the snapshot changes in place
        and no other admitted workload is touched. Workloads that lose a device (on a removed
        or drained node, or on a device a repartition took away) are requeued here and
        returned, so the caller can stop their pods and record why. Without ``changes`` (a
        node's capacity came back outside the engine) only the decisions are taken again. An
        unknown node is an InvalidValue; changes before it stay applied.
        """
        displaced: list[Displaced] = []
        if changes and self.pool is None:
            raise InvalidValue("nodes", "this engine was built without nodes")
        for change in changes:
            displaced.extend(self._apply_change(change))
        self._version += 1
        if self.pool is not None:
            self.pool.freed()
        return displaced

    def _apply_change(self, change: FleetChange) -> list[Displaced]:
        pool = self.pool
        assert pool is not None
        if isinstance(change, AddNode):
            pool.add_nodes([change.node])
            return []
        name = change.node.name if isinstance(change, RepartitionNode) else change.name
        try:
            i = pool.snapshot.index_of(name)
        except KeyError:
            raise InvalidValue(f"node {name}", "is not in the fleet") from None
        held = self._on(i)
        if isinstance(change, CordonNode):
            node = pool.nodes[i]
            assert node is not None
            taints = [t for t in node.taints if t != UNSCHEDULABLE]
            pool.set_taints(i, [*taints, UNSCHEDULABLE] if change.cordoned else taints)
            return (
                self._displace(i, held, reason(Code.NODE_DRAINED, nodes=[name]))
                if change.drain
                else []
            )
        if isinstance(change, RemoveNode):
            out = self._displace(
                i, held, reason(Code.NODE_REMOVED, detail=f"node {name} is no longer in the fleet")
            )
            pool.remove_node(i)
            return out
        new = change.node.to_node() if isinstance(change.node, NodeCapacity) else change.node
        snap = pool.snapshot
        keep, lost = keeps_devices(snap, new, held, lambda w: self._pods_on(w, i))
        out = self._displace(i, lost, devices_gone(name))
        hooks = reserve_hooks(pool.policy)
        for w in keep:  # give back their pods on this node, to take them again on the new one
            for p in reversed(self._pods_on(w, i)):
                snap.unreserve(p.assignment)
                if hooks is not None:
                    hooks.on_unreserve(snap, p.pod, p.assignment)
        pool.replace_node(i, new)
        late = [w for w in keep if not self._reserve_on(w, i)]
        return out + self._displace(i, late, no_room_after_repartition(name), reserved_there=False)

    def _on(self, node: int) -> list[str]:
        """Admitted workloads with a pod on ``node``, in order of admission."""
        names = self._on_node.get(node, ())
        return sorted(names, key=lambda w: self.admitted[w].sequence)

    def _pods_on(self, name: str, node: int) -> list[PodPlacement]:
        placement = self.admitted[name].placement
        assert placement is not None
        return [p for p in placement.gang.pods if p.placement.node == node]

    def _reserve_on(self, name: str, node: int) -> bool:
        """Reserve ``name``'s pods and extended resources on ``node`` again (after a
        repartition); False, with nothing of it reserved there, when they no longer fit."""
        pool = self.pool
        assert pool is not None
        placement = self.admitted[name].placement
        assert placement is not None
        hooks = reserve_hooks(pool.policy)
        done: list[PodPlacement] = []
        extended = [(r, amount) for n, r, amount in placement.extended if n == node]
        free = pool.extra_free[node]
        need: dict[str, int] = {}
        for r, amount in extended:
            need[r] = need.get(r, 0) + amount
        ok = all(free.get(r, 0) >= amount for r, amount in need.items())
        for p in self._pods_on(name, node) if ok else ():
            try:
                pool.snapshot.reserve(node, p.assignment)
            except OvercommitError:
                ok = False
                break
            if hooks is not None:
                hooks.on_reserve(pool.snapshot, p.pod, p.assignment)
            done.append(p)
        if not ok:
            for p in reversed(done):
                pool.snapshot.unreserve(p.assignment)
                if hooks is not None:
                    hooks.on_unreserve(pool.snapshot, p.pod, p.assignment)
            return False
        for r, amount in extended:
            free[r] -= amount
        return True

    def _displace(
        self, node: int, names: list[str], why: Reason, reserved_there: bool = True
    ) -> list[Displaced]:
        """Requeue ``names`` because of ``node``, giving back everything they hold; without
        ``reserved_there`` their pods on ``node`` hold nothing any more (a repartition took
        them back and :meth:`_reserve_on` could not take them again), so only the rest is."""
        out: list[Displaced] = []
        pool = self.pool
        assert pool is not None
        node_name = pool.snapshot.names[node]
        for name in names:
            aw = self.admitted[name]
            placement = aw.placement
            if placement is not None and not reserved_there:
                self._index(aw, add=False)
                aw.placement = _without_node(placement, node)
                self._index(aw, add=True)
            self.requeue(name, why)
            out.append(Displaced(name, node_name, why))
        return out

    def _index(self, aw: AdmittedWorkload, add: bool) -> None:
        """Keep :attr:`_on_node` (node index -> admitted workloads with a pod there)."""
        if aw.placement is None:
            return
        for node in {p.placement.node for p in aw.placement.gang.pods}:
            if add:
                self._on_node.setdefault(node, set()).add(aw.workload.name)
            else:
                names = self._on_node.get(node)
                if names is not None:
                    names.discard(aw.workload.name)
                    if not names:
                        del self._on_node[node]

    def evict(self, name: str, reason: EvictionReason, preemptor: str = "") -> None:
        """Take quota back from ``name`` and queue it again with its original creation time."""
        aw = self._take_back(name)
        self._enqueue(aw.cluster_queue, aw.workload)
        self.evictions.append(Eviction(name, EvictionReason(reason), preemptor, aw.sequence))
        self.why[name] = evicted(Code(reason), preemptor)
        self._bump(aw.cluster_queue)

    # --- flavor assignment ----------------------------------------------------------------

    def assign(
        self,
        wl: AdmissionWorkload,
        cq_name: str,
        simulate: bool = True,
        exclude: frozenset[tuple[str, str]] = frozenset(),
    ) -> Assignment:
        """Choose a flavor per pod set and resource group, trying flavors in order.

        Without ``simulate``, a flavor that only preemption could free is taken to be
        preemptible (an optimistic answer, good enough to rank workloads). ``exclude`` holds
        (pod set, flavor) pairs whose nodes cannot take the pod set.
        """
        cq = self.gov.cluster_queues[cq_name]
        node = self.tree.cqs[cq_name]
        fung = cq.flavor_fungibility
        out = Assignment(simulated=simulate)
        for ps in wl.pod_sets:
            total = self.quota_requests(ps, cq_name)
            groups: list[int] = []
            for resource in total:
                gi = self._group_of[cq_name].get(resource)
                if gi is None:
                    out.mode = Mode.NO_FIT
                    out.reasons.append(
                        Reason(
                            Code.RESOURCE_NOT_COVERED,
                            {"resource": resource, "cluster_queue": cq_name},
                        )
                    )
                    return out
                if gi not in groups:
                    groups.append(gi)
            chosen: dict[str, str] = {}
            for gi in sorted(groups):
                group = cq.resource_groups[gi]
                request = {r: total[r] for r in group.covered_resources if r in total}
                keys = self._label_keys[cq_name][gi]
                selector = {k: v for k, v in ps.node_selector.items() if k in keys}
                best: tuple[Mode, int, str, set[FlavorResource]] | None = None
                for fq in group.flavors:
                    flavor = self.gov.flavors[fq.name]
                    if exclude and (ps.name, fq.name) in exclude:
                        out.reasons.append(
                            Reason(Code.FLAVOR_NODES_FULL, {"pod_set": ps.name, "flavor": fq.name})
                        )
                        continue
                    if flavor.node_taints and not tolerated(
                        flavor.node_taints, (*ps.tolerations, *flavor.tolerations)
                    ):
                        out.reasons.append(
                            Reason(Code.FLAVOR_TAINT_UNTOLERATED, {"flavor": fq.name})
                        )
                        continue
                    if any(flavor.node_labels.get(k) != v for k, v in selector.items()):
                        out.reasons.append(
                            Reason(
                                Code.FLAVOR_SELECTOR_MISMATCH,
                                {"flavor": fq.name, "pod_set": ps.name},
                            )
                        )
                        continue
                    if flavor.topology_name is not None and not _offers_level(self.gov, flavor, ps):
                        out.reasons.append(
                            Reason(
                                Code.FLAVOR_TOPOLOGY_LEVEL_MISSING,
                                {
                                    "flavor": fq.name,
                                    "topology": flavor.topology_name,
                                    "level": ps.topology.level.short if ps.topology else "",
                                    "pod_set": ps.name,
                                },
                            )
                        )
                        continue
                    mode, borrow, fit_borrow = Mode.FIT, 0, 0
                    need: dict[FlavorResource, int] = {}
                    for resource, amount in request.items():
                        fr = (fq.name, resource)
                        value = out.usage.get(fr, 0) + amount
                        m, b = self._fits_quota(cq_name, node, fr, value, out.reasons)
                        mode = min(mode, m)
                        borrow = max(borrow, b)
                        if m != Mode.FIT:
                            need[fr] = value
                        else:
                            fit_borrow = max(fit_borrow, b)
                        if mode == Mode.NO_FIT:
                            break
                    if mode == Mode.PREEMPT and simulate:
                        mode, after = self._preemption_mode(wl, cq_name, need)
                        if mode == Mode.NO_FIT:
                            out.reasons.append(NO_PREEMPTION_POSSIBLE)
                        else:  # a flavor is ranked by what it borrows once the victims are gone
                            borrow = max(fit_borrow, after)
                    elif mode == Mode.PREEMPT:
                        # not simulated: assume the victims free all borrowing, the least it can
                        # be, so that a fit elsewhere wins only if it also wins after simulation
                        borrow = fit_borrow
                    if mode == Mode.NO_FIT:
                        continue
                    if best is None or _preferred((mode, borrow), best[:2], fung):
                        best = (mode, borrow, fq.name, set(need))
                    if not _should_try_next(mode, borrow, fung):
                        break
                if best is None:
                    out.mode = Mode.NO_FIT
                    return out
                mode, borrow, flavor_name, need = best
                out.mode = min(out.mode, mode)
                out.borrow = max(out.borrow, borrow)
                out.need_preemption |= need
                for resource, amount in request.items():
                    chosen[resource] = flavor_name
                    fr = (flavor_name, resource)
                    out.usage[fr] = out.usage.get(fr, 0) + amount
            out.flavors[ps.name] = chosen
        return out

    def _fits_quota(
        self,
        cq_name: str,
        node: QuotaNode,
        fr: FlavorResource,
        value: int,
        reasons: list[Reason | Cause],
    ) -> tuple[Mode, int]:
        """FIT, NO_FIT, or PREEMPT meaning "only preemption could help" (checked by the caller)."""
        tree = self.tree
        available = tree.available(node, fr)
        capacity = tree.potential_available(node, fr)
        if value > capacity:
            reasons.append((_CAPACITY, (cq_name, fr[0], fr[1], value, capacity)))
            return Mode.NO_FIT, 0
        borrow, may_reclaim = tree.borrow_height(node, fr, value)
        if value <= available:
            return Mode.FIT, borrow
        lend = tree.lendable_from_cohort(node, fr) if node.parent is not None else None
        reasons.append(  # unused_quota_short(...) as a bare cause: the hot path of a full queue
            (
                _UNUSED,
                (fr[0], fr[1], value - available, node.parent.name if node.parent else None, lend),
            )
        )
        # Kueue tries preemption only when the request fits the queue's nominal quota, when a
        # subtree below the root could hold it (hierarchical reclaim), or when the queue may
        # preempt while borrowing (borrowWithinCohort, or fair sharing with reclaim enabled)
        policy = self.gov.cluster_queues[cq_name].preemption
        if not (
            node.nominal.get(fr, 0) >= value
            or may_reclaim
            or policy.borrow_within_cohort == BorrowWithinCohortPolicy.LOWER_PRIORITY
            or (
                self.config.fair_sharing
                and policy.reclaim_within_cohort != ReclaimWithinCohort.NEVER
            )
        ):
            return Mode.NO_FIT, borrow
        return Mode.PREEMPT, borrow

    def _preemption_mode(
        self, wl: AdmissionWorkload, cq_name: str, request: dict[FlavorResource, int]
    ) -> tuple[Mode, int]:
        """Whether preempting could make room for ``request``: RECLAIM (only other queues'
        borrowers), PREEMPT (some of the queue's own workloads) or NO_FIT (no victim set); and
        how far the workload would borrow once the victims are gone (Kueue ranks flavors by
        that)."""
        # Equivalent attempts (same queue, rank and request) on an unchanged cohort tree give
        # the same answer: remember it, so a full queue does not re-simulate for every workload.
        policy = self.gov.cluster_queues[cq_name].preemption
        newer = policy.within_cluster_queue == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        key = (cq_name, wl.priority, wl.created if newer else None, tuple(sorted(request.items())))
        state = self._tree(cq_name)
        cached = self._preempt_cache.get(key)
        if cached is not None and cached[0] == state:
            return cached[1], cached[2]
        targets = self.preemptor.targets(wl, cq_name, request, set(request))
        borrow = 0
        if not targets:
            mode = Mode.NO_FIT
        else:
            mode = (
                Mode.RECLAIM
                if all(t.cluster_queue != cq_name for t, _ in targets)
                else Mode.PREEMPT
            )
            tree = self.tree
            node = tree.cqs[cq_name]
            for victim, _ in targets:
                tree.remove_usage(tree.cqs[victim.cluster_queue], victim.usage)
            for fr, value in request.items():
                borrow = max(borrow, tree.borrow_height(node, fr, value)[0])
            for victim, _ in targets:
                tree.add_usage(tree.cqs[victim.cluster_queue], victim.usage)
        self._preempt_cache[key] = (state, mode, borrow)
        return mode, borrow

    # --- outputs --------------------------------------------------------------------------

    def pending_names(self) -> list[str]:
        return sorted(name for pending in self.pending.values() for name in pending)


def quota_charge(
    ps: AdmissionPodSet,
    covered: Mapping[str, int] | None,
    transformations: Mapping[str, ResourceTransformation] | None = None,
) -> dict[str, int]:
    """What pod set ``ps`` is charged in quota in a ClusterQueue covering the resources
    ``covered`` (resource -> its resource group; None: no ClusterQueue), with the config's
    ``transformations``: the rule of :meth:`AdmissionEngine.quota_requests`, as a function so
    the service can report a ClusterQueue's usage from stored jobs by the same rule."""
    by_size = covered is not None and GPU_MILLI in covered
    out: dict[str, int] = {}
    for resource, amount in ps.requests.items():
        if amount <= 0:
            continue
        t = transformations.get(resource) if transformations else None
        if by_size and is_gpu_device(resource):
            size = MILLI if resource == NVIDIA_GPU else mig_milli(resource)
            out[GPU_MILLI] = out.get(GPU_MILLI, 0) + amount * ps.count * size
            if t is None and resource not in covered:  # type: ignore[operator]
                continue
        if t is None or t.retain:
            out[resource] = out.get(resource, 0) + amount * ps.count
        if t is not None:
            for name, value in t.apply(amount * ps.count).items():
                out[name] = out.get(name, 0) + value
    if ps.network is not None and covered is not None:
        resource = quota_resource(ps.network)
        vfs = vfs_per_pod(ps.network, ps.requests) * ps.count
        if vfs and resource in covered:
            out[resource] = out.get(resource, 0) + vfs
    return out
