"""Usage records of a simulated run, cut and priced by the service's own rules.

The service writes a job's records at its transitions (``service/usage.py``): on admission it
records what the job holds (its placement in the recorded form, the replicas named, the
devices by the one device naming, each as a SKU and a fraction of a unit), and when the job
leaves Admitted/Running it cuts the held interval at whole UTC hours and prices each piece by
the provider book's entry in force at its start. The simulator's runs are the same edges: a
run starts when a cycle admits the job and ends when it finishes, is preempted, loses a node
or is displaced (it then queues again from its last checkpoint, a new attempt). A
:class:`Meter` hangs on those edges and goes through the same steps with the same code
(:func:`~gpuaas.engine.admission.restore.record`, :class:`~gpuaas.engine.replica_names.ReplicaBook`,
:func:`~gpuaas.engine.admission.restore.typed_pods`, :func:`~gpuaas.billing.skus.held_by`,
:func:`~gpuaas.billing.metering.cut`, :func:`~gpuaas.billing.metering.stored`), with no
database: what it produces is what the service would store for the same history, so billing's
properties (allocated + idle = capacity, billed = held, a MIG slice priced by its SKU) can be
checked over generated histories (``tests/sim/test_sim_metering.py``).

Differences from the service, on purpose: no hourly step (it only moves ``since``; the pieces
are the same because cuts fall on whole hours either way), no utilisation (no telemetry), and
a job still running at the end of the run is closed at the end (the simulator's horizon).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuaas.billing.metering import Held, Owner, book_of, cut, stored, to_us, usage_record
from gpuaas.billing.skus import held_by
from gpuaas.engine.admission.nodes import NodePlacement
from gpuaas.engine.admission.restore import record, typed_pods
from gpuaas.engine.gang import GangPlacement
from gpuaas.engine.replica_names import ReplicaBook
from gpuaas.model.billing import CapacityPool, PriceEntry, UsageRecord
from gpuaas.model.node import Node
from gpuaas.sim.traces import SimJob


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a job: what it held, from ``start_us`` to ``end_us`` (``end_us`` -1 while
    it runs)."""

    job: int
    attempt: int
    held: tuple[Held, ...]
    start_us: int
    end_us: int = -1


@dataclass(slots=True)
class Meter:
    """Records of one run of the simulator (pass it as ``Simulator(..., meter=...)``).

    ``nodes``: the fleet by name (the simulator's, scale-up copies included when it has them);
    ``book``: the provider's price entries; ``pools``: a tenant's capacity pool (on-demand when
    absent)."""

    nodes: Mapping[str, Node]
    book: Sequence[PriceEntry]
    pools: Mapping[str, CapacityPool] = field(default_factory=dict)
    records: list[UsageRecord] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    _open: dict[int, Run] = field(default_factory=dict)
    _replicas: ReplicaBook = field(default_factory=ReplicaBook)
    _prices: dict[str, list[PriceEntry]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._prices = book_of(sorted(self.book, key=lambda e: e.valid_from))

    def started(self, job_id: int, job: SimJob, attempt: int, placed: GangPlacement,
                t: float) -> None:  # fmt: skip
        """Job ``job_id`` was admitted at ``t`` on ``placed`` (its ``attempt``-th run)."""
        pods = record(NodePlacement(placed))
        self._replicas.name(job_id, attempt, pods, self._alive)
        pool = self.pools.get(job.tenant, CapacityPool.ON_DEMAND)
        held: list[Held] = []
        for pod in typed_pods(pods, self.nodes.get):
            held.extend(held_by(pod, self.nodes[pod.node], pool))
        self._open[job_id] = Run(job_id, attempt, tuple(held), to_us(t))

    def stopped(self, job_id: int, job: SimJob, t: float) -> None:
        """Job ``job_id``'s run ended at ``t`` (finished, evicted, or the end of the run)."""
        run = self._open.pop(job_id, None)
        if run is None:
            return
        end_us = max(to_us(t), run.start_us)
        self.runs.append(Run(run.job, run.attempt, run.held, run.start_us, end_us))
        # a simulated job has a tenant and no user, queue or cluster: the tenant is its user
        owner = Owner(job.tenant, job.tenant, "", "", job_id, run.attempt)
        for piece in cut(job_id, run.attempt, run.held, run.start_us, end_us):
            columns = stored(owner, piece, self._prices.get(piece.held.sku, ()))
            self.records.append(usage_record(columns))

    def _alive(self, job_id: int, attempt: int) -> bool:
        run = self._open.get(job_id)
        return run is not None and run.attempt == attempt
