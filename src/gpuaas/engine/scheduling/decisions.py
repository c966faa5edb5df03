"""The scheduling interface: what a driver tells a strategy, and the decisions it gets back.

A driver reports events as they happen (:meth:`Scheduler.submit`, :meth:`~Scheduler.finish`,
:meth:`~Scheduler.requeue`, :meth:`~Scheduler.withdraw`, :meth:`~Scheduler.nodes_changed`) and
then asks for a :meth:`~Scheduler.cycle` at a time it passes in. Nothing is decided between two
cycles: a submission only queues, a finish only frees. The decisions of a cycle are in the order
they were taken (the order a driver must apply them in: an admission may follow the eviction of
its victims), and ``waiting`` says why each pending workload is still pending (a workload without
an entry has not been tried yet). Reasons are :class:`~gpuaas.engine.reasons.Reason` objects
under both strategies; a driver renders them where it shows text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuaas.engine.admission.fleet_changes import Displaced, FleetChange
from gpuaas.engine.admission.state import AdmittedWorkload
from gpuaas.engine.gang import GangPlacement
from gpuaas.engine.reasons import Reason
from gpuaas.model.workload import Workload


@dataclass(frozen=True, slots=True)
class Request:
    """A workload asking to run, as a fleet driver knows it.

    ``queue`` is the tenant (fleet strategies order by it) or the LocalQueue it submits to;
    ``created`` keeps its place in the queue when it is requeued; ``limit`` is the run time it
    declares (what backfill plans with; infinite when unknown).
    """

    name: str
    workload: Workload
    queue: str = "default"
    priority: int = 0
    created: float = 0.0
    limit: float = math.inf

    @property
    def milli_gpu(self) -> int:
        """Milli-GPU the whole workload holds while it runs."""
        return sum(ps.count * ps.pod.milli_gpu for ps in self.workload.pod_sets)


@dataclass(frozen=True, slots=True)
class Admitted:
    """``name`` may start: its pods are reserved on ``placement``. Under admission,
    ``admission`` holds the ClusterQueue, flavors and node placement it was admitted with."""

    name: str
    placement: GangPlacement | None
    admission: AdmittedWorkload | None = None


@dataclass(frozen=True, slots=True)
class Evicted:
    """``name`` loses its admission (it queues again, keeping its creation time).

    ``reason`` is the engine's (a Kueue eviction reason under admission), ``preemptor`` the
    workload it made room for, if any. ``held_before`` is False when it was admitted and
    evicted within the same cycle: a driver that applies admissions never saw it run.
    """

    name: str
    reason: str
    preemptor: str = ""
    held_before: bool = True


@dataclass(frozen=True, slots=True)
class Decisions:
    """What one cycle decided, in order, and why the rest waits."""

    at: float
    admitted: tuple[Admitted, ...] = ()
    evicted: tuple[Evicted, ...] = ()
    waiting: Mapping[str, Reason] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.admitted or self.evicted)


class Scheduler(Protocol):
    """One scheduling path (see :mod:`gpuaas.engine.scheduling`)."""

    def submit(self, request: Request, now: float) -> None:
        """Queue ``request``; it is considered from the next cycle."""

    def finish(self, name: str) -> None:
        """``name`` completed: its devices (and quota) are free; it does not queue again."""

    def requeue(self, name: str, cause: Reason) -> None:
        """``name`` lost its nodes outside scheduling (``cause``, a sentence for a failed node):
        free what it held and queue it again. A fleet change's displaced workloads are requeued
        by :meth:`nodes_changed` itself."""

    def declare(self, name: str, limit: float) -> None:
        """The queued ``name`` now declares ``limit`` seconds of run time (after an eviction,
        less when it kept a checkpoint)."""

    def withdraw(self, name: str) -> bool:
        """Forget the pending ``name`` (cancelled); False when it is not pending."""

    def nodes_changed(
        self,
        changes: Sequence[FleetChange] = (),
        down: Iterable[str] = (),
        up: Iterable[str] = (),
    ) -> list[Displaced]:
        """The fleet changed: apply ``changes`` in place (the typed changes of
        :mod:`gpuaas.engine.admission.fleet_changes`: a node added, removed, cordoned or
        drained, repartitioned); the workloads that lose a device are requeued by the strategy
        and returned, so the driver can stop them and record why; no other workload is touched.
        Then nodes ``down`` (failed, still in the fleet, their workloads already requeued by the
        driver) are held so nothing lands on them, and nodes ``up`` (repaired) are free again.
        Called with nothing, the next cycle takes every decision again (capacity changed
        outside the strategy). An unknown node is an InvalidValue."""

    def cycle(self, now: float) -> Decisions:
        """Decide at ``now``."""
