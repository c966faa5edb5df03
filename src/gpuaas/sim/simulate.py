"""The simulator: replay a trace through the one scheduling path on a virtual clock.

The simulator owns time and the fleet's life; the queue is a strategy of
:mod:`gpuaas.engine.scheduling` that it only drives (submit, finish, requeue, nodes changed,
cycle). Events: arrivals (read in order from the sorted trace, not pushed to the heap),
finishes, node failures and repairs, and fleet scale events. After every batch of events at one
instant it asks the strategy for a cycle and applies the decisions: admitted jobs start,
evicted jobs queue again (keeping their last checkpoint). The strategy is the admission engine
under a Kueue configuration (``gov``), else the fleet strategy of ``SimConfig.queue_policy``
(:class:`~gpuaas.engine.scheduling.fleet.QueuePolicy`: ``default``, ``fifo``, ``backfill``).

The fleet changes through the strategy (:meth:`~gpuaas.engine.scheduling.Scheduler.nodes_changed`):
a scale-up adds real nodes (copies of the fleet's nodes, :func:`scale_copy`), a scale-down drains
and removes the most recently added ones still up (their jobs are displaced and queue again). A
failed node stays in the fleet, *down* (held by the strategy) until its repair. Nodes are known to
the simulator by their *rank*: the fleet's nodes in order, then the scale-up copies in the order
they are first added; a scale-up adds the lowest ranks not in the fleet, up to the peak the scale
events reach.

Accounting (checked by the tests): for every run of a job, allocated GPU-seconds = kept work
(served) + work thrown away by an eviction (lost to restart); the allocated total equals the
integral of the snapshot's allocated GPUs over time.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuaas.engine.admission import AdmissionConfig
from gpuaas.engine.admission.fleet_changes import AddNode, CordonNode, Displaced, RemoveNode
from gpuaas.engine.framework import PodShape
from gpuaas.engine.gang import GangPlacement
from gpuaas.engine.policies import TaskMix, make_policy
from gpuaas.engine.policies.base import Policy
from gpuaas.engine.reasons import node_failed
from gpuaas.engine.scheduling import Request
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.engine.scheduling.fleet import FleetScheduler, QueuePolicy
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import Governance
from gpuaas.model.node import Node
from gpuaas.model.topology import Level
from gpuaas.sim.events import Clock, Event, EventKind, EventQueue
from gpuaas.sim.metering import Meter
from gpuaas.sim.traces import SimJob

__all__ = ["QueuePolicy", "SimConfig", "SimResult", "Simulator", "simulate"]

FUTURE, QUEUED, RUNNING, FINISHED = 0, 1, 2, 3
STATUS_NAMES = ("future", "queued", "running", "finished")


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


def scale_copy(nodes: Sequence[Node], k: int) -> Node:
    """The ``k``-th scale-up node: a copy of the fleet's nodes (cycling) under a new name. Each
    round of copies gets racks, blocks and NVLink domains of its own (named after the
    template's, in the same zone): new servers arrive in new racks, they do not squeeze into
    full ones."""
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
    return dataclasses.replace(base, name=name, labels=labels, topology=topology)


def _max_scale_up(events: Sequence[ScaleEvent]) -> int:
    level, peak = 0, 0
    for ev in sorted(events, key=lambda e: e.at):
        level += ev.delta
        peak = max(peak, level)
    return peak


class Simulator:
    """One run; call :meth:`run` once.

    The queue is a strategy of the one scheduling path (:mod:`gpuaas.engine.scheduling`): with
    ``gov`` (a Kueue configuration), admission by the admission engine; otherwise the fleet
    strategy of ``config.queue_policy``. The simulator only drives it: it submits arrivals,
    reports finishes and lost nodes, and applies each cycle's decisions to its jobs.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        config: SimConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
        gov: Governance | None = None,
        admission: AdmissionConfig | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.config = config or SimConfig()
        #: usage records of the runs, by the service's rules (:mod:`gpuaas.sim.metering`)
        self.meter = meter
        self.config.validate()
        if not nodes:
            raise InvalidValue("fleet", "has no nodes")
        self.jobs = sorted(jobs, key=lambda j: j.submit)
        names = [j.name for j in self.jobs]
        if len(set(names)) != len(names):
            raise InvalidValue("trace", "job names must be unique")
        self.base_count = len(nodes)
        #: ranks a scale-up may bring in: the fleet's nodes and the copies up to the peak
        self.max_rank = len(nodes) + _max_scale_up(self.config.scale)
        self.nodes = list(nodes)  # by rank; grows as scale-up copies are first added
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.template = list(nodes)
        shapes = [PodShape.of(ps.pod) for j in self.jobs for ps in j.workload.pod_sets]
        # a mix counts whole-GPU and share tasks only: a trace of MIG or replica jobs has none
        plain = [s for s in shapes if not (s.mig or s.replicas)]
        mix = TaskMix.from_shapes(plain) if plain else None
        self.policy: Policy = make_policy(self.config.policy, mix=mix, seed=self.config.seed)
        self.rng = np.random.default_rng(self.config.seed)
        self.scheduler: FleetScheduler | AdmissionScheduler
        if gov is None:
            self.scheduler = FleetScheduler(
                self.nodes,
                self.policy,
                queue_policy=self.config.queue_policy,
                reserve_after=self.config.reserve_after,
                preemption=self.config.preemption,
                tenant_weights=self.config.tenant_weights,
                rng=self.rng,
            )
        else:
            self.scheduler = AdmissionScheduler.on_fleet(gov, self.nodes, self.policy, admission)
        self.snap = self.scheduler.snapshot  # utilisation is measured on the strategy's fleet
        self.progress = progress
        n = len(self.jobs)
        self.index = {name: i for i, name in enumerate(names)}
        self.milli = [j.milli_gpu for j in self.jobs]
        self.status = [FUTURE] * n
        self.remaining = [j.duration for j in self.jobs]
        self.run_start = [0.0] * n
        self.epoch = [0] * n
        self.on: list[list[int]] = [[] for _ in range(n)]  # the nodes of the current run
        self.first_start = [math.nan] * n
        self.finish = [math.nan] * n
        self.queued_since = [0.0] * n
        self.wait = [0.0] * n
        self.restarts = [0] * n
        self.alloc = [0.0] * n
        self.served = [0.0] * n
        self.lost = [0.0] * n
        self.reasons: dict[int, str] = {}  # the simulator's own: too large, still running
        self.on_node: dict[int, set[int]] = {}
        self.running: set[int] = set()
        self.queued = 0
        self.down: set[int] = set()  # failed nodes (by rank), held in the strategy
        self.present: set[int] = set(range(len(nodes)))  # ranks in the fleet, up or down
        self.capacity_adding = 0  # pending repair / scale-up events
        self.events = EventQueue()
        self.clock = Clock(self.jobs[0].submit if self.jobs else 0.0)
        self.preemptions = 0
        self.node_failures = 0
        self.fleet_gpus = int(self.snap.whole_gpus.sum())
        self.cap_milli = self.fleet_gpus * 1000
        per_node = self.snap.whole_gpus
        #: the most GPUs the fleet ever has (all ranks up to the peak in)
        self.max_gpus = self.fleet_gpus + sum(
            int(per_node[k % len(nodes)]) for k in range(self.max_rank - len(nodes))
        )
        self.last_t = self.clock.now
        self.alloc_integral = 0.0
        self.cap_integral = 0.0
        self.series: tuple[list[float], ...] = ([], [], [], [], [], [])

    # ------------------------------------------------------------------ fleet
    def _slot(self, r: int) -> int:
        """The snapshot index of the node of rank ``r`` (in the fleet)."""
        return self.snap.index_of(self.nodes[r].name)

    def _node_gpus_milli(self, r: int) -> int:
        return int(self.snap.whole_gpus[self._slot(r)]) * 1000

    def _node(self, r: int) -> Node:
        """The node of rank ``r``, built when a scale-up first adds it."""
        while r >= len(self.nodes):
            copy = scale_copy(self.template, len(self.nodes) - self.base_count)
            self.node_index[copy.name] = len(self.nodes)
            self.nodes.append(copy)
        return self.nodes[r]

    # ------------------------------------------------------------------ job life
    def _limit(self, i: int) -> float:
        """Job ``i``'s declared run time from its next start (what backfill plans with)."""
        job = self.jobs[i]
        return self.remaining[i] + max(job.declared - job.duration, 0.0)

    def _request(self, i: int) -> Request:
        job = self.jobs[i]
        return Request(job.name, job.workload, job.tenant, job.priority, job.submit, self._limit(i))

    def _queue(self, i: int, t: float) -> None:
        self.status[i] = QUEUED
        self.queued_since[i] = t
        self.queued += 1

    def _start(self, i: int, placed: GangPlacement | None, t: float) -> None:
        assert placed is not None
        self.status[i] = RUNNING
        self.queued -= 1
        self.run_start[i] = t
        self.epoch[i] += 1
        self.wait[i] += t - self.queued_since[i]
        if math.isnan(self.first_start[i]):
            self.first_start[i] = t
        self.running.add(i)
        if self.meter is not None:
            self.meter.started(i, self.jobs[i], self.restarts[i], placed, t)
        self.on[i] = placed.nodes
        for node in placed.nodes:
            self.on_node.setdefault(node, set()).add(i)
        self.events.push(Event(t + self.remaining[i], EventKind.FINISH, i, self.epoch[i]))

    def _stop(self, i: int, t: float) -> float:
        """End job ``i``'s current run; returns the run's length."""
        for node in self.on[i]:
            self.on_node[node].discard(i)
        self.on[i] = []
        self.running.discard(i)
        if self.meter is not None:
            self.meter.stopped(i, self.jobs[i], t)
        ran = t - self.run_start[i]
        self.alloc[i] += self.milli[i] * ran / 1000.0
        return ran

    def _finish(self, i: int, t: float) -> None:
        ran = self._stop(i, t)
        self.scheduler.finish(self.jobs[i].name)
        self.served[i] += self.milli[i] * ran / 1000.0
        self.remaining[i] = 0.0
        self.status[i] = FINISHED
        self.finish[i] = t

    def _evicted(self, i: int, t: float) -> None:
        """Job ``i`` stopped and queues again; it keeps its last checkpoint."""
        ran = self._stop(i, t)
        ckpt = self.jobs[i].checkpoint
        saved = math.floor(ran / ckpt) * ckpt if ckpt > 0 else 0.0
        saved = min(saved, ran)
        self.served[i] += self.milli[i] * saved / 1000.0
        self.lost[i] += self.milli[i] * (ran - saved) / 1000.0
        self.remaining[i] -= saved
        self.restarts[i] += 1
        self.epoch[i] += 1  # its pending FINISH is now stale
        self._queue(i, t)
        self.scheduler.declare(self.jobs[i].name, self._limit(i))

    def _lose(self, i: int, t: float, cause: str) -> None:
        """Job ``i`` lost a node it ran on (it failed): it is requeued."""
        self.scheduler.requeue(self.jobs[i].name, node_failed(cause))
        self._evicted(i, t)

    def _schedule(self, t: float) -> None:
        decisions = self.scheduler.cycle(t)
        index = self.index
        for ev in decisions.evicted:
            i = index[ev.name]
            if ev.held_before and self.status[i] == RUNNING:
                self._evicted(i, t)
                self.preemptions += 1
        for admitted in decisions.admitted:
            self._start(index[admitted.name], admitted.placement, t)

    # ------------------------------------------------------------------ events
    def _fail_node(self, n: int, t: float, down_for: float) -> None:
        if n in self.down or n not in self.present:
            return
        name = self.nodes[n].name
        for i in sorted(self.on_node.get(self._slot(n), ())):
            self._lose(i, t, f"node {name} failed")
        self.scheduler.nodes_changed(down=[name])
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
        self.scheduler.nodes_changed(up=[self.nodes[n].name])
        self.cap_milli += self._node_gpus_milli(n)
        if self.config.mtbf > 0:
            self.events.push(
                Event(t + float(self.rng.exponential(self.config.mtbf)), EventKind.FAIL, n)
            )

    def _scale(self, delta: int, t: float) -> None:
        """Add ``delta`` nodes (the lowest ranks not in the fleet), or drain and remove
        ``-delta`` (the highest ranks up), through the strategy."""
        if delta > 0:
            self.capacity_adding -= 1
            absent = (r for r in range(self.max_rank) if r not in self.present)
            added = [r for r, _ in zip(absent, range(delta), strict=False)]
            if not added:
                return
            self.scheduler.nodes_changed([AddNode(self._node(r)) for r in added])
            self.present.update(added)
            self.cap_milli += sum(self._node_gpus_milli(r) for r in added)
            return
        up = sorted((r for r in self.present if r not in self.down), reverse=True)
        leaving = up[:-delta]
        changes: list[CordonNode | RemoveNode] = []
        for r in leaving:
            name = self.nodes[r].name
            changes += [CordonNode(name, drain=True), RemoveNode(name)]
            self.cap_milli -= self._node_gpus_milli(r)
        self._displaced(self.scheduler.nodes_changed(changes), t)
        self.present.difference_update(leaving)

    def _displaced(self, displaced: Sequence[Displaced], t: float) -> None:
        """Jobs the strategy requeued because a fleet change took their devices stop and queue
        again (keeping their last checkpoint)."""
        for moved in displaced:
            i = self.index[moved.workload]
            if self.status[i] == RUNNING:
                self._evicted(i, t)

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
            if n not in self.present:  # not in the fleet (scaled away or not added): later
                if self.config.mtbf > 0 and not isinstance(payload, tuple):
                    self.events.push(
                        Event(t + float(self.rng.exponential(self.config.mtbf)), EventKind.FAIL, n)
                    )
                return
            self._fail_node(n, t, down_for)
        elif kind in (EventKind.SCALE_UP, EventKind.SCALE_DOWN):
            self._scale(int(ev.payload), t)  # type: ignore[call-overload]

    def _held_milli(self) -> int:
        holds = self.scheduler.holds
        return holds.milli if holds is not None else 0

    def _advance(self, t: float) -> None:
        dt = t - self.last_t
        if dt > 0:
            alloc = self.snap.allocated_milli() - self._held_milli()
            self.alloc_integral += alloc * dt / 1000.0
            self.cap_integral += self.cap_milli * dt / 1000.0
        self.last_t = t
        self.clock.advance(t)

    def _sample(self, t: float) -> None:
        snap = self.snap
        alloc = (snap.allocated_milli() - self._held_milli()) / 1000.0
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
            if f.node not in self.node_index and self.max_rank > self.base_count:
                self._node(self.max_rank - 1)  # a failure may name a scale-up node
            if f.node not in self.node_index:
                raise InvalidValue("failures", f"unknown node {f.node!r}")
            self.events.push(Event(f.at, EventKind.FAIL, (self.node_index[f.node], f.down_for)))
        for s in cfg.scale:
            kind = EventKind.SCALE_UP if s.delta > 0 else EventKind.SCALE_DOWN
            self.events.push(Event(s.at, kind, s.delta))
            if s.delta > 0:
                self.capacity_adding += 1
        if cfg.mtbf > 0:  # a failure clock for every rank that may ever be in the fleet
            start = self.clock.now
            for n in range(self.max_rank):
                self.events.push(
                    Event(start + float(self.rng.exponential(cfg.mtbf)), EventKind.FAIL, n)
                )
        first_event = self.events.peek_time()
        if first_event is not None and first_event < self.clock.now:  # e.g. a failure before
            self.clock.now = self.last_t = first_event  # the first arrival
        jobs, n_jobs, nxt = self.jobs, len(self.jobs), 0
        total_capacity = self.max_gpus * 1000
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
                    self._queue(nxt, t)
                    self.scheduler.submit(self._request(nxt), t)
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
            if self.meter is not None:
                self.meter.stopped(i, self.jobs[i], end)
            self.alloc[i] += self.milli[i] * ran / 1000.0
            self.served[i] += self.milli[i] * ran / 1000.0
        waiting = self.scheduler.waiting
        for i in range(n_jobs):
            if self.status[i] == QUEUED:
                self.wait[i] += end - self.queued_since[i]
                why = waiting.get(self.jobs[i].name)
                if why is not None:
                    self.reasons[i] = why.render()
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
            reasons=dict(sorted(self.reasons.items())),
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
    gov: Governance | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` (under the Kueue configuration ``gov``, if given); see the
    module docstring."""
    return Simulator(nodes, jobs, config, progress, gov).run()
