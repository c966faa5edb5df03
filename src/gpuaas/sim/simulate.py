"""The simulator: replay a trace through the engine on a virtual clock.

The loop owns time and drives only the engine (:func:`~gpuaas.engine.gang.place_workload` and
:func:`~gpuaas.engine.gang.release` on a :class:`~gpuaas.engine.snapshot.Snapshot`). Events:
arrivals (read in order from the sorted trace, not pushed to the heap), finishes, priority
preemptions, node failures and repairs, and fleet scale events. After every batch of events at
one instant a scheduling pass starts what it can, in the order of the queue policy:

- ``default`` (gpuaas): priority first, then the tenant furthest below its fair share, then
  arrival; a job that does not fit is passed over (Kueue's BestEffortFIFO) unless it has waited
  ``reserve_after`` seconds, in which case it gets an EASY reservation (see below) so large jobs
  do not starve; a job may preempt lower-priority running jobs;
- ``fifo``: strict arrival order, the head blocks everything behind it (no backfill);
- ``backfill``: arrival order with EASY backfill (Slurm's default): the head that does not fit
  gets a reservation at the earliest time enough GPUs free up by the running jobs' declared
  limits; a later job may start now only if it ends (by its declared limit) before that time or
  uses only GPUs the head will not need.

Lean by construction: a pass only looks at the whole queue when capacity was freed since the
last one, otherwise only at the jobs that just arrived; a job is not even tried when a job of
the same shape that is no larger already failed since capacity was last freed (whole-GPU pods:
if g GPUs fit nowhere, g' >= g do not either).

Accounting (checked by the tests): for every run of a job, allocated GPU-seconds = kept work
(served) + work thrown away by an eviction (lost to restart); the allocated total equals the
integral of the snapshot's allocated GPUs over time.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from gpuaas.engine.framework import PodShape
from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import TaskMix, make_policy
from gpuaas.engine.policies.base import Policy
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.model.topology import Level
from gpuaas.model.workload import TopologyMode, Workload
from gpuaas.sim.events import Clock, Event, EventKind, EventQueue
from gpuaas.sim.traces import SimJob

FUTURE, QUEUED, RUNNING, FINISHED = 0, 1, 2, 3
STATUS_NAMES = ("future", "queued", "running", "finished")


class QueuePolicy(StrEnum):
    DEFAULT = "default"
    FIFO = "fifo"
    BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """``node`` (a name) fails at ``at`` and comes back ``down_for`` seconds later."""

    at: float
    node: str
    down_for: float


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """At ``at``, add (``delta > 0``) or remove (``delta < 0``, draining them) that many nodes."""

    at: float
    delta: int


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a run depends on besides the fleet and the trace."""

    policy: str = "gpuaas"
    queue_policy: QueuePolicy = QueuePolicy.DEFAULT
    seed: int = 0
    reserve_after: float = 3600.0
    preemption: bool = True
    mtbf: float = 0.0  # per-node mean time between failures, seconds (0 = no random failures)
    mttr: float = 3600.0
    failures: tuple[NodeFailure, ...] = ()
    scale: tuple[ScaleEvent, ...] = ()
    until: float | None = None
    tenant_weights: dict[str, float] = field(default_factory=dict, hash=False)

    def validate(self) -> None:
        if self.reserve_after < 0:
            raise InvalidValue("reserve_after", "must be >= 0")
        if self.mtbf < 0 or self.mttr <= 0:
            raise InvalidValue("mtbf/mttr", "mtbf must be >= 0 and mttr > 0")
        for w in self.tenant_weights.values():
            if w <= 0:
                raise InvalidValue("tenant_weights", "weights must be > 0")


@dataclass(slots=True)
class SimResult:
    """Per-job outcome and time series of one run (see :mod:`gpuaas.sim.metrics`)."""

    jobs: list[SimJob]
    config: SimConfig
    fleet_gpus: int
    status: list[int]
    first_start: list[float]
    finish: list[float]
    wait: list[float]  # total time queued, over all runs
    restarts: list[int]
    alloc_gpu_s: list[float]
    served_gpu_s: list[float]
    lost_gpu_s: list[float]
    reasons: dict[int, str]
    series_t: list[float]
    series_alloc: list[float]  # GPUs allocated to jobs
    series_cap: list[float]  # GPUs up (not failed, not scaled away)
    series_running: list[int]
    series_queued: list[int]
    series_frag: list[float]
    alloc_integral: float  # GPU-seconds, from the snapshot
    cap_integral: float
    start_time: float
    end_time: float
    preemptions: int
    node_failures: int
    wall_seconds: float = 0.0


