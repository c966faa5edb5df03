"""Fleet strategies: queueing on a fleet without quotas, by one of three queue policies.

- ``default`` (gpuaas): priority first, then the tenant furthest below its fair share (milli-GPU
  running / weight), then creation; a workload that does not fit is passed over (Kueue's
  BestEffortFIFO) unless it has waited ``reserve_after`` seconds, in which case it gets an EASY
  reservation (below) so large gangs do not starve; a workload may preempt lower-priority
  running ones (lowest priority, most recently started first);
- ``fifo``: strict creation order, the head blocks everything behind it (no backfill);
- ``backfill``: creation order with EASY backfill (Slurm's default): the head that does not fit
  gets a reservation at the earliest time enough GPUs free up by the running workloads' declared
  limits; a later workload may start now only if it ends (by its declared limit) before that
  time or uses only GPUs the head will not need.

Whole-GPU heads are planned per node: the head fits when the nodes' free GPUs hold its pods
(sum of floor(free / per-pod GPUs) >= pods), so a gang is not promised GPUs scattered over
half-empty nodes. Other shapes are planned by GPU count.

Lean by construction: a cycle only looks at the whole queue when capacity was freed since the
last one, otherwise only at the workloads that just arrived; a workload is not even tried when
one of the same shape that is no larger already failed since capacity was last freed (whole-GPU
pods: if g GPUs fit nowhere, g' >= g do not either). Every placement and every put-back goes
through :func:`~gpuaas.engine.gang.place_workload`, :func:`~gpuaas.engine.gang.release` and
:func:`~gpuaas.engine.gang.reserve` on the strategy's snapshot.

Why a workload waits is a :class:`~gpuaas.engine.reasons.Reason`: a placement failure's code
and sentence, ``InsufficientGpu`` ("no free GPU") when nothing is free, ``FIFOBlocked`` behind a
blocked head, ``WouldDelayHead`` under backfill, ``PriorityPreemption`` after an eviction, the
requeue's cause after a lost node.

The fleet changes in place (:meth:`FleetScheduler.nodes_changed`, the typed changes of
:mod:`gpuaas.engine.admission.fleet_changes`) as it does under admission: a node added is free
at once, a removed or drained node's workloads are requeued and reported as
:class:`~gpuaas.engine.admission.Displaced`, a repartition keeps the workloads whose devices
still exist in the same form. A failed node is not a change of the fleet: it is *down*, held
(:class:`~gpuaas.engine.scheduling.holds.NodeHolds`) until it is *up* again.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType

import numpy as np

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
from gpuaas.engine.admission.nodes import NodeCapacity
from gpuaas.engine.gang import (
    GangPlacement,
    PodPlacement,
    release,
    reserve,
)
from gpuaas.engine.locality import DEFAULT_WEIGHT, DatasetKey, WarmSets, place_reading
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies.base import Policy
from gpuaas.engine.reasons import (
    FIFO_BLOCKED,
    WOULD_DELAY_HEAD,
    Code,
    Reason,
    placement_failed,
    reason,
)
from gpuaas.engine.scheduling.decisions import Admitted, Decisions, Evicted, Request
from gpuaas.engine.scheduling.holds import NodeHolds
from gpuaas.engine.snapshot import OvercommitError, Snapshot
from gpuaas.model.dataset import DataLocality
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import UNSCHEDULABLE, Node
from gpuaas.model.workload import TopologyMode, Workload

QUEUED, RUNNING, GONE = 1, 2, 3
#: the eviction reason of a priority preemption
PRIORITY_PREEMPTION = Code.PRIORITY_PREEMPTION.value
#: why a workload waits when no GPU is free at all (not even tried)
NO_FREE_GPU = placement_failed(Code.INSUFFICIENT_GPU, "no free GPU")
SAME_SHAPE_FAILED = "does not fit; a job of the same shape and no larger did not"
#: a placement failure known from a workload of the same shape and no larger, with its reason
Failed = tuple[int, int, Reason]


class QueuePolicy(StrEnum):
    DEFAULT = "default"
    FIFO = "fifo"
    BACKFILL = "backfill"


def shape_key(workload: Workload) -> tuple[object, int, int]:
    """(key, per-pod GPUs, pods): workloads with the same key are comparable by size. A
    workload that requires its dataset warm is comparable with none (the warm sets differ)."""
    if workload.data is not None and workload.data.locality is DataLocality.REQUIRED:
        return (("data", workload.name), 0, 0)
    if len(workload.pod_sets) == 1:
        ps = workload.pod_sets[0]
        pod = ps.pod
        simple = not (pod.gpu_milli or pod.mig or pod.replicas or pod.claims)
        if simple and (ps.topology is None or ps.topology.mode is TopologyMode.PREFERRED):
            return (dataclasses.replace(pod, gpus=0), pod.gpus, ps.count)
    return (tuple((ps.count, ps.pod, ps.topology) for ps in workload.pod_sets), 0, 0)


class FleetScheduler:
    """A :class:`~gpuaas.engine.scheduling.Scheduler` over ``nodes`` by a queue policy.

    ``policy`` chooses nodes and devices; ``rng`` is the caller's random stream (placement
    draws from it, so a run is reproducible from one seed).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        policy: Policy,
        queue_policy: QueuePolicy = QueuePolicy.DEFAULT,
        reserve_after: float = 3600.0,
        preemption: bool = True,
        tenant_weights: Mapping[str, float] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if reserve_after < 0:
            raise InvalidValue("reserve_after", "must be >= 0")
        self.snapshot = Snapshot.from_nodes(nodes)
        self.holds = NodeHolds(self.snapshot)
        self.policy = policy
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.queue_policy = QueuePolicy(queue_policy)
        self.reserve_after = reserve_after
        self.preemption = preemption
        self.tenant_weights = dict(tenant_weights or {})
        # per workload, by the number it got at its first submission
        self.index: dict[str, int] = {}
        self.requests: list[Request] = []
        self.milli: list[int] = []
        self.prio: list[int] = []
        self.shape: list[tuple[object, int, int]] = []
        self.limit: list[float] = []
        self.state: list[int] = []
        self.placement: list[GangPlacement | None] = []
        self.run_start: list[float] = []
        self.reasons: dict[str, Reason] = {}
        self.running: set[int] = set()
        #: node index -> running workloads with a pod there
        self.on_node: dict[int, set[int]] = {}
        self.running_prio: dict[int, int] = {}
        self.tenant_milli: dict[str, int] = {}
        self.weight: dict[str, float] = {}
        self.queues: dict[str, list[tuple[tuple[float, ...], int]]] = {}
        self.queued = 0
        self.new: list[int] = []
        self.freed = True
        self.blocked = False
        self.shadow = math.inf
        self.extra = 0
        self.shadow_free: np.ndarray | None = None
        self.head_shape: tuple[object, int, int] = ((), 0, 0)
        self.failed_shapes: dict[object, list[Failed]] = {}
        #: shapes that would delay the reserved head (same dominance rule), until the next reset
        self.bf_failed: dict[object, list[Failed]] = {}
        self._admitted: list[Admitted] = []
        self._evicted: list[Evicted] = []
        self.waiting = MappingProxyType(self.reasons)
        #: where each dataset is warm (see gpuaas.engine.locality); kept by the driver
        self.warm = WarmSets(self.snapshot._name_index)
        self.locality_weight = DEFAULT_WEIGHT

    # ------------------------------------------------------------------ inputs
    def submit(self, request: Request, now: float) -> None:
        if request.name in self.index:
            raise InvalidValue(f"workload {request.name}", "name is used twice")
        i = len(self.requests)
        self.index[request.name] = i
        self.requests.append(request)
        self.milli.append(request.milli_gpu)
        self.prio.append(request.priority)
        self.shape.append(shape_key(request.workload))
        self.limit.append(request.limit)
        self.state.append(GONE)
        self.placement.append(None)
        self.run_start.append(0.0)
        tenant = request.queue
        if tenant not in self.weight:
            weight = self.tenant_weights.get(tenant, 1.0)
            if weight <= 0:
                raise InvalidValue("tenant_weights", "weights must be > 0")
            self.weight[tenant] = weight
            self.tenant_milli[tenant] = 0
        self._enqueue(i)

    def finish(self, name: str) -> None:
        i = self.index[name]
        if self.state[i] != RUNNING:
            raise InvalidValue(f"workload {name}", "is not running, so it cannot finish")
        self._stop(i)
        self.state[i] = GONE

    def requeue(self, name: str, cause: Reason) -> None:
        i = self.index[name]
        if self.state[i] != RUNNING:
            raise InvalidValue(f"workload {name}", "is not running, so it cannot be requeued")
        self._stop(i)
        self._enqueue(i)
        self.reasons[name] = cause

    def declare(self, name: str, limit: float) -> None:
        self.limit[self.index[name]] = limit

    def withdraw(self, name: str) -> bool:
        i = self.index.get(name)
        if i is None or self.state[i] != QUEUED:
            return False
        self._dequeue(i)
        self.state[i] = GONE
        self.reasons.pop(name, None)
        return True

    def nodes_changed(
        self,
        changes: Sequence[FleetChange] = (),
        down: Iterable[str] = (),
        up: Iterable[str] = (),
    ) -> list[Displaced]:
        displaced: list[Displaced] = []
        if not changes and not down and not up:
            self.freed = True  # capacity changed outside: look at the whole queue again
        for change in changes:
            displaced.extend(self._apply_change(change))
        for name in down:
            self.holds.hold(self._node(name))
        for name in up:
            self.holds.release(self._node(name))
            self.freed = True
        return displaced

    # ------------------------------------------------------------------ fleet changes
    def _node(self, name: str) -> int:
        try:
            return self.snapshot.index_of(name)
        except KeyError:
            raise InvalidValue(f"node {name}", "is not in the fleet") from None

    def _apply_change(self, change: FleetChange) -> list[Displaced]:
        """One change in place (see the module docstring); what it displaced."""
        snap = self.snapshot
        if isinstance(change, AddNode):
            node = change.node
            added = node.to_node() if isinstance(node, NodeCapacity) else node
            snap.add_nodes([added])
            self.warm.add_node(added.name)
            self.freed = True
            return []
        name = change.node.name if isinstance(change, RepartitionNode) else change.name
        n = self._node(name)
        if isinstance(change, CordonNode):
            taints = [t for t in snap.taints[n] if t != UNSCHEDULABLE]
            snap.set_taints(n, [*taints, UNSCHEDULABLE] if change.cordoned else taints)
            self.freed = self.freed or not change.cordoned
            if not change.drain:
                return []
            return self._displace(n, self._on(n), reason(Code.NODE_DRAINED, nodes=[name]))
        if isinstance(change, RemoveNode):
            why = reason(Code.NODE_REMOVED, detail=f"node {name} is no longer in the fleet")
            out = self._displace(n, self._on(n), why)
            if n in self.holds:
                self.holds.release(n)
            snap.remove_node(n)
            self.warm.forget_node(name)
            return out
        new = change.node.to_node() if isinstance(change.node, NodeCapacity) else change.node
        return self._repartition(n, new)

    def _on(self, node: int) -> list[int]:
        """Running workloads with a pod on ``node``, in order of submission."""
        return sorted(self.on_node.get(node, ()))

    def _part(self, i: int, node: int, on: bool = True) -> GangPlacement:
        """Workload ``i``'s pods on ``node`` (``on``) or elsewhere, as a placement of their own
        (to give back or take again through :func:`release` and :func:`reserve`)."""
        placed = self.placement[i]
        assert placed is not None
        pods = tuple(p for p in placed.pods if (p.placement.node == node) is on)
        return GangPlacement(placed.workload, pods)

    def _take_again(self, part: GangPlacement) -> bool:
        """Reserve ``part`` again, all of it or (False) nothing."""
        done: list[PodPlacement] = []
        for p in part.pods:
            try:
                reserve(self.snapshot, GangPlacement(part.workload, (p,)), self.policy)
            except OvercommitError:
                release(self.snapshot, GangPlacement(part.workload, tuple(done)), self.policy)
                return False
            done.append(p)
        return True

    def _displace(
        self, node: int, workloads: list[int], why: Reason, released: bool = False
    ) -> list[Displaced]:
        """Requeue ``workloads`` because of ``node``; with ``released`` their pods on ``node``
        already hold nothing (a repartition took them), so only the rest is given back."""
        out = []
        node_name = self.snapshot.names[node]
        for i in workloads:
            if released:
                release(self.snapshot, self._part(i, node, on=False), self.policy)
            self._stop(i, release_devices=not released)
            self._enqueue(i)
            name = self.requests[i].name
            self.reasons[name] = why
            out.append(Displaced(name, node_name, why))
        return out

    def _repartition(self, node: int, new: Node) -> list[Displaced]:
        """Node ``node`` takes the facts of ``new``: a workload keeps its pods there when every
        device it holds still exists in the same form (and the cpu and memory are still there);
        the others are displaced."""
        snap = self.snapshot
        name = snap.names[node]
        kept, lost = keeps_devices(snap, new, self._on(node), lambda i: self._part(i, node).pods)
        out = self._displace(node, lost, devices_gone(name))
        parts = [self._part(i, node) for i in kept]
        for part in parts:  # give back their pods on this node, to take them again on the new one
            release(snap, part, self.policy)
        was_down = node in self.holds
        if was_down:
            self.holds.release(node)
        snap.replace_node(node, new)
        late = [i for i, part in zip(kept, parts, strict=True) if not self._take_again(part)]
        if was_down:
            self.holds.hold(node)
        self.freed = True
        return out + self._displace(node, late, no_room_after_repartition(name), released=True)

    # ------------------------------------------------------------------ queue
    def _key(self, i: int) -> tuple[float, ...]:
        if self.queue_policy is QueuePolicy.DEFAULT:
            return (-self.prio[i], self.requests[i].created, i)
        return (self.requests[i].created, i)

    def _queue_of(self, i: int) -> str:
        return self.requests[i].queue if self.queue_policy is QueuePolicy.DEFAULT else "*"

    def _enqueue(self, i: int) -> None:
        self.state[i] = QUEUED
        bisect.insort(self.queues.setdefault(self._queue_of(i), []), (self._key(i), i))
        self.queued += 1
        self.new.append(i)

    def _dequeue(self, i: int) -> None:
        q = self.queues[self._queue_of(i)]
        k = bisect.bisect_left(q, (self._key(i), i))
        del q[k]
        self.queued -= 1

    def _order(self, only: list[int] | None) -> Iterator[int]:
        """Queued workloads in policy order (``only``: just these, e.g. the new arrivals)."""
        state = self.state
        if only is not None:
            for _, i in sorted((self._key(i), i) for i in only):
                if state[i] == QUEUED:
                    yield i
            return
        if len(self.queues) <= 1 or self.queue_policy is not QueuePolicy.DEFAULT:
            for q in self.queues.values():
                for _, i in list(q):
                    if state[i] == QUEUED:
                        yield i
            return
        # Several tenants: by priority, then the tenant furthest below its fair share.
        snapshot = {t: list(q) for t, q in self.queues.items() if q}
        pos = dict.fromkeys(snapshot, 0)
        while True:
            best: tuple[float, ...] | None = None
            best_t = ""
            for t, q in snapshot.items():
                p = pos[t]
                if p >= len(q):
                    continue
                key, _ = q[p]
                rank = (key[0], self.tenant_milli[t] / self.weight[t], key[1])
                if best is None or rank < best:
                    best, best_t = rank, t
            if best is None:
                return
            _, i = snapshot[best_t][pos[best_t]]
            pos[best_t] += 1
            if state[i] == QUEUED:
                yield i

    # ------------------------------------------------------------------ run state
    def _free_milli(self) -> int:
        return int(self.snapshot.model_free_milli.sum())

    def _start(self, i: int, placed: GangPlacement, t: float) -> None:
        self._dequeue(i)
        self.state[i] = RUNNING
        self.placement[i] = placed
        self.run_start[i] = t
        self.running.add(i)
        for node in placed.nodes:
            self.on_node.setdefault(node, set()).add(i)
        self.tenant_milli[self.requests[i].queue] += self.milli[i]
        p = self.prio[i]
        self.running_prio[p] = self.running_prio.get(p, 0) + 1
        self.reasons.pop(self.requests[i].name, None)
        self._admitted.append(Admitted(self.requests[i].name, placed))

    def _stop(self, i: int, release_devices: bool = True) -> None:
        placed = self.placement[i]
        assert placed is not None
        if release_devices:
            release(self.snapshot, placed, self.policy)
        for node in placed.nodes:
            on = self.on_node.get(node)
            if on is not None:
                on.discard(i)
                if not on:
                    del self.on_node[node]
        self.placement[i] = None
        self.running.discard(i)
        self.tenant_milli[self.requests[i].queue] -= self.milli[i]
        p = self.prio[i]
        self.running_prio[p] -= 1
        if not self.running_prio[p]:
            del self.running_prio[p]
        self.freed = True

    # ------------------------------------------------------------------ the cycle
    def _known_to_fail(
        self, i: int, cache: dict[object, list[Failed]] | None = None
    ) -> Reason | None:
        """Why a workload of the same shape and no larger failed (since the last reset), as
        this one is told."""
        key, g, c = self.shape[i]
        failed = (self.failed_shapes if cache is None else cache).get(key)
        if not failed:
            return None
        for fg, fc, why in failed:
            if (g == 0 and c == 0) or (fg <= g and fc <= c):
                return why
        return None

    def _try(self, i: int) -> GangPlacement | None:
        name = self.requests[i].name
        known = self._known_to_fail(i)
        if known is not None:
            self.reasons[name] = known
            return None
        result = self._place(i)
        if isinstance(result, Unschedulable):
            key, g, c = self.shape[i]
            cause = result.cause()
            same = cause.with_fields(detail=f"{SAME_SHAPE_FAILED}: {result.reason}")
            self.failed_shapes.setdefault(key, []).append((g, c, same))
            self.reasons[name] = cause
            return None
        return result

    def _place(self, i: int) -> GangPlacement | Unschedulable:
        request = self.requests[i]
        return place_reading(
            self.snapshot,
            request.workload,
            self.policy,
            self.warm,
            request.queue,
            weight=self.locality_weight,
            rng=self.rng,
        )

    def datasets_changed(self, warm: Mapping[DatasetKey, Iterable[str]]) -> None:
        """Where datasets are warm now (each given dataset's whole warm set; see
        :mod:`gpuaas.engine.locality`): the next cycle looks at the whole queue again."""
        if self.warm.update(warm):
            self.freed = True

    def _whole_gpus_by_node(self, placed: GangPlacement) -> list[tuple[int, int]]:
        return [
            (p.placement.node, sum(1 for _, m in p.assignment.gpu_milli if m == 1000))
            for p in placed.pods
        ]

    def _head_fits(self, free: np.ndarray) -> bool:
        """Would the reserved head fit on ``free`` (whole free GPUs per node)?"""
        _, g, c = self.head_shape
        return int((free // g).sum()) >= c

    def _reserve_head(self, i: int, t: float) -> None:
        """EASY reservation for workload ``i``: the earliest time (by the running workloads'
        declared limits) it fits, and what the fleet looks like then."""
        self.blocked = True
        self.head_shape = self.shape[i]
        ends = sorted((self.run_start[j] + self.limit[j], j) for j in self.running)
        _, g, _ = self.head_shape
        if g > 0:
            free = self.snapshot.full_free.copy()
            if self._head_fits(free):
                self.shadow, self.shadow_free = t, free
                return
            for end, j in ends:
                placed = self.placement[j]
                assert placed is not None
                for node, k in self._whole_gpus_by_node(placed):
                    free[node] += k
                if self._head_fits(free):
                    self.shadow, self.shadow_free = max(end, t), free
                    return
            self.shadow, self.shadow_free = math.inf, free
            return
        self.shadow_free = None
        need = self.milli[i]
        free_milli = self._free_milli()
        if free_milli >= need:
            self.shadow, self.extra = t, free_milli - need
            return
        for end, j in ends:
            free_milli += self.milli[j]
            if free_milli >= need:
                self.shadow, self.extra = max(end, t), free_milli - need
                return
        self.shadow, self.extra = math.inf, 0

    def _backfill_ok(self, i: int, placed: GangPlacement) -> bool:
        """May workload ``i``, placed as ``placed`` and running past the shadow time, start?"""
        if self.shadow_free is not None:
            after = self.shadow_free.copy()
            for node, k in self._whole_gpus_by_node(placed):
                after[node] -= k
            if self._head_fits(after):
                self.shadow_free = after
                return True
            return False
        if self.milli[i] <= self.extra:
            self.extra -= self.milli[i]
            return True
        return False

    def _can_preempt(self, i: int) -> bool:
        return (
            self.preemption
            and self.queue_policy is QueuePolicy.DEFAULT
            and bool(self.running_prio)
            and min(self.running_prio) < self.prio[i]
        )

    def _preempt_for(self, i: int, t: float) -> bool:
        """Evict lower-priority workloads (lowest priority, most recently started first) until
        ``i`` fits; if it never does, reserve them again exactly as they were."""
        p = self.prio[i]
        victims = sorted(
            (self.prio[j], -self.run_start[j], j) for j in self.running if self.prio[j] < p
        )
        if self._free_milli() + sum(self.milli[j] for *_, j in victims) < self.milli[i]:
            return False
        released: list[int] = []
        preemptor = self.requests[i].name
        for *_, j in victims:
            placed = self.placement[j]
            assert placed is not None
            release(self.snapshot, placed, self.policy)
            released.append(j)
            result = self._place(i)
            if isinstance(result, GangPlacement):
                for v in released:
                    self._stop(v, release_devices=False)
                    self._enqueue(v)
                    name = self.requests[v].name
                    self.reasons[name] = reason(Code.PRIORITY_PREEMPTION, preemptor=preemptor)
                    self._evicted.append(Evicted(name, PRIORITY_PREEMPTION, preemptor))
                self._start(i, result, t)
                self.failed_shapes.clear()
                return True
        for j in reversed(released):
            placed = self.placement[j]
            assert placed is not None
            reserve(self.snapshot, placed, self.policy)
        return False

    def cycle(self, now: float) -> Decisions:
        self._admitted, self._evicted = [], []
        self._schedule(now)
        return Decisions(now, tuple(self._admitted), tuple(self._evicted), self.waiting)

    def _schedule(self, t: float) -> None:
        if not self.queued:
            self.new.clear()
            return
        if self.freed:
            self.freed = False
            self.failed_shapes.clear()
            self.blocked = False
            self.shadow, self.extra, self.shadow_free = math.inf, 0, None
            self.bf_failed.clear()
            candidates = self._order(None)
        elif self.new:
            candidates = self._order(self.new)
        else:
            return
        self.new = []
        qp = self.queue_policy
        guard = self.reserve_after
        reasons = self.reasons
        for i in candidates:
            if self.state[i] != QUEUED:
                continue
            name = self.requests[i].name
            if self.milli[i] and self._free_milli() <= 0 and not self._can_preempt(i):
                reasons.setdefault(name, NO_FREE_GPU)
                if qp is QueuePolicy.FIFO:
                    self.blocked = True
                    break
                continue
            ends_before = False
            if self.blocked:
                if qp is QueuePolicy.FIFO:
                    reasons.setdefault(name, FIFO_BLOCKED)
                    break
                ends_before = t + self.limit[i] <= self.shadow
                if not ends_before and (
                    (self.shadow_free is None and self.milli[i] > self.extra)
                    or self._known_to_fail(i, self.bf_failed) is not None
                ):
                    reasons[name] = WOULD_DELAY_HEAD
                    continue
            placed = self._try(i)
            if placed is not None:
                if self.blocked and not ends_before and not self._backfill_ok(i, placed):
                    release(self.snapshot, placed, self.policy)
                    key, g, c = self.shape[i]
                    self.bf_failed.setdefault(key, []).append((g, c, WOULD_DELAY_HEAD))
                    reasons[name] = WOULD_DELAY_HEAD
                    continue
                self._start(i, placed, t)
                continue
            if self._can_preempt(i) and self._preempt_for(i, t):
                continue
            if not self.blocked:
                if qp is QueuePolicy.FIFO:
                    self.blocked = True
                    break
                if qp is QueuePolicy.BACKFILL or t - self.requests[i].created >= guard:
                    self._reserve_head(i, t)
