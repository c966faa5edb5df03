"""What-if: tenants with autoscaling clusters carved from one fleet, and the idle-capacity pool.

The fleet's whole nodes are each, at any instant, in exactly one place: **free** (the
provider's, in no cluster), in one tenant **cluster**, or in the **pool** (the provider's
spot cluster, isolated from tenants). Every tenant job runs in its tenant's cluster, on that
cluster's nodes only; spot jobs run on the pool's nodes only. Each cluster and the pool is a
:class:`~gpuaas.engine.scheduling.fleet.FleetScheduler` whose fleet changes in place
(``AddNode``, ``CordonNode``, ``RemoveNode``), so placement, gangs and displacement are the
engine's one scheduling path, as in :mod:`gpuaas.sim.simulate`.

Every ``tick`` seconds the control loop does what the service's loops do, with the same
engine functions:

1. **Plan** (:func:`gpuaas.engine.autoscale.plan`): each cluster's view (its nodes with their
   allocation, measured utilisation and since when they have been unneeded, its pending jobs
   with the scheduler's structured reasons, cooldown times). A scale-out's nodes are chosen
   by :func:`gpuaas.engine.autoscale.nodes_for_scale_out`, as the service's: free nodes
   first, then pool nodes by :func:`gpuaas.engine.idle_pool.reclaim`, never one the cluster
   released within the flap window while another will do (``flap_wait``); a node is in the
   cluster (counted against its max) from the decision on, and allocatable ``join_seconds``
   after it is handed over. A scale-in drains the named nodes (their jobs, if any, are requeued
   from their last checkpoint) and frees them.
2. **Settle** (:func:`gpuaas.engine.idle_pool.settle`): free nodes idle for the settle time move
   into the pool (allocatable after ``join_seconds``); none while a reclaim is in flight, as the
   service's pool loop does.

**Reclaim**: a pool node a cluster takes is cordoned in the pool at once; its spot jobs get the
checkpoint signal and are evicted ``grace_seconds`` later (a spot job keeps its last checkpoint
and queues again in the pool); the node then joins the cluster. An empty pool node is handed
over at once. *Reclaim latency* is from the planner's decision to the node being allocatable in
the tenant's cluster.

**Telemetry** is synthesised: a job keeps its GPUs busy at a utilisation fixed by its name
(:func:`job_util`, 0.55..0.95); a node's reading is the mean over the last tick.
Two scale-in rules feed the same planner: ``telemetry`` (ours: a node is unneeded when nothing
is allocated on it and its measured utilisation is below the cluster's ``scaleInBelow``) and
``requests`` (cluster-autoscaler's: a node is unneeded when its *requested* share is below
half and its jobs fit on the cluster's other nodes; no telemetry: the requested share is what
the planner is given as utilisation; draining it requeues its jobs).

**Spot demand** (the pool's buyers): ``saturated``: a backlog of spot jobs always exceeds the
pool (every pool node that frees up is taken at once); ``rate``: Poisson arrivals at a fixed
rate (the CLI's *half-saturated* sets it to offer half of the idle GPU-hours of the same run
without a pool); ``none``: no pool at all.

**Accounting** (what the report's invariants check): GPU-seconds are integrated over time
between events. Idle = fleet GPUs - GPUs allocated to tenant jobs; it is split, each part
integrated on its own, into pool-used (spot jobs), unallocated in clusters, free nodes, and
unused pool nodes, so ``pool_used + idle_unsold == idle`` checks the bookkeeping.
**Flaps**: a node removed from a cluster and added back to it within ``flap_window``
(default 10 min, the issue's flap); stricter, a cluster that adds any node within the window
after it released one; and on the pool's side, a node reclaimed from the pool and settled
back into it within the window. **Max**: a cluster's nodes (joining ones included) are
compared with its max after every change.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from gpuaas.engine import autoscale, idle_pool
from gpuaas.engine.admission.fleet_changes import AddNode, CordonNode, RemoveNode
from gpuaas.engine.autoscale import (
    FLAP_WINDOW_SECONDS,
    Action,
    ClusterView,
    NodeFacts,
    PeakWindow,
    Pending,
    PoolView,
    nodes_needed,
)
from gpuaas.engine.idle_pool import FreeNode, PoolNode
from gpuaas.engine.policies import make_policy
from gpuaas.engine.scheduling import Request
from gpuaas.engine.scheduling.fleet import FleetScheduler, QueuePolicy
from gpuaas.model.autoscale import AutoscaleSpec, IdlePoolSpec
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary
from gpuaas.model.workload import PodSet, Workload
from gpuaas.sim.traces import SimJob, _gpu_pod

__all__ = [
    "ClusterSetup",
    "ScaleInRule",
    "SpotDemand",
    "WhatIfConfig",
    "WhatIfResult",
    "job_util",
    "run_whatif",
]

FREE, CLUSTER, POOL = 0, 1, 2
QUEUED, RUNNING, FINISHED, FUTURE = 1, 2, 3, 0
#: cluster-autoscaler's --scale-down-utilization-threshold default: requested share below it
CA_THRESHOLD = 0.5
NODE_POOL = "default"

# event kinds, in handling order at one instant
_FINISH, _SPOT_FINISH, _READY, _GRACE_END, _TICK = 0, 1, 2, 3, 4


class ScaleInRule(StrEnum):
    TELEMETRY = "telemetry"
    REQUESTS = "requests"


@dataclass(frozen=True, slots=True)
class ClusterSetup:
    """One tenant's cluster: its jobs are those of ``tenant``; between ``min_nodes`` and
    ``max_nodes`` (the hard limit) whole nodes."""

    tenant: str
    min_nodes: int
    max_nodes: int
    spec: AutoscaleSpec = field(default_factory=AutoscaleSpec)

    def check(self, where: str) -> None:
        if self.min_nodes < 0:
            raise InvalidValue(f"{where}.min", "must not be negative")
        if self.max_nodes < max(self.min_nodes, 1):
            raise InvalidValue(
                f"{where}.max",
                f"must be at least min ({self.min_nodes}) and 1, got {self.max_nodes}",
            )
        self.spec.check(f"{where}.autoscale")


@dataclass(frozen=True, slots=True)
class SpotDemand:
    """The pool's buyers: ``mode`` ``saturated`` (always more than the pool), ``rate`` (Poisson
    at ``per_hour`` jobs an hour) or ``none`` (no pool). A spot job asks ``nodes`` whole nodes
    (a choice weighted by ``weights``), runs an exponential time of mean ``mean_seconds`` and
    checkpoints every ``checkpoint`` seconds."""

    mode: str = "saturated"
    per_hour: float = 0.0
    nodes: tuple[int, ...] = (1, 2)
    weights: tuple[float, ...] = (3.0, 1.0)
    mean_seconds: float = 7200.0
    checkpoint: float = 300.0

    def check(self) -> None:
        if self.mode not in ("saturated", "rate", "none"):
            raise InvalidValue("spot.mode", f"unknown {self.mode!r}; use saturated, rate or none")
        if self.mode == "rate" and self.per_hour <= 0:
            raise InvalidValue("spot.per_hour", "must be above 0 for a rate")
        if not self.nodes or len(self.nodes) != len(self.weights) or min(self.nodes) < 1:
            raise InvalidValue("spot.nodes", "needs node counts >= 1, one weight each")
        if self.mean_seconds <= 0 or self.checkpoint < 0:
            raise InvalidValue("spot.mean_seconds", "must be above 0 (checkpoint >= 0)")

    def mean_gpu_seconds(self, gpus_per_node: int) -> float:
        w = np.asarray(self.weights, dtype=float)
        n = np.asarray(self.nodes, dtype=float)
        return float((n * w).sum() / w.sum()) * gpus_per_node * self.mean_seconds


@dataclass(frozen=True, slots=True)
class WhatIfConfig:
    clusters: tuple[ClusterSetup, ...]
    pool: IdlePoolSpec | None = field(default_factory=IdlePoolSpec)
    spot: SpotDemand = field(default_factory=SpotDemand)
    rule: ScaleInRule = ScaleInRule.TELEMETRY
    tick: float = 15.0
    join_seconds: float = 10.0
    flap_window: float = FLAP_WINDOW_SECONDS
    # how long a cluster's oldest waiting job waits before a scale-out takes back a node the
    # cluster released within the flap window, when no other will do (inf: never, 0: at once)
    flap_wait: float = math.inf
    # a node reclaimed from the pool is not settled back into it within this long (0: no hold)
    pool_hold: float = FLAP_WINDOW_SECONDS
    until: float | None = None
    seed: int = 0
    policy: str = "gpuaas"
    audit: bool = False  # check the fleet's partition after every control-loop pass (tests)

    def check(self) -> None:
        if not self.clusters:
            raise InvalidValue("clusters", "needs at least one tenant cluster")
        tenants = [c.tenant for c in self.clusters]
        if len(set(tenants)) != len(tenants):
            raise InvalidValue("clusters", "one cluster per tenant")
        for k, c in enumerate(self.clusters):
            c.check(f"clusters[{k}]")
        if self.pool is not None:
            self.pool.check()
            self.spot.check()
            if self.spot.mode == "none":
                raise InvalidValue("spot.mode", "a pool needs spot demand (saturated or rate)")
        if self.tick <= 0:
            raise InvalidValue("tick", "must be above 0")
        if self.join_seconds < 0 or self.flap_window < 0:
            raise InvalidValue("join_seconds", "join_seconds and flap_window must be >= 0")
        if not self.pool_hold >= 0:
            raise InvalidValue("pool_hold", f"must be >= 0, got {self.pool_hold}")
        if not self.flap_wait >= 0:
            raise InvalidValue("flap_wait", f"must be >= 0 (inf: never flap), got {self.flap_wait}")


def job_util(name: str) -> float:
    """The utilisation a job keeps its GPUs at (0.55..0.95), fixed by its name."""
    return 0.55 + 0.4 * (zlib.crc32(name.encode()) % 1000) / 1000.0


@dataclass(slots=True)
class _Node:
    rank: int
    node: Node
    gpus: int
    where: int = FREE
    cluster: int = -1
    ready: bool = True
    leaving: bool = False  # a pool node being reclaimed (cordoned, grace running)
    idle_since: float = 0.0
    # telemetry: utilisation integral and the rate it grows at now
    util_rate: float = 0.0
    util_int: float = 0.0
    util_t: float = 0.0
    util_mark: float = 0.0
    unneeded_since: float | None = None
    slot: int = -1  # its index in its cluster's snapshot while it is there and ready
    moves: int = 0  # bumped at every move: a join still under way for an older move is stale
    left_pool: float = -math.inf  # when a cluster last reclaimed it from the pool


@dataclass(slots=True)
class _Cluster:
    setup: ClusterSetup
    key: str
    sched: FleetScheduler
    nodes: set[int] = field(default_factory=set)
    last_out: float | None = None
    last_in: float | None = None
    removed_at: dict[int, float] = field(default_factory=dict)
    released: list[float] = field(default_factory=list)  # scale-in times not yet matched
    alloc_milli: int = 0
    peak: PeakWindow | None = None  # the stabilization window, when the spec has one


@dataclass(slots=True)
class _Spot:
    name: str
    nodes: int
    remaining: float
    status: int = QUEUED
    epoch: int = 0
    run_start: float = 0.0
    on: tuple[int, ...] = ()
    signalled: float | None = None


@dataclass(slots=True)
class WhatIfResult:
    """Totals of one run; :meth:`summary` is the report."""

    config: WhatIfConfig
    fleet_gpus: int
    start: float
    end: float
    jobs: int
    delays: list[float]
    pending_end: int
    gpu_s: dict[str, float]
    node_s_provisioned: float
    reclaim_latency: list[float]
    node_flaps: int
    cluster_flaps: int
    pool_flaps: int
    held_back: int
    max_exceeded: int
    grace_violations: int
    scale_outs: int
    scale_ins: int
    unmet_nodes: int
    tenant_evictions: int
    spot: dict[str, float]
    gpus_per_node: int
    wall_seconds: float
    plan_seconds: float
    ticks: int
    idle_split: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        g = {k: v / 3600.0 for k, v in self.gpu_s.items()}
        idle = g["idle"]
        unsold = g["idle_in_clusters"] + g["idle_free"] + g["idle_in_pool"]
        delays = np.asarray(self.delays) if self.delays else np.zeros(1)
        lat = np.asarray(self.reclaim_latency) if self.reclaim_latency else None
        pool = self.config.pool
        return {
            "rule": str(self.config.rule),
            "pool": pool is not None,
            "spot_demand": self.config.spot.mode if pool is not None else "none",
            "grace_seconds": pool.grace_seconds if pool is not None else None,
            "settle_seconds": pool.settle_seconds if pool is not None else None,
            "fleet_gpus": self.fleet_gpus,
            "hours": (self.end - self.start) / 3600.0,
            "jobs": self.jobs,
            "jobs_pending_at_end": self.pending_end,
            "gpu_hours": {
                "fleet": g["fleet"],
                "tenant_used": g["tenant"],
                "idle": idle,
                "pool_used": g["pool_used"],
                "idle_unsold": unsold,
                "idle_in_clusters": g["idle_in_clusters"],
                "idle_free_nodes": g["idle_free"],
                "idle_in_pool": g["idle_in_pool"],
            },
            "idle_in_clusters_sampled": {k: v / 3600.0 for k, v in self.idle_split.items()},
            "monetised_share": g["pool_used"] / idle if idle > 0 else 0.0,
            # what a pool of whole nodes could sell at most: the idle outside the clusters
            # (pool work never shares a node with tenant work)
            "outside_clusters_share": 1.0 - g["idle_in_clusters"] / idle if idle > 0 else 0.0,
            "reclaim_latency_s": {
                "count": 0 if lat is None else len(lat),
                "p50": 0.0 if lat is None else float(np.percentile(lat, 50)),
                "p99": 0.0 if lat is None else float(np.percentile(lat, 99)),
                "max": 0.0 if lat is None else float(lat.max()),
            },
            "queueing_delay_s": {
                "count": len(self.delays),
                "mean": float(delays.mean()),
                "p50": float(np.percentile(delays, 50)),
                "p95": float(np.percentile(delays, 95)),
                "p99": float(np.percentile(delays, 99)),
            },
            "node_hours": {
                "provisioned": self.node_s_provisioned / 3600.0,
                "used": g["tenant"] / self.gpus_per_node,
            },
            # node: the flap (a node re-added to the cluster that released it within
            # the window); cluster: any node added within the window after a release; pool: a
            # node reclaimed from the pool and settled back into it within the window
            "flaps": {
                "node": self.node_flaps,
                "cluster": self.cluster_flaps,
                "pool": self.pool_flaps,
            },
            "flap_wait_s": self.config.flap_wait if math.isfinite(self.config.flap_wait) else None,
            # recently released nodes a scale-out held back rather than flap, summed over passes
            "held_back_nodes": self.held_back,
            "max_exceeded": self.max_exceeded,
            "grace_violations": self.grace_violations,
            "scale_outs": self.scale_outs,
            "scale_ins": self.scale_ins,
            "unmet_scale_out_nodes": self.unmet_nodes,
            "tenant_evictions": self.tenant_evictions,
            "spot": dict(self.spot),
            "ticks": self.ticks,
            "plan_seconds": self.plan_seconds,
            "wall_seconds": self.wall_seconds,
        }


class WhatIf:
    """One run; call :meth:`run` once. ``planner``, ``settle`` and ``choose`` (the nodes of a
    scale-out, free and reclaimed) default to the engine's (the service's) functions."""

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        config: WhatIfConfig,
        planner: Callable[[Sequence[ClusterView], float], list[autoscale.Decision]] | None = None,
        settle: Callable[..., list[str]] | None = None,
        choose: Callable[..., autoscale.ScaleOutNodes] | None = None,
    ) -> None:
        config.check()
        if not nodes:
            raise InvalidValue("fleet", "has no nodes")
        self.config = config
        self.plan = planner or autoscale.plan
        self.settle = settle or idle_pool.settle
        self.choose = choose or autoscale.nodes_for_scale_out
        self.nodes = [_Node(r, n, len(n.gpus)) for r, n in enumerate(nodes)]
        self.by_name = {n.node.name: n for n in self.nodes}
        self.template = nodes[0]
        self.gpus_per_node = len(self.template.gpus)
        self.fleet_gpus = sum(n.gpus for n in self.nodes)
        # one stream for the tenants' placements, another for the spot buyers: the tenants'
        # side of a run with a pool draws exactly what it draws without one
        self.rng = np.random.default_rng(config.seed)
        self.spot_rng = np.random.default_rng([config.seed, 1])
        tenants = {c.tenant: k for k, c in enumerate(config.clusters)}
        self.jobs = sorted((j for j in jobs if j.tenant in tenants), key=lambda j: j.submit)
        unknown = {j.tenant for j in jobs} - set(tenants)
        if unknown:
            raise InvalidValue("trace", f"jobs of tenants without a cluster: {sorted(unknown)}")
        self.clusters: list[_Cluster] = []
        for c in config.clusters:
            sched = self._scheduler(self.rng)
            self.clusters.append(_Cluster(c, f"{c.tenant}.{c.tenant}", sched))
        self.pool_sched = self._scheduler(self.spot_rng) if config.pool is not None else None
        self.pool_nodes: set[int] = set()
        n = len(self.jobs)
        self.job_cluster = [tenants[j.tenant] for j in self.jobs]
        self.status = [FUTURE] * n
        self.remaining = [j.duration for j in self.jobs]
        self.epoch = [0] * n
        self.run_start = [0.0] * n
        self.queued_since = [0.0] * n
        self.first_start = [math.nan] * n
        self.shares: list[dict[int, float]] = [{} for _ in range(n)]
        self.util = [job_util(j.name) for j in self.jobs]
        self.index = {j.name: i for i, j in enumerate(self.jobs)}
        self.spots: list[_Spot] = []
        self.spot_index: dict[str, int] = {}
        self.spot_queued = 0
        self.spot_alloc_milli = 0
        self.tenant_milli = 0  # allocated to tenant jobs, all clusters
        self.held_gpus = 0  # GPUs of the nodes the clusters hold (joining ones included)
        self.pool_gpus = 0  # GPUs of the nodes the pool holds
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.last_t = 0.0
        self.gpu_s = dict.fromkeys(
            (
                "fleet",
                "tenant",
                "idle",
                "pool_used",
                "idle_in_clusters",
                "idle_free",
                "idle_in_pool",
            ),
            0.0,
        )
        self.node_s_provisioned = 0.0
        self.reclaim_latency: list[float] = []
        self.reclaim_started: dict[int, float] = {}
        self.node_flaps = 0
        self.cluster_flaps = 0
        self.pool_flaps = 0  # a node reclaimed from the pool and settled back within the window
        self.held_back = 0  # nodes a scale-out held back rather than flap, summed over passes
        self.waited: dict[int, float] = {}  # per cluster: its oldest waiting job's wait, now
        self.max_exceeded = 0
        self.grace_violations = 0
        self.scale_outs = 0
        self.scale_ins = 0
        self.unmet = 0
        self.tenant_evictions = 0
        self.spot_stats = dict.fromkeys(
            ("started", "evicted", "finished", "served_gpu_hours", "lost_gpu_hours"), 0.0
        )
        self.plan_seconds = 0.0
        self.ticks = 0
        # the idle GPU-seconds inside clusters by where they are, sampled at every tick
        self.idle_split = dict.fromkeys(("empty_nodes", "partly_used_nodes", "joining"), 0.0)
        self.dirty: set[int] = set()  # clusters to cycle (-1: the pool)

    def _scheduler(self, rng: np.random.Generator) -> FleetScheduler:
        policy = make_policy(self.config.policy, seed=self.config.seed)
        return FleetScheduler([], policy, QueuePolicy.DEFAULT, rng=rng)

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    # ------------------------------------------------------------------ accounting
    def _advance(self, t: float) -> None:
        dt = t - self.last_t
        if dt > 0:
            tenant = self.tenant_milli / 1000.0
            held = self.held_gpus
            pool_held = self.pool_gpus
            pool_used = self.spot_alloc_milli / 1000.0
            free = self.fleet_gpus - held - pool_held
            g = self.gpu_s
            g["fleet"] += self.fleet_gpus * dt
            g["tenant"] += tenant * dt
            g["idle"] += (self.fleet_gpus - tenant) * dt
            g["pool_used"] += pool_used * dt
            g["idle_in_clusters"] += (held - tenant) * dt
            g["idle_free"] += free * dt
            g["idle_in_pool"] += (pool_held - pool_used) * dt
            self.node_s_provisioned += held / self.gpus_per_node * dt
        self.last_t = t
        self.now = t

    def _util_change(self, r: int, delta: float) -> None:
        """Node ``r``'s utilisation (0..1 of its GPUs busy) moves by ``delta`` (telemetry)."""
        node = self.nodes[r]
        node.util_int += node.util_rate * (self.now - node.util_t)
        node.util_t = self.now
        node.util_rate = max(0.0, node.util_rate + delta)

    # ------------------------------------------------------------------ tenant jobs
    def _ranks(self, sched: FleetScheduler, slots: Sequence[int]) -> tuple[int, ...]:
        names = sched.snapshot.names
        return tuple(self.by_name[names[s]].rank for s in slots)

    def _start(self, i: int, shares: dict[int, float]) -> None:
        """Job ``i`` runs with ``shares``: per node rank, the share of the node's GPUs it holds."""
        c = self.clusters[self.job_cluster[i]]
        t = self.now
        self.status[i] = RUNNING
        self.run_start[i] = t
        self.epoch[i] += 1
        if math.isnan(self.first_start[i]):
            self.first_start[i] = t
        self.shares[i] = shares
        c.alloc_milli += self.jobs[i].milli_gpu
        self.tenant_milli += self.jobs[i].milli_gpu
        u = self.util[i]
        for r, share in shares.items():
            self._util_change(r, u * share)
        self._push(t + self.remaining[i], _FINISH, (i, self.epoch[i]))

    def _stop(self, i: int) -> float:
        c = self.clusters[self.job_cluster[i]]
        c.alloc_milli -= self.jobs[i].milli_gpu
        self.tenant_milli -= self.jobs[i].milli_gpu
        u = self.util[i]
        for r, share in self.shares[i].items():
            self._util_change(r, -u * share)
        self.shares[i] = {}
        return self.now - self.run_start[i]

    def _admitted(self, k: int, name: str, placement: Any) -> None:
        if k < 0:
            self._spot_admitted(name, placement)
            return
        i = self.index[name]
        names = self.clusters[k].sched.snapshot.names
        shares: dict[int, float] = {}
        for p in placement.pods:
            node = self.by_name[names[p.placement.node]]
            shares[node.rank] = shares.get(node.rank, 0.0) + p.pod.gpus / node.gpus
        self._start(i, shares)

    def _evicted(self, i: int) -> None:
        """Job ``i`` was displaced (its node drained): it queues again from its checkpoint."""
        ran = self._stop(i)
        ckpt = self.jobs[i].checkpoint
        saved = min(ran, math.floor(ran / ckpt) * ckpt) if ckpt > 0 else 0.0
        self.remaining[i] -= saved
        self.epoch[i] += 1
        self.status[i] = QUEUED
        self.queued_since[i] = self.now
        self.tenant_evictions += 1

    # ------------------------------------------------------------------ spot jobs
    def _new_spot(self) -> None:
        d = self.config.spot
        w = np.asarray(d.weights, dtype=float)
        nodes = int(self.spot_rng.choice(np.asarray(d.nodes), p=w / w.sum()))
        k = len(self.spots)
        name = f"spot-{k:07d}"
        spot = _Spot(name, nodes, float(self.spot_rng.exponential(d.mean_seconds)) + 1.0)
        self.spots.append(spot)
        self.spot_index[name] = k
        pod = _gpu_pod(self.gpus_per_node)
        workload = Workload(name, (PodSet("main", nodes, pod),))
        assert self.pool_sched is not None
        self.pool_sched.submit(Request(name, workload, "spot", 0, self.now), self.now)
        self.spot_queued += 1
        self.dirty.add(-1)

    def _top_up(self) -> None:
        """Saturated demand: at least as many spot jobs wait as the pool has nodes."""
        if self.config.spot.mode == "saturated" and self.pool_sched is not None:
            while self.spot_queued < len(self.pool_nodes) + 1:
                self._new_spot()

    def _spot_admitted(self, name: str, placement: Any) -> None:
        spot = self.spots[self.spot_index[name]]
        assert self.pool_sched is not None
        spot.status = RUNNING
        spot.run_start = self.now
        spot.epoch += 1
        spot.signalled = None
        spot.on = self._ranks(self.pool_sched, [p.placement.node for p in placement.pods])
        self.spot_queued -= 1
        self.spot_alloc_milli += spot.nodes * self.gpus_per_node * 1000
        self.spot_stats["started"] += 1
        self._push(self.now + spot.remaining, _SPOT_FINISH, (self.spot_index[name], spot.epoch))

    def _spot_stop(self, spot: _Spot, finished: bool) -> None:
        ran = self.now - spot.run_start
        gpus = spot.nodes * self.gpus_per_node
        self.spot_alloc_milli -= gpus * 1000
        ckpt = self.config.spot.checkpoint
        saved = ran if finished else (min(ran, math.floor(ran / ckpt) * ckpt) if ckpt > 0 else 0.0)
        spot.remaining -= saved
        self.spot_stats["served_gpu_hours"] += gpus * saved / 3600.0
        self.spot_stats["lost_gpu_hours"] += gpus * (ran - saved) / 3600.0
        spot.on = ()
        if finished:
            spot.status = FINISHED
            self.spot_stats["finished"] += 1
        else:
            spot.status = QUEUED
            spot.epoch += 1
            self.spot_queued += 1
            self.spot_stats["evicted"] += 1
            if spot.signalled is None or self.now - spot.signalled < self._grace() - 1e-9:
                self.grace_violations += 1
            spot.signalled = None

    def _grace(self) -> float:
        return self.config.pool.grace_seconds if self.config.pool is not None else 0.0

    # ------------------------------------------------------------------ node moves
    def _join_cluster(self, r: int, k: int, t_decided: float, from_pool: bool) -> None:
        """Node ``r`` is handed to cluster ``k`` (counted there already): allocatable after
        the join time."""
        node = self.nodes[r]
        node.where, node.cluster, node.ready, node.leaving = CLUSTER, k, False, False
        node.unneeded_since = None
        node.moves += 1
        self._push(
            self.now + self.config.join_seconds, _READY, (r, k, t_decided, from_pool, node.moves)
        )

    def _scale_out(self, k: int, count: int) -> None:
        """The planner asked cluster ``k`` for ``count`` nodes: which ones is the engine's
        :func:`~gpuaas.engine.autoscale.nodes_for_scale_out` (the service's one rule): free
        nodes first (by rank), then pool nodes, never one this cluster released within the
        flap window while another will do; when only such nodes are left, one is taken once
        the cluster's oldest waiting job has waited ``flap_wait`` (a flap, counted)."""
        c = self.clusters[k]
        t = self.now
        window = self.config.flap_window
        for r in [r for r, at in c.removed_at.items() if at < t - window]:
            del c.removed_at[r]
        released = {self.nodes[r].node.name: at for r, at in c.removed_at.items()}
        free = [n.node.name for n in self.nodes if n.where == FREE and n.ready]
        pool: list[PoolNode] = []
        signalled: list[int] = []
        if self.pool_nodes:
            pool = [
                PoolNode(self.nodes[r].node.name, self.nodes[r].gpus, self._pool_jobs(r))
                for r in sorted(self.pool_nodes)
                if not self.nodes[r].leaving
            ]
            signalled = [
                k
                for k, s in enumerate(self.spots)
                if s.status == RUNNING and s.signalled is not None
            ]
        choice = self.choose(
            count,
            free,
            pool,
            self._matches,
            released,
            t,
            window=window,
            disturbed=signalled,
            waited=self.waited.get(k, 0.0),
            max_wait=self.config.flap_wait,
        )
        take = [self.by_name[name].rank for name in choice.free]
        reclaimed = [self.by_name[name].rank for name in choice.reclaim]
        self.unmet += count - len(take) - len(reclaimed)
        self.held_back += choice.held
        added = take + reclaimed
        if not added:
            return
        self.scale_outs += 1
        c.last_out = t
        for r in added:
            if c.removed_at.get(r, -math.inf) >= t - window:
                self.node_flaps += 1
            c.nodes.add(r)
            self.held_gpus += self.nodes[r].gpus
        matched = 0
        while c.released and matched < len(added):
            if c.released[0] >= t - window:
                matched += 1
            c.released.pop(0)
        self.cluster_flaps += matched
        if len(c.nodes) > c.setup.max_nodes:
            self.max_exceeded += 1
        for r in take:
            self._join_cluster(r, k, t, from_pool=False)
        for r in reclaimed:
            self._reclaim_node(r, k, t)

    def _matches(self, name: str) -> bool:
        node = self.by_name[name].node
        return node.gpu_model == self.template.gpu_model and len(node.gpus) == self.gpus_per_node

    def _pool_jobs(self, r: int) -> tuple[int, ...]:
        assert self.pool_sched is not None
        slot = self.pool_sched.snapshot.index_of(self.nodes[r].node.name)
        on = self.pool_sched.on_node.get(slot, ())
        return tuple(sorted(self.spot_index[self.pool_sched.requests[i].name] for i in on))

    def _reclaim_node(self, r: int, k: int, t: float) -> None:
        """Take pool node ``r`` for cluster ``k``: cordon it, signal its spot jobs, evict them
        after the grace period (at once when it runs none)."""
        assert self.pool_sched is not None
        node = self.nodes[r]
        node.left_pool = t
        if not node.ready:  # still joining the pool: not in its scheduler yet, runs nothing
            self.pool_nodes.discard(r)
            self.pool_gpus -= node.gpus
            self._join_cluster(r, k, t, from_pool=True)
            return
        node.leaving = True
        node.cluster = k
        name = node.node.name
        self.pool_sched.nodes_changed([CordonNode(name)])
        jobs = self._pool_jobs(r)
        for s in jobs:
            spot = self.spots[s]
            if spot.signalled is None:
                spot.signalled = t
        if jobs:
            self._push(t + self._grace(), _GRACE_END, (r, k, t))
        else:
            self._leave_pool(r)
            self._join_cluster(r, k, t, from_pool=True)

    def _leave_pool(self, r: int) -> None:
        assert self.pool_sched is not None
        name = self.nodes[r].node.name
        displaced = self.pool_sched.nodes_changed([CordonNode(name, drain=True), RemoveNode(name)])
        for moved in displaced:
            spot = self.spots[self.spot_index[moved.workload]]
            if spot.status == RUNNING:
                self._spot_stop(spot, finished=False)
        self.pool_nodes.discard(r)
        self.pool_gpus -= self.nodes[r].gpus
        self.dirty.add(-1)

    def _scale_in(self, k: int, names: Sequence[str]) -> None:
        c = self.clusters[k]
        t = self.now
        changes: list[CordonNode | RemoveNode] = []
        leaving = []
        for name in names:
            r = self.by_name[name].rank
            if r not in c.nodes:
                raise InvalidValue("plan", f"scale-in of node {name}, not in cluster {c.key}")
            changes += [CordonNode(name, drain=True), RemoveNode(name)]
            leaving.append(r)
        if not leaving:
            return
        for r in leaving:
            if not self.nodes[r].ready:  # still joining: it was never added to the scheduler
                raise InvalidValue("plan", f"scale-in of node {self.nodes[r].node.name}, not ready")
        for moved in c.sched.nodes_changed(changes):
            i = self.index[moved.workload]
            if self.status[i] == RUNNING:
                self._evicted(i)
        self.scale_ins += 1
        c.last_in = t
        for r in leaving:
            c.nodes.discard(r)
            self.held_gpus -= self.nodes[r].gpus
            c.removed_at[r] = t
            c.released.append(t)
            node = self.nodes[r]
            node.where, node.cluster, node.idle_since = FREE, -1, t
            node.unneeded_since = None
        self.dirty.add(k)

    # ------------------------------------------------------------------ the control loop
    def _facts(self, c: _Cluster) -> tuple[NodeFacts, ...]:
        """What the planner reads of each node the cluster holds (see the module docstring)."""
        t = self.now
        span = self.config.tick
        requests = self.config.rule is ScaleInRule.REQUESTS
        below = c.setup.spec.scale_in_below_percent / 100.0
        full_free = c.sched.snapshot.full_free.tolist()
        nodes = self.nodes
        members = sorted(c.nodes)
        ready = [nodes[r].where == CLUSTER and nodes[r].ready for r in members]
        ready_free = sum(
            full_free[nodes[r].slot] for r, ok in zip(members, ready, strict=True) if ok
        )
        out = []
        split = self.idle_split
        for r, ok in zip(members, ready, strict=True):
            node = nodes[r]
            if not ok:
                split["joining"] += node.gpus * span
                out.append(NodeFacts(node.node.name, NODE_POOL, 0.0, None, None, 0.0, False))
                continue
            node.util_int += node.util_rate * (t - node.util_t)
            node.util_t = t
            mean = (node.util_int - node.util_mark) / span
            node.util_mark = node.util_int
            free = full_free[node.slot]
            used = node.gpus - free
            split["empty_nodes" if used == 0 else "partly_used_nodes"] += free * span
            allocated = used / node.gpus
            if requests:  # the requested share stands in for utilisation
                util = UtilSummary(allocated, allocated, 1, span, t)
                unneeded = allocated < CA_THRESHOLD and used <= ready_free - free
            else:
                util = UtilSummary(mean, mean, 1, span, t)
                unneeded = used == 0 and mean < below
            if not unneeded:
                node.unneeded_since = None
            elif node.unneeded_since is None:
                node.unneeded_since = t
            out.append(
                NodeFacts(node.node.name, NODE_POOL, allocated, util, node.unneeded_since, used)
            )
        return tuple(out)

    def _pending(self, k: int) -> tuple[Pending, ...]:
        c = self.clusters[k]
        waiting = c.sched.waiting
        out = []
        for name, why in waiting.items():
            i = self.index[name]
            if self.status[i] == QUEUED:
                out.append(Pending(i, self.jobs[i].workload, why, self.queued_since[i]))
        return tuple(out)

    def _tick(self) -> None:
        self.ticks += 1
        views = []
        for k, c in enumerate(self.clusters):
            s = c.setup
            facts = self._facts(c)
            pending = self._pending(k)
            self.waited[k] = self.now - min((p.since for p in pending), default=self.now)
            peak = 0
            if s.spec.stabilization_seconds > 0:
                if c.peak is None:
                    c.peak = PeakWindow(s.spec.stabilization_seconds, self.now)
                peak = c.peak.see(self.now, nodes_needed(facts))
            views.append(
                ClusterView(
                    key=c.key,
                    spec=s.spec,
                    pools=(
                        PoolView(
                            NODE_POOL,
                            s.min_nodes,
                            s.max_nodes,
                            self.template,
                            facts,
                            recent_peak=peak,
                        ),
                    ),
                    pending=pending,
                    last_scale_out=c.last_out,
                    last_scale_in=c.last_in,
                )
            )
        wall = time.perf_counter()
        decisions = self.plan(views, self.now)
        self.plan_seconds += time.perf_counter() - wall
        keys = {c.key: k for k, c in enumerate(self.clusters)}
        for d in decisions:
            k = keys[d.cluster]
            if d.action is Action.SCALE_OUT:
                self._scale_out(k, d.count)
            else:
                self._scale_in(k, d.nodes)
        pool = self.config.pool
        # as the service's pool loop: nothing settles while a reclaim is in flight (the pool
        # is giving nodes to tenants)
        if pool is not None and not any(self.nodes[r].leaving for r in self.pool_nodes):
            free = [
                FreeNode(
                    n.node.name,
                    n.idle_since,
                    n.gpus,
                    n.left_pool if math.isfinite(n.left_pool) else None,
                )
                for n in self.nodes
                if n.where == FREE and n.ready
            ]
            if free:
                hold = self.config.pool_hold
                for name in self.settle(free, pool, len(self.pool_nodes), self.now, hold):
                    r = self.by_name[name].rank
                    node = self.nodes[r]
                    if node.where != FREE:
                        raise InvalidValue("settle", f"node {name} is not free")
                    if node.left_pool >= self.now - self.config.flap_window:
                        self.pool_flaps += 1
                    node.where, node.ready = POOL, False
                    node.moves += 1
                    self.pool_nodes.add(r)
                    self.pool_gpus += node.gpus
                    self._push(
                        self.now + self.config.join_seconds,
                        _READY,
                        (r, -1, self.now, False, node.moves),
                    )

    def audit(self) -> None:
        """Check the partition of the fleet (raises :class:`AssertionError`): every node is in
        exactly one place (free, one cluster, the pool; a pool node being reclaimed is counted
        by its cluster but cordoned in the pool and not schedulable there), each scheduler
        holds exactly the ready nodes of its place, and no cluster holds more than its max.
        Tests call it after every control-loop pass (``WhatIfConfig.audit``)."""
        seen: dict[int, str] = {}
        for k, c in enumerate(self.clusters):
            for r in c.nodes:
                assert r not in seen, f"node {r} in cluster {k} and {seen[r]}"
                seen[r] = f"cluster {k}"
                assert self.nodes[r].cluster == k
            assert len(c.nodes) <= c.setup.max_nodes or self.max_exceeded > 0
            ready = {
                self.nodes[r].node.name
                for r in c.nodes
                if self.nodes[r].where == CLUSTER and self.nodes[r].ready
            }
            names = set(c.sched.snapshot.names) - {""}
            assert names == ready, f"cluster {k} schedules {names ^ ready} wrongly"
        for r in self.pool_nodes:
            node = self.nodes[r]
            assert node.where == POOL
            # a reclaimed node is the cluster's (counted against its max) from the decision,
            # but schedulable there only once it has left the pool: cordoned here meanwhile
            assert r not in seen or node.leaving, f"node {r} in the pool and {seen.get(r)}"
            seen[r] = "pool"
        if self.pool_sched is not None:
            names = set(self.pool_sched.snapshot.names) - {""}
            ready = {self.nodes[r].node.name for r in self.pool_nodes if self.nodes[r].ready}
            assert names == ready, f"the pool schedules {names ^ ready} wrongly"
        for node in self.nodes:
            if node.rank not in seen:
                assert node.where == FREE, f"node {node.rank} is in no place but not free"
        assert self.held_gpus == sum(self.nodes[r].gpus for c in self.clusters for r in c.nodes)
        assert self.pool_gpus == sum(self.nodes[r].gpus for r in self.pool_nodes)

    def _ready(self, r: int, k: int, decided: float, from_pool: bool, moves: int) -> None:
        node = self.nodes[r]
        if node.moves != moves:  # it moved again before it was ready
            return
        node.ready = True
        if k < 0:
            assert self.pool_sched is not None
            self.pool_sched.nodes_changed([AddNode(node.node)])
            self._top_up()
            self.dirty.add(-1)
            return
        c = self.clusters[k]
        c.sched.nodes_changed([AddNode(node.node)])
        node.slot = c.sched.snapshot.index_of(node.node.name)
        node.util_t, node.util_int, node.util_mark, node.util_rate = self.now, 0.0, 0.0, 0.0
        if from_pool:
            self.reclaim_latency.append(self.now - decided)
        self.dirty.add(k)

    def _grace_end(self, r: int, k: int, decided: float) -> None:
        self._leave_pool(r)
        self._join_cluster(r, k, decided, from_pool=True)

    def _cycle(self) -> None:
        for k in sorted(self.dirty):
            if k < 0:
                assert self.pool_sched is not None
                self._top_up()
                decisions = self.pool_sched.cycle(self.now)
            else:
                decisions = self.clusters[k].sched.cycle(self.now)
            for ev in decisions.evicted:  # preemption (priorities); not used by the mix
                raise InvalidValue("whatif", f"unexpected eviction of {ev.name}")
            for a in decisions.admitted:
                self._admitted(k, a.name, a.placement)
        self.dirty.clear()

    def run(self) -> WhatIfResult:
        wall = time.perf_counter()
        cfg = self.config
        start = self.jobs[0].submit if self.jobs else 0.0
        start = min(start, 0.0)
        self.now = self.last_t = start
        end = cfg.until if cfg.until is not None else (self.jobs[-1].submit if self.jobs else 0.0)
        # clusters start at their min, ready
        r = 0
        for k, c in enumerate(self.clusters):
            for _ in range(c.setup.min_nodes):
                if r >= len(self.nodes):
                    raise InvalidValue("clusters", "the mins need more nodes than the fleet has")
                node = self.nodes[r]
                node.where, node.cluster = CLUSTER, k
                c.nodes.add(r)
                self.held_gpus += node.gpus
                c.sched.nodes_changed([AddNode(node.node)])
                node.slot = c.sched.snapshot.index_of(node.node.name)
                r += 1
        for node in self.nodes:
            node.idle_since = start
        spot_times: list[float] = []
        if cfg.pool is not None and cfg.spot.mode == "rate":
            rate = cfg.spot.per_hour / 3600.0
            gaps = self.spot_rng.exponential(1 / rate, size=int(rate * (end - start) * 1.5) + 16)
            spot_times = [float(x) for x in start + np.cumsum(gaps) if x + start < end]
        self._push(start, _TICK, None)
        jobs, n_jobs, nxt, ns = self.jobs, len(self.jobs), 0, 0
        while True:
            t_arr = jobs[nxt].submit if nxt < n_jobs else math.inf
            t_spot = spot_times[ns] if ns < len(spot_times) else math.inf
            t_ev = self.heap[0][0] if self.heap else math.inf
            t = min(t_arr, t_spot, t_ev)
            if t > end or t == math.inf:
                break
            self._advance(t)
            while self.heap and self.heap[0][0] == t and self.heap[0][1] < _TICK:
                _, kind, _, payload = heapq.heappop(self.heap)
                self._handle(kind, payload)
            while nxt < n_jobs and jobs[nxt].submit == t:
                job = jobs[nxt]
                k = self.job_cluster[nxt]
                self.status[nxt] = QUEUED
                self.queued_since[nxt] = t
                self.clusters[k].sched.submit(
                    Request(job.name, job.workload, job.tenant, job.priority, job.submit), t
                )
                self.dirty.add(k)
                nxt += 1
            while ns < len(spot_times) and spot_times[ns] == t:
                self._new_spot()
                ns += 1
            self._cycle()  # arrivals and frees are placed before the control loop looks
            while self.heap and self.heap[0][0] == t:
                _, kind, _, payload = heapq.heappop(self.heap)
                if kind == _TICK:
                    self._tick()
                    if cfg.audit:
                        self.audit()
                    self._push(t + cfg.tick, _TICK, None)
                else:
                    self._handle(kind, payload)
            self._cycle()
        self._advance(end)
        delays = [s - j.submit for j, s in zip(self.jobs, self.first_start, strict=True) if s == s]
        pending = sum(1 for s in self.status if s == QUEUED)
        return WhatIfResult(
            config=cfg,
            fleet_gpus=self.fleet_gpus,
            start=start,
            end=end,
            jobs=n_jobs,
            delays=delays,
            pending_end=pending,
            gpu_s=dict(self.gpu_s),
            node_s_provisioned=self.node_s_provisioned,
            reclaim_latency=self.reclaim_latency,
            node_flaps=self.node_flaps,
            cluster_flaps=self.cluster_flaps,
            pool_flaps=self.pool_flaps,
            held_back=self.held_back,
            max_exceeded=self.max_exceeded,
            grace_violations=self.grace_violations,
            scale_outs=self.scale_outs,
            scale_ins=self.scale_ins,
            unmet_nodes=self.unmet,
            tenant_evictions=self.tenant_evictions,
            spot=dict(self.spot_stats),
            gpus_per_node=self.gpus_per_node,
            wall_seconds=time.perf_counter() - wall,
            plan_seconds=self.plan_seconds,
            ticks=self.ticks,
            idle_split=dict(self.idle_split),
        )

    def _handle(self, kind: int, payload: Any) -> None:
        if kind == _FINISH:
            i, epoch = payload
            if self.status[i] == RUNNING and self.epoch[i] == epoch:
                k = self.job_cluster[i]
                self._stop(i)
                self.clusters[k].sched.finish(self.jobs[i].name)
                self.status[i] = FINISHED
                self.remaining[i] = 0.0
                self.dirty.add(k)
        elif kind == _SPOT_FINISH:
            s, epoch = payload
            spot = self.spots[s]
            if spot.status == RUNNING and spot.epoch == epoch:
                assert self.pool_sched is not None
                self._spot_stop(spot, finished=True)
                self.pool_sched.finish(spot.name)
                self.dirty.add(-1)
        elif kind == _READY:
            self._ready(*payload)
        elif kind == _GRACE_END:
            self._grace_end(*payload)


def run_whatif(
    nodes: Sequence[Node], jobs: Sequence[SimJob], config: WhatIfConfig, **engine: Any
) -> WhatIfResult:
    """One what-if run (see the module docstring)."""
    return WhatIf(nodes, jobs, config, **engine).run()