def _shape_key(workload: Workload) -> tuple[object, int, int]:
    """(key, per-pod GPUs, pods): jobs with the same key are comparable by size."""
    if len(workload.pod_sets) == 1:
        ps = workload.pod_sets[0]
        pod = ps.pod
        simple = not (pod.gpu_milli or pod.mig or pod.replicas or pod.claims)
        if simple and (ps.topology is None or ps.topology.mode is TopologyMode.PREFERRED):
            return (dataclasses.replace(pod, gpus=0), pod.gpus, ps.count)
    return (tuple((ps.count, ps.pod, ps.topology) for ps in workload.pod_sets), 0, 0)


def _extra_nodes(nodes: Sequence[Node], count: int) -> list[Node]:
    """``count`` copies of the fleet's nodes (cycling) under new names, for scale-up. Each
    round of copies gets racks, blocks and NVLink domains of its own (named after the
    template's, in the same zone): new servers arrive in new racks, they do not squeeze into
    full ones."""
    out = []
    for k in range(count):
        base = nodes[k % len(nodes)]
        name = f"scale-{k:05d}"
        suffix = f"-scale{k // len(nodes) + 1}"
        t = base.topology
        topology = dataclasses.replace(
            t,
            block=t.block + suffix if t.block else "",
            rack=t.rack + suffix if t.rack else "",
            nvlink_domain=t.nvlink_domain + suffix if t.nvlink_domain else "",
        )
        labels = dict(base.labels)
        for level in (Level.BLOCK, Level.RACK, Level.NVLINK):
            labels.pop(level.value, None)
        labels.update(topology.labels())
        labels[Level.HOSTNAME.value] = name
        out.append(dataclasses.replace(base, name=name, labels=labels, topology=topology))
    return out


def _max_scale_up(events: Sequence[ScaleEvent]) -> int:
    level, peak = 0, 0
    for ev in sorted(events, key=lambda e: e.at):
        level += ev.delta
        peak = max(peak, level)
    return peak


