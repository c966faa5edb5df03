"""Data locality in the simulator: a trace that names datasets, node caches that warm and evict
as jobs complete and preloads run, and the two figures issue 15 asks for.

The fleet is the synthetic cloud (:func:`~gpuaas.sim.synthetic.synthetic_fleet`, whole GPUs
only) with four RDMA NICs per node as plain data (:attr:`~gpuaas.model.node.Node.nics`: one per
two GPUs, on their PCIe root and NUMA node, NIC *k* on rail *k*). The trace
(:func:`dataset_trace`) is Poisson arrivals offering ``load`` times the fleet's GPUs, single pods
of 1, 2, 4 or 8 GPUs and gangs of 2-4 eight-GPU pods, log-normal run times; ``data_share`` of
the jobs read one of ``datasets`` datasets (popularity Zipf(``zipf``), sizes 50 GiB - 2 TiB).

Each node has a dataset cache of ``cache_bytes`` with least-recently-used eviction (the policy
the service applies, docs/datasets.md). A dataset turns warm on a node when a job that read it
completes there, and by preloads: at the start each dataset is preloaded on
``preload_nodes`` random nodes, and every ``preload_every`` seconds the most requested dataset
so far is preloaded on ``preload_nodes`` more. The warm sets reach the scheduler in place
(:meth:`~gpuaas.engine.scheduling.fleet.FleetScheduler.datasets_changed`), exactly as the
service hands them over; the scheduler is the simulator's ordinary fleet strategy, placing with
:func:`~gpuaas.engine.locality.place_reading`.

The figures, for one trace run twice (with and without locality; same fleet, jobs, seed):

- **warm placements, % of the best possible**: among the jobs placed while reading a dataset,
  those for which a warm placement existed at their placement time (the engine's own placement
  restricted to the warm nodes, probed on the snapshot just before the job's placement and
  undone), the share placed with every pod on a warm node. The probe is greedy (the engine's
  placement, not an exhaustive search), so "best possible" is what this engine could have done
  at that moment, not a global optimum over the whole run;
- **unallocated GPU %** over the arrival window (first to last arrival; the run is cut there,
  so the drain at the end does not count): 100 x (1 - allocated GPU-seconds / GPU-seconds),
  with and without locality, and the difference in points.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.locality import DEFAULT_WEIGHT, DatasetKey
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.scheduling.fleet import FleetScheduler
from gpuaas.model.dataset import DataRequest
from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import LinkType, Nic
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest, PodSet, Workload
from gpuaas.sim.simulate import SimConfig, Simulator
from gpuaas.sim.synthetic import FleetSpec, synthetic_fleet
from gpuaas.sim.traces import SimJob

GIB = 1 << 30
TENANT = "default"


@dataclass(frozen=True, slots=True)
class LocalitySpec:
    """The fleet, the trace and the caches of one locality run (see the module docstring)."""

    nodes: int = 128
    jobs: int = 3000
    datasets: int = 40
    zipf: float = 1.1
    data_share: float = 0.8
    load: float = 1.2
    mean_duration: float = 3600.0
    gang_share: float = 0.1
    cache_bytes: int = 4 << 40
    preload_nodes: int = 2
    preload_every: float = 3600.0
    weight: float = DEFAULT_WEIGHT
    seed: int = 0

    def validate(self) -> None:
        for name in ("nodes", "jobs", "datasets"):
            if getattr(self, name) < 1:
                raise InvalidValue(name, f"must be at least 1, got {getattr(self, name)}")
        for name in ("data_share", "gang_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidValue(name, f"must be within 0..1, got {getattr(self, name)}")
        if self.load <= 0 or self.mean_duration <= 0 or self.cache_bytes <= 0:
            raise InvalidValue("load", "load, mean duration and cache size must be > 0")


def with_nics(node: Node, per_node: int = 4) -> Node:
    """``node`` with ``per_node`` InfiniBand NICs, each beside a share of its GPUs."""
    gpus = node.gpus
    share = max(1, len(gpus) // per_node) if gpus else 1
    nics = []
    for k in range(per_node):
        near = gpus[k * share] if k * share < len(gpus) else None
        nics.append(
            Nic(
                name=f"mlx5_{k}",
                pool="nvidia.com/rdma_ib",
                link=LinkType.INFINIBAND,
                speed_gbps=400,
                vfs=8,
                pcie_root=(near.pcie_root if near is not None and near.pcie_root else f"pci{k}"),
                numa_node=k * 2 // per_node,
                rail=f"rail-{k}",
                fabric="ib0",
            )
        )
    return dataclasses.replace(node, nics=nics)


def locality_fleet(spec: LocalitySpec) -> list[Node]:
    """The synthetic fleet, whole GPUs only, with NICs."""
    fleet_spec = FleetSpec(nodes=spec.nodes, mig_node_share=0.0, time_sliced_node_share=0.0)
    return [with_nics(n) for n in synthetic_fleet(fleet_spec, seed=spec.seed)]


def dataset_trace(spec: LocalitySpec, fleet_gpus: int) -> tuple[list[SimJob], dict[str, int]]:
    """The jobs and the datasets (name -> bytes) of a run (see the module docstring)."""
    spec.validate()
    rng = random.Random(spec.seed)
    sizes = {f"ds-{d:03d}": rng.randint(50, 2048) * GIB for d in range(spec.datasets)}
    names = list(sizes)
    weights = [1.0 / (k + 1) ** spec.zipf for k in range(len(names))]
    singles = ((1, 0.3), (2, 0.25), (4, 0.25), (8, 0.2))
    mean_gpus = (1 - spec.gang_share) * sum(g * p for g, p in singles) + spec.gang_share * 24
    rate = spec.load * fleet_gpus / (mean_gpus * spec.mean_duration)  # arrivals per second
    sigma = 1.0
    mu = math.log(spec.mean_duration) - sigma * sigma / 2
    jobs: list[SimJob] = []
    t = 0.0
    for j in range(spec.jobs):
        t += rng.expovariate(rate)
        if rng.random() < spec.gang_share:
            pods, gpus = rng.randint(2, 4), 8
        else:
            pods, gpus = 1, rng.choices([g for g, _ in singles], [p for _, p in singles])[0]
        pod = PodRequest(cpu_milli=gpus * 8000, memory_bytes=gpus * 64 * GIB, gpus=gpus)
        data = None
        if rng.random() < spec.data_share:
            data = DataRequest(rng.choices(names, weights)[0])
        name = f"job-{j:05d}"
        workload = Workload(name, (PodSet("main", pods, pod),), data=data)
        duration = min(rng.lognormvariate(mu, sigma), 20 * spec.mean_duration)
        jobs.append(SimJob(name, t, duration, workload, TENANT))
    return jobs, sizes


class _ProbingFleet(FleetScheduler):
    """The fleet strategy, which also records, for each placement of a job reading a dataset,
    whether a warm placement existed just before it (the probe) and whether it got one.
    ``locality`` False: the data request is ignored when placing (the run without locality)."""

    locality = True

    def _place(self, i: int) -> GangPlacement | Unschedulable:
        request = self.requests[i]
        data = request.workload.data
        if data is None:
            return super()._place(i)
        key: DatasetKey = (request.queue, data.dataset)
        mask = self.warm.mask(self.snapshot, key)
        feasible = False
        if mask is not None:
            probe = place_workload(self.snapshot, request.workload, self.policy, within=mask)
            if isinstance(probe, GangPlacement):
                feasible = True
                release(self.snapshot, probe, self.policy)
        if self.locality:
            result = super()._place(i)
        else:
            result = place_workload(self.snapshot, request.workload, self.policy, rng=self.rng)
        if isinstance(result, GangPlacement):
            warm = self.warm.nodes(key)
            on_warm = all(self.snapshot.names[n] in warm for n in result.nodes)
            self.probes[request.name] = (feasible, on_warm)
        return result


@dataclass(slots=True)
class LocalityFigures:
    """What one run measured (see the module docstring)."""

    locality: bool
    jobs_with_data: int = 0
    placed_warm: int = 0
    warm_possible: int = 0
    warm_when_possible: int = 0
    unallocated_pct: float = 0.0
    evictions: int = 0
    preloads: int = 0
    warm_sets_pushed: int = 0
    wall_seconds: float = 0.0

    @property
    def warm_of_best_pct(self) -> float:
        if not self.warm_possible:
            return 100.0
        return 100.0 * self.warm_when_possible / self.warm_possible

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["warm_of_best_pct"] = self.warm_of_best_pct
        return out


class LocalitySimulator(Simulator):
    """The simulator with node caches (see the module docstring)."""

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        sizes: dict[str, int],
        spec: LocalitySpec,
        locality: bool,
        config: SimConfig,
    ) -> None:
        super().__init__(nodes, jobs, config)
        fleet = _ProbingFleet(
            self.nodes,
            self.policy,
            queue_policy=config.queue_policy,
            reserve_after=config.reserve_after,
            preemption=config.preemption,
            tenant_weights=config.tenant_weights,
            rng=self.rng,
        )
        fleet.locality = locality
        fleet.locality_weight = spec.weight
        fleet.probes = {}  # type: ignore[attr-defined]
        self.scheduler = self.fleet = fleet
        self.snap = fleet.snapshot
        self.spec = spec
        self.sizes = sizes
        self.figures = LocalityFigures(locality)
        self.caches: dict[str, OrderedDict[str, int]] = {n.name: OrderedDict() for n in nodes}
        self.demand: dict[str, int] = dict.fromkeys(sizes, 0)
        self.place_rng = random.Random(spec.seed + 1)
        self.next_preload = (jobs[0].submit if jobs else 0.0) + spec.preload_every
        changed: set[str] = set()
        for name in sizes:
            changed |= self._preload(name)
        self._push(changed)

    # --- caches ---------------------------------------------------------------------------
    def _warm(self, node: str, dataset: str) -> set[str]:
        """``dataset`` is warm on ``node`` (most recently used); returns the datasets whose
        warm set changed (evictions included)."""
        cache = self.caches[node]
        size = self.sizes[dataset]
        if size > self.spec.cache_bytes:
            return set()
        changed = set() if dataset in cache else {dataset}
        cache[dataset] = size
        cache.move_to_end(dataset)
        while sum(cache.values()) > self.spec.cache_bytes:
            gone, _ = cache.popitem(last=False)
            self.figures.evictions += 1
            changed.add(gone)
        return changed

    def _preload(self, dataset: str) -> set[str]:
        nodes = self.place_rng.sample(
            sorted(self.caches), min(self.spec.preload_nodes, len(self.caches))
        )
        self.figures.preloads += len(nodes)
        changed: set[str] = set()
        for node in nodes:
            changed |= self._warm(node, dataset)
        return changed

    def _push(self, changed: set[str]) -> None:
        if not changed:
            return
        warm = {(TENANT, d): [n for n, cache in self.caches.items() if d in cache] for d in changed}
        self.fleet.datasets_changed(warm)
        self.figures.warm_sets_pushed += 1

    # --- the job life, with caches ----------------------------------------------------------
    def _start(self, i: int, placed: GangPlacement | None, t: float) -> None:
        super()._start(i, placed, t)
        job = self.jobs[i]
        data = job.workload.data
        if data is None or placed is None:
            return
        self.demand[data.dataset] += 1
        probe = self.fleet.probes.pop(job.name, None)  # type: ignore[attr-defined]
        if probe is None:
            return
        feasible, on_warm = probe
        fig = self.figures
        fig.jobs_with_data += 1
        fig.placed_warm += on_warm
        fig.warm_possible += feasible
        fig.warm_when_possible += feasible and on_warm
        for n in placed.nodes:  # a warm cache read is a use
            cache = self.caches[self.snap.names[n]]
            if data.dataset in cache:
                cache.move_to_end(data.dataset)

    def _finish(self, i: int, t: float) -> None:
        nodes = [self.snap.names[n] for n in self.on[i]]
        super()._finish(i, t)
        data = self.jobs[i].workload.data
        changed: set[str] = set()
        if data is not None:
            for node in dict.fromkeys(nodes):
                changed |= self._warm(node, data.dataset)
        while t >= self.next_preload:
            self.next_preload += self.spec.preload_every
            top = max(self.demand, key=lambda d: (self.demand[d], d))
            changed |= self._preload(top)
        self._push(changed)


@dataclass(slots=True)
class LocalityReport:
    spec: LocalitySpec
    fleet_gpus: int
    jobs: int
    datasets: int
    with_locality: LocalityFigures
    without: LocalityFigures
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def unallocated_rise(self) -> float:
        return self.with_locality.unallocated_pct - self.without.unallocated_pct

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": dataclasses.asdict(self.spec),
            "fleet_gpus": self.fleet_gpus,
            "jobs": self.jobs,
            "datasets": self.datasets,
            "with_locality": self.with_locality.to_json(),
            "without_locality": self.without.to_json(),
            "warm_of_best_pct": self.with_locality.warm_of_best_pct,
            "unallocated_rise_points": self.unallocated_rise,
            "targets": {
                "warm_of_best_pct_at_least": 90.0,
                "unallocated_rise_points_at_most": 0.2,
                "met": self.with_locality.warm_of_best_pct >= 90.0 and self.unallocated_rise <= 0.2,
            },
            **self.extra,
        }


def run_locality(spec: LocalitySpec, policy: str = "gpuaas") -> LocalityReport:
    """The trace run with and without locality (see the module docstring)."""
    import time

    nodes = locality_fleet(spec)
    fleet_gpus = sum(len(n.gpus) for n in nodes)
    jobs, sizes = dataset_trace(spec, fleet_gpus)
    until = jobs[-1].submit if jobs else None
    config = SimConfig(policy=policy, seed=spec.seed, until=until)
    figures = []
    for locality in (True, False):
        wall = time.perf_counter()
        sim = LocalitySimulator(nodes, jobs, sizes, spec, locality, config)
        result = sim.run()
        fig = sim.figures
        fig.unallocated_pct = 100.0 * (1.0 - result.alloc_integral / result.cap_integral)
        fig.wall_seconds = time.perf_counter() - wall
        figures.append(fig)
    return LocalityReport(spec, fleet_gpus, len(jobs), len(sizes), figures[0], figures[1])