class Simulator:
    """One run; call :meth:`run` once."""

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        config: SimConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.config.validate()
        if not nodes:
            raise InvalidValue("fleet", "has no nodes")
        self.jobs = sorted(jobs, key=lambda j: j.submit)
        names = [j.name for j in self.jobs]
        if len(set(names)) != len(names):
            raise InvalidValue("trace", "job names must be unique")
        extra = _max_scale_up(self.config.scale)
        self.base_count = len(nodes)
        self.nodes = list(nodes) + _extra_nodes(nodes, extra)
        self.snap = Snapshot.from_nodes(self.nodes)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        shapes = [PodShape.of(ps.pod) for j in self.jobs for ps in j.workload.pod_sets]
        mix = TaskMix.from_shapes(shapes) if shapes else None
        self.policy: Policy = make_policy(self.config.policy, mix=mix, seed=self.config.seed)
        self.rng = np.random.default_rng(self.config.seed)
        self.progress = progress
        n = len(self.jobs)
        self.milli = [j.milli_gpu for j in self.jobs]
        self.prio = [j.priority for j in self.jobs]
        self.shape = [_shape_key(j.workload) for j in self.jobs]
        self.status = [FUTURE] * n
        self.remaining = [j.duration for j in self.jobs]
        self.run_start = [0.0] * n
        self.epoch = [0] * n
        self.placement: list[GangPlacement | None] = [None] * n
        self.first_start = [math.nan] * n
        self.finish = [math.nan] * n
        self.queued_since = [0.0] * n
        self.wait = [0.0] * n
        self.restarts = [0] * n
        self.alloc = [0.0] * n
        self.served = [0.0] * n
        self.lost = [0.0] * n
        self.reasons: dict[int, str] = {}
        self.on_node: dict[int, set[int]] = {}
        self.running: set[int] = set()
        self.tenants = sorted({j.tenant for j in self.jobs})
        self.weight = {t: self.config.tenant_weights.get(t, 1.0) for t in self.tenants}
        self.tenant_of = [j.tenant for j in self.jobs]
        self.tenant_milli = dict.fromkeys(self.tenants, 0)
        self.queues: dict[str, list[tuple[tuple[float, ...], int]]] = {}
        self.queued = 0
        self.new: list[int] = []
        self.freed = True
        self.blocked = False
        self.shadow = math.inf
        self.extra = 0
        self.shadow_free: np.ndarray | None = None
        self.head_shape: tuple[object, int, int] = ((), 0, 0)
        self.failed_shapes: dict[object, list[tuple[int, int, str]]] = {}
        #: shapes that would delay the reserved head (same dominance rule), until the next reset
        self.bf_failed: dict[object, list[tuple[int, int, str]]] = {}
        self.blockers: dict[int, Assignment] = {}
        self.blocked_milli = 0
        self.down: set[int] = set()  # failed nodes
        self.absent: list[int] = list(range(len(nodes), len(self.nodes)))
        self.capacity_adding = 0  # pending repair / scale-up events
        self.events = EventQueue()
        self.clock = Clock(self.jobs[0].submit if self.jobs else 0.0)
        self.preemptions = 0
        self.node_failures = 0
        self.running_prio: dict[int, int] = {}
        for node in self.absent:
            self._block(node)
        self.fleet_gpus = int(self.snap.whole_gpus[: self.base_count].sum())
        self.cap_milli = self.fleet_gpus * 1000
        self.last_t = self.clock.now
        self.alloc_integral = 0.0
        self.cap_integral = 0.0
        self.series: tuple[list[float], ...] = ([], [], [], [], [], [])

    # ------------------------------------------------------------------ queue
    def _key(self, i: int) -> tuple[float, ...]:
        if self.config.queue_policy is QueuePolicy.DEFAULT:
            return (-self.prio[i], self.jobs[i].submit, i)
        return (self.jobs[i].submit, i)

    def _queue_of(self, i: int) -> str:
        return self.tenant_of[i] if self.config.queue_policy is QueuePolicy.DEFAULT else "*"

    def _enqueue(self, i: int, t: float) -> None:
        self.status[i] = QUEUED
        self.queued_since[i] = t
        bisect.insort(self.queues.setdefault(self._queue_of(i), []), (self._key(i), i))
        self.queued += 1
        self.new.append(i)

    def _dequeue(self, i: int) -> None:
        q = self.queues[self._queue_of(i)]
        entry = (self._key(i), i)
        k = bisect.bisect_left(q, entry)
        del q[k]
        self.queued -= 1

    def _order(self, only: list[int] | None) -> Iterator[int]:
        """Queued jobs in policy order (``only``: just these, e.g. the new arrivals)."""
        if only is not None:
            for _, i in sorted((self._key(i), i) for i in only):
                if self.status[i] == QUEUED:
                    yield i
            return
        if len(self.queues) <= 1 or self.config.queue_policy is not QueuePolicy.DEFAULT:
            for q in self.queues.values():
                for _, i in list(q):
                    if self.status[i] == QUEUED:
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
            if self.status[i] == QUEUED:
                yield i

    # ------------------------------------------------------------------ capacity
    def _free_milli(self) -> int:
        return int(self.snap.model_free_milli.sum())

    def _block(self, n: int) -> None:
        """Take all of node ``n`` (failed or scaled away); its jobs must be gone already."""
        snap = self.snap
        gm = tuple(
            (g, int(snap.gpu_free[n, g])) for g in range(snap.gmax) if snap.gpu_free[n, g] > 0
        )
        mig = tuple(
            slot for (node, _), slots in snap.mig_slots.items() if node == n for slot in slots
        )
        rep = tuple(
            (g, int(snap.replica_free[n, g]))
            for g in range(snap.gmax)
            if snap.replica_free[n, g] > 0
        )
        a = Assignment(
            node=n,
            cpu_milli=int(snap.cpu_free[n]),
            memory_bytes=int(snap.mem_free[n]),
            gpu_milli=gm,
            mig=mig,
            replicas=rep,
        )
        snap.reserve(n, a)
        self.blockers[n] = a
        self.blocked_milli += a.milli_gpu

    def _unblock(self, n: int) -> None:
        a = self.blockers.pop(n)
        self.snap.unreserve(a)
        self.blocked_milli -= a.milli_gpu
        self.freed = True

    def _node_gpus_milli(self, n: int) -> int:
        return int(self.snap.whole_gpus[n]) * 1000

    # ------------------------------------------------------------------ job life
    def _start(self, i: int, placed: GangPlacement, t: float) -> None:
        self._dequeue(i)
        self.status[i] = RUNNING
        self.placement[i] = placed
        self.run_start[i] = t
        self.epoch[i] += 1
        self.wait[i] += t - self.queued_since[i]
        if math.isnan(self.first_start[i]):
            self.first_start[i] = t
        self.running.add(i)
        self.tenant_milli[self.tenant_of[i]] += self.milli[i]
        p = self.prio[i]
        self.running_prio[p] = self.running_prio.get(p, 0) + 1
        for node in placed.nodes:
            self.on_node.setdefault(node, set()).add(i)
        self.reasons.pop(i, None)
        self.events.push(Event(t + self.remaining[i], EventKind.FINISH, i, self.epoch[i]))

    def _stop(self, i: int, t: float, release_devices: bool = True) -> float:
        """End job ``i``'s current run; returns the run's length."""
        placed = self.placement[i]
        assert placed is not None
        if release_devices:
            release(self.snap, placed, self.policy)
        for node in placed.nodes:
            self.on_node[node].discard(i)
        self.placement[i] = None
        self.running.discard(i)
        self.tenant_milli[self.tenant_of[i]] -= self.milli[i]
        p = self.prio[i]
        self.running_prio[p] -= 1
        if not self.running_prio[p]:
            del self.running_prio[p]
        ran = t - self.run_start[i]
        self.alloc[i] += self.milli[i] * ran / 1000.0
        self.freed = True
        return ran

    def _finish(self, i: int, t: float) -> None:
        ran = self._stop(i, t)
        self.served[i] += self.milli[i] * ran / 1000.0
        self.remaining[i] = 0.0
        self.status[i] = FINISHED
        self.finish[i] = t

    def _evict(self, i: int, t: float, reason: str, release_devices: bool = True) -> None:
        """Stop a running job and queue it again; it keeps its last checkpoint."""
        ran = self._stop(i, t, release_devices)
        ckpt = self.jobs[i].checkpoint
        saved = math.floor(ran / ckpt) * ckpt if ckpt > 0 else 0.0
        saved = min(saved, ran)
        self.served[i] += self.milli[i] * saved / 1000.0
        self.lost[i] += self.milli[i] * (ran - saved) / 1000.0
        self.remaining[i] -= saved
        self.restarts[i] += 1
        self.epoch[i] += 1  # its pending FINISH is now stale
        self._enqueue(i, t)
        self.reasons[i] = reason

    def _lose(self, i: int, t: float, reason: str) -> None:
        """Job ``i`` lost a node it ran on (failure, scale-down): it is evicted and queued."""
        self._evict(i, t, reason)

    # ------------------------------------------------------------------ scheduling
    def _known_to_fail(
        self, i: int, cache: dict[object, list[tuple[int, int, str]]] | None = None
    ) -> str | None:
        """The reason a job of the same shape and no larger failed (since the last reset)."""
        key, g, c = self.shape[i]
        failed = (self.failed_shapes if cache is None else cache).get(key)
        if not failed:
            return None
        for fg, fc, reason in failed:
            if (g == 0 and c == 0) or (fg <= g and fc <= c):
                return reason
        return None

    def _try(self, i: int) -> GangPlacement | None:
        known = self._known_to_fail(i)
        if known is not None:
            self.reasons[i] = (
                f"does not fit; a job of the same shape and no larger did not: {known}"
            )
            return None
        result = place_workload(self.snap, self.jobs[i].workload, self.policy, rng=self.rng)
        if isinstance(result, Unschedulable):
            key, g, c = self.shape[i]
            self.failed_shapes.setdefault(key, []).append((g, c, result.reason))
            self.reasons[i] = result.reason
            return None
        return result

    def _declared_remaining(self, i: int) -> float:
        job = self.jobs[i]
        return self.remaining[i] + max(job.declared - job.duration, 0.0)

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
        """EASY reservation for job ``i``: the earliest time (by the running jobs' declared
        limits) it fits, and what the fleet looks like then.

        Whole-GPU pods (the ITP trace) are planned per node: the head fits when the nodes' free
        GPUs hold its pods (sum of floor(free / per-pod GPUs) >= pods), so a gang is not
        promised GPUs scattered over half-empty nodes. Other shapes are planned by GPU count.
        """
        self.blocked = True
        self.head_shape = self.shape[i]
        ends = sorted((self.run_start[j] + self._declared_remaining(j), j) for j in self.running)
        _, g, _ = self.head_shape
        if g > 0:
            free = self.snap.full_free.copy()
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
        """May job ``i``, placed as ``placed`` and running past the shadow time, start now?"""
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
            self.config.preemption
            and self.config.queue_policy is QueuePolicy.DEFAULT
            and bool(self.running_prio)
            and min(self.running_prio) < self.prio[i]
        )

    def _preempt_for(self, i: int, t: float) -> bool:
        """Evict lower-priority jobs (lowest priority, most recently started first) until ``i``
        fits; if it never does, put them back exactly as they were."""
        p = self.prio[i]
        victims = sorted(
            (self.prio[j], -self.run_start[j], j) for j in self.running if self.prio[j] < p
        )
        if self._free_milli() + sum(self.milli[j] for *_, j in victims) < self.milli[i]:
            return False
        released: list[int] = []
        for *_, j in victims:
            placed = self.placement[j]
            assert placed is not None
            release(self.snap, placed, self.policy)
            released.append(j)
            result = place_workload(self.snap, self.jobs[i].workload, self.policy, rng=self.rng)
            if isinstance(result, GangPlacement):
                for v in released:
                    self._evict(v, t, f"preempted by {self.jobs[i].name}", release_devices=False)
                    self.preemptions += 1
                self._start(i, result, t)
                self.failed_shapes.clear()
                return True
        for j in reversed(released):
            placed = self.placement[j]
            assert placed is not None
            for pod in placed.pods:
                self.snap.reserve(pod.placement.node, pod.assignment)
                on_reserve = getattr(self.policy, "on_reserve", None)
                if on_reserve is not None:
                    on_reserve(self.snap, pod.pod, pod.assignment)
        return False

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
        qp = self.config.queue_policy
        guard = self.config.reserve_after
        for i in candidates:
            if self.status[i] != QUEUED:
                continue
            if self.milli[i] and self._free_milli() <= 0 and not self._can_preempt(i):
                if qp is QueuePolicy.FIFO:
                    self.blocked = True
                    self.reasons.setdefault(i, "no free GPU")
                    break
                self.reasons.setdefault(i, "no free GPU")
                continue
            ends_before = False
            if self.blocked:
                if qp is QueuePolicy.FIFO:
                    self.reasons.setdefault(i, "waiting behind the head of the queue (FIFO)")
                    break
                ends_before = t + self._declared_remaining(i) <= self.shadow
                if not ends_before and (
                    (self.shadow_free is None and self.milli[i] > self.extra)
                    or self._known_to_fail(i, self.bf_failed) is not None
                ):
                    self.reasons[i] = "would delay the reserved head of the queue (backfill)"
                    continue
            placed = self._try(i)
            if placed is not None:
                if self.blocked and not ends_before and not self._backfill_ok(i, placed):
                    release(self.snap, placed, self.policy)
                    key, g, c = self.shape[i]
                    self.bf_failed.setdefault(key, []).append((g, c, "it would delay the head"))
                    self.reasons[i] = "would delay the reserved head of the queue (backfill)"
                    continue
                self._start(i, placed, t)
                continue
            if self._can_preempt(i) and self._preempt_for(i, t):
                continue
            if not self.blocked:
                if qp is QueuePolicy.FIFO:
                    self.blocked = True
                    break
                if qp is QueuePolicy.BACKFILL or t - self.jobs[i].submit >= guard:
                    self._reserve_head(i, t)

    # ------------------------------------------------------------------ events
    def _fail_node(self, n: int, t: float, down_for: float) -> None:
        if n in self.down or n in self.blockers:
            return
        for i in sorted(self.on_node.get(n, ())):
            self._lose(i, t, f"node {self.nodes[n].name} failed")
        self._block(n)
        self.down.add(n)
        self.cap_milli -= self._node_gpus_milli(n)
        self.node_failures += 1
        self.events.push(Event(t + down_for, EventKind.REPAIR, n))
        self.capacity_adding += 1

    def _repair(self, n: int, t: float) -> None:
        self.capacity_adding -= 1
        if n not in self.down:
            return
        self.down.discard(n)
        self._unblock(n)
        self.cap_milli += self._node_gpus_milli(n)
        if self.config.mtbf > 0:
            self.events.push(
                Event(t + float(self.rng.exponential(self.config.mtbf)), EventKind.FAIL, n)
            )

    def _scale(self, delta: int, t: float) -> None:
        if delta > 0:
            self.capacity_adding -= 1
            for _ in range(min(delta, len(self.absent))):
                n = self.absent.pop(0)
                self._unblock(n)
                self.cap_milli += self._node_gpus_milli(n)
            return
        present = [n for n in range(len(self.nodes)) if n not in self.blockers]
        for n in sorted(present, reverse=True)[:-delta]:
            for i in sorted(self.on_node.get(n, ())):
                self._lose(i, t, f"node {self.nodes[n].name} scaled away")
            self._block(n)
            self.cap_milli -= self._node_gpus_milli(n)
            self.absent.append(n)
        self.absent.sort()

    def _handle(self, ev: Event, t: float) -> None:
        kind = ev.kind
        if kind is EventKind.FINISH:
            i = int(ev.payload)  # type: ignore[call-overload]
            if self.status[i] == RUNNING and self.epoch[i] == ev.epoch:
                self._finish(i, t)
        elif kind is EventKind.REPAIR:
            self._repair(int(ev.payload), t)  # type: ignore[call-overload]
        elif kind is EventKind.FAIL:
            payload = ev.payload
            if isinstance(payload, tuple):
                n, down_for = payload
            else:
                n, down_for = int(payload), float(self.rng.exponential(self.config.mttr))  # type: ignore[call-overload]
            if n in self.blockers and n not in self.down:  # absent node: try again later
                if self.config.mtbf > 0 and not isinstance(payload, tuple):
                    self.events.push(
                        Event(t + float(self.rng.exponential(self.config.mtbf)), EventKind.FAIL, n)
                    )
                return
            self._fail_node(n, t, down_for)
        elif kind in (EventKind.SCALE_UP, EventKind.SCALE_DOWN):
            self._scale(int(ev.payload), t)  # type: ignore[call-overload]

    def _advance(self, t: float) -> None:
        dt = t - self.last_t
        if dt > 0:
            self.alloc_integral += (self.snap.allocated_milli() - self.blocked_milli) * dt / 1000.0
            self.cap_integral += self.cap_milli * dt / 1000.0
        self.last_t = t
        self.clock.advance(t)

    def _sample(self, t: float) -> None:
        snap = self.snap
        alloc = (snap.allocated_milli() - self.blocked_milli) / 1000.0
        cap = self.cap_milli / 1000.0
        free = cap - alloc
        if free > 0:
            whole_free = (snap.full_free == snap.whole_gpus) & (snap.whole_gpus > 0)
            on_free_nodes = float(snap.whole_gpus[whole_free].sum())
            frag = max(0.0, 1.0 - on_free_nodes / free)
        else:
            frag = 0.0
        ts, al, cp, rn, qu, fr = self.series
        if ts and ts[-1] == t:
            for s in self.series:
                s.pop()
        ts.append(t)
        al.append(alloc)
        cp.append(cap)
        rn.append(len(self.running))
        qu.append(self.queued)
        fr.append(frag)

    # ------------------------------------------------------------------ the loop
    def run(self) -> SimResult:
        wall = time.perf_counter()
        cfg = self.config
        for f in cfg.failures:
            if f.node not in self.node_index:
                raise InvalidValue("failures", f"unknown node {f.node!r}")
            self.events.push(Event(f.at, EventKind.FAIL, (self.node_index[f.node], f.down_for)))
        for s in cfg.scale:
            kind = EventKind.SCALE_UP if s.delta > 0 else EventKind.SCALE_DOWN
            self.events.push(Event(s.at, kind, s.delta))
            if s.delta > 0:
                self.capacity_adding += 1
        if cfg.mtbf > 0:
            start = self.clock.now
            for n in range(len(self.nodes)):
                self.events.push(
                    Event(start + float(self.rng.exponential(cfg.mtbf)), EventKind.FAIL, n)
                )
        first_event = self.events.peek_time()
        if first_event is not None and first_event < self.clock.now:  # e.g. a failure before
            self.clock.now = self.last_t = first_event  # the first arrival
        jobs, n_jobs, nxt = self.jobs, len(self.jobs), 0
        total_capacity = int(self.snap.whole_gpus.sum()) * 1000
        batches = 0
        while True:
            t_arr = jobs[nxt].submit if nxt < n_jobs else math.inf
            t_ev = self.events.peek_time()
            t = min(t_arr, math.inf if t_ev is None else t_ev)
            if t == math.inf or (cfg.until is not None and t > cfg.until):
                break
            self._advance(t)
            while (
                self.events
                and self.events.peek_time() == t
                and self.events._heap[0][1] < EventKind.ARRIVAL
            ):
                self._handle(self.events.pop(), t)
            while nxt < n_jobs and jobs[nxt].submit == t:
                if self.milli[nxt] > total_capacity:
                    self.status[nxt] = QUEUED
                    self.reasons[nxt] = (
                        f"asks {self.milli[nxt] / 1000:g} GPUs; the fleet never has more than "
                        f"{total_capacity / 1000:g}"
                    )
                else:
                    self._enqueue(nxt, t)
                nxt += 1
            while self.events and self.events.peek_time() == t:
                self._handle(self.events.pop(), t)
            self._schedule(t)
            self._sample(t)
            batches += 1
            if self.progress is not None and batches % 512 == 0:
                self.progress(nxt, n_jobs)
            if nxt >= n_jobs and not self.running and self.capacity_adding == 0:
                break
        end = self.clock.now if cfg.until is None else max(self.clock.now, cfg.until)
        self._advance(end)
        for i in sorted(self.running):  # a horizon cut runs short: account them up to the end
            ran = end - self.run_start[i]
            self.alloc[i] += self.milli[i] * ran / 1000.0
            self.served[i] += self.milli[i] * ran / 1000.0
        for i in range(n_jobs):
            if self.status[i] == QUEUED:
                self.wait[i] += end - self.queued_since[i]
                self.reasons.setdefault(i, "never tried: capacity never freed after it arrived")
            elif self.status[i] == RUNNING:
                left = self.remaining[i] - (end - self.run_start[i])
                self.reasons[i] = f"still running at the end ({left:.0f} s of work left)"
        if self.progress is not None:
            self.progress(n_jobs, n_jobs)
        ts, al, cp, rn, qu, fr = self.series
        return SimResult(
            jobs=self.jobs,
            config=cfg,
            fleet_gpus=self.fleet_gpus,
            status=list(self.status),
            first_start=self.first_start,
            finish=self.finish,
            wait=self.wait,
            restarts=self.restarts,
            alloc_gpu_s=self.alloc,
            served_gpu_s=self.served,
            lost_gpu_s=self.lost,
            reasons=dict(self.reasons),
            series_t=ts,
            series_alloc=al,
            series_cap=cp,
            series_running=rn,  # type: ignore[arg-type]
            series_queued=qu,  # type: ignore[arg-type]
            series_frag=fr,
            alloc_integral=self.alloc_integral,
            cap_integral=self.cap_integral,
            start_time=jobs[0].submit if jobs else 0.0,
            end_time=end,
            preemptions=self.preemptions,
            node_failures=self.node_failures,
            wall_seconds=time.perf_counter() - wall,
        )


def simulate(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    config: SimConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes``; see the module docstring."""
    return Simulator(nodes, jobs, config, progress).run()
