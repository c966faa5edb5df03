"""The admission strategy: Kueue's semantics, decided by the admission engine.

:class:`AdmissionScheduler` puts the :class:`~gpuaas.engine.admission.AdmissionEngine` behind the
one scheduling interface. A workload is admitted when its quota is free *and* the engine's node
pool places all of its pods; the engine's preemptions (within a ClusterQueue, cohort
reclamation, fair sharing) come back as evictions. A fleet driver (the simulator) submits
:class:`~gpuaas.engine.scheduling.Request` objects, whose ``queue`` names a LocalQueue or a
tenant (:func:`queue_for`); the service submits the
:class:`~gpuaas.model.governance.AdmissionWorkload` it stored.

The engine re-decides from scratch at every cycle; ``lazy`` skips a cycle when nothing that
could admit anything happened since the last one (no submission, finish, requeue, eviction or
returning node): a driver that cycles at every event (the simulator) saves most runs, a driver
whose decisions may depend on time alone (the service, with a minimum run time) does not set it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine, NodePlacement
from gpuaas.engine.admission.fleet_changes import Displaced, FleetChange
from gpuaas.engine.locality import DatasetKey
from gpuaas.engine.policies.base import Policy
from gpuaas.engine.reasons import Reason
from gpuaas.engine.scheduling.decisions import Admitted, Decisions, Evicted, Request
from gpuaas.engine.scheduling.holds import NodeHolds
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import AdmissionPodSet, AdmissionWorkload, Governance
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU


def queue_for(tenant: str, gov: Governance) -> str:
    """The LocalQueue key (``namespace/name``) a tenant submits to: the LocalQueue of that key
    or (unique) name, or the only LocalQueue there is."""
    if tenant in gov.local_queues:
        return tenant
    named = [key for key, lq in gov.local_queues.items() if lq.name == tenant]
    if len(named) == 1:
        return named[0]
    if len(gov.local_queues) == 1:
        return next(iter(gov.local_queues))
    known = ", ".join(sorted(gov.local_queues)) or "none"
    raise InvalidValue(
        f"tenant {tenant}",
        f"no LocalQueue named {tenant!r} (or several); known LocalQueues: {known}",
    )


def admission_workload(request: Request, queue: str) -> AdmissionWorkload:
    """The admission engine's view of a request: whole GPUs, cpu and memory per pod set."""
    pod_sets = []
    for ps in request.workload.pod_sets:
        pod = ps.pod
        if pod.gpu_milli or pod.mig or pod.replicas or pod.claims:
            raise InvalidValue(
                f"job {request.name}", "under admission only whole-GPU, cpu and memory requests"
            )
        requests = {NVIDIA_GPU: pod.gpus}
        if pod.cpu_milli:
            requests[CPU] = pod.cpu_milli
        if pod.memory_bytes:
            requests[MEMORY] = pod.memory_bytes
        pod_sets.append(
            AdmissionPodSet(
                ps.name,
                ps.count,
                requests,
                node_selector=dict(pod.node_selector),
                tolerations=pod.tolerations,
            )
        )
    return AdmissionWorkload(
        request.name,
        queue,
        tuple(pod_sets),
        request.priority,
        request.created,
        data=request.workload.data,
    )


def _index(snap: Snapshot, name: str) -> int:
    try:
        return snap.index_of(name)
    except KeyError:
        raise InvalidValue(f"node {name}", "is not in the fleet") from None


class AdmissionScheduler:
    """A :class:`~gpuaas.engine.scheduling.Scheduler` by the admission engine ``engine``."""

    def __init__(self, engine: AdmissionEngine, lazy: bool = False) -> None:
        self.engine = engine
        self.lazy = lazy
        self.holds = NodeHolds(engine.pool.snapshot) if engine.pool is not None else None
        self.dirty = True
        self.waiting: Mapping[str, Reason] = MappingProxyType(engine.why)

    @classmethod
    def on_fleet(
        cls,
        gov: Governance,
        nodes: Sequence[Node],
        policy: Policy | None = None,
        config: AdmissionConfig | None = None,
        lazy: bool = True,
    ) -> AdmissionScheduler:
        """Admission on ``nodes`` (fair sharing on when a ClusterQueue has a weight), placing
        with ``policy``."""
        fair = any(cq.fair_sharing_weight is not None for cq in gov.cluster_queues.values())
        engine = AdmissionEngine(gov, config or AdmissionConfig(fair_sharing=fair), list(nodes))
        if policy is not None:
            assert engine.pool is not None
            engine.pool.policy = policy
        return cls(engine, lazy)

    @property
    def snapshot(self) -> Snapshot:
        if self.engine.pool is None:
            raise InvalidValue("admission", "has no nodes, so no snapshot")
        return self.engine.pool.snapshot

    # ------------------------------------------------------------------ inputs
    def submit(self, request: Request | AdmissionWorkload, now: float) -> None:
        if isinstance(request, Request):
            request = admission_workload(request, queue_for(request.queue, self.engine.gov))
        self.engine.submit(request)
        self.dirty = True

    def admit_existing(
        self,
        wl: AdmissionWorkload,
        flavors: Mapping[str, Mapping[str, str]],
        at: float,
        placement: NodePlacement | None = None,
    ) -> None:
        """A workload that already holds quota (see :meth:`AdmissionEngine.admit_existing`)."""
        self.engine.admit_existing(wl, flavors, at, placement)
        self.dirty = True

    def finish(self, name: str) -> None:
        self.engine.finish(name)
        self.dirty = True

    def requeue(self, name: str, cause: Reason) -> None:
        self.engine.requeue(name, cause)
        self.dirty = True

    def declare(self, name: str, limit: float) -> None:
        """Admission does not plan with run times."""

    def withdraw(self, name: str) -> bool:
        return self.engine.withdraw(name)

    def nodes_changed(
        self,
        changes: Sequence[FleetChange] = (),
        down: Iterable[str] = (),
        up: Iterable[str] = (),
    ) -> list[Displaced]:
        down, up = list(down), list(up)
        displaced: list[Displaced] = []
        if changes or not (down or up):  # no change at all: only take the decisions again
            displaced = self.engine.nodes_changed(changes)
            self.dirty = True
        if down or up:
            snap = self.snapshot
            assert self.holds is not None
            for name in down:
                self.holds.hold(_index(snap, name))
            for name in up:
                self.holds.release(_index(snap, name))
            self.engine.nodes_changed()
            self.dirty = self.dirty or bool(up)
        return displaced

    def datasets_changed(self, warm: Mapping[DatasetKey, Iterable[str]]) -> None:
        """Where datasets are warm now (each given dataset's whole warm set; see
        :mod:`gpuaas.engine.locality`): the next cycle takes its decisions again."""
        pool = self.engine.pool
        if pool is not None and pool.warm.update(warm):
            self.engine.nodes_changed()
            self.dirty = True

    # ------------------------------------------------------------------ the cycle
    def cycle(self, now: float) -> Decisions:
        if self.lazy and not self.dirty:
            return Decisions(now, waiting=self.waiting)
        self.dirty = False
        engine = self.engine
        admitted = engine.admitted
        last = next(reversed(admitted.values())).sequence if admitted else 0
        engine.evictions.clear()
        engine.run(now)
        if engine.deferred:  # a namespace spent its placement budget: the rest waits for the next
            self.dirty = True
        evicted: list[Evicted] = []
        for ev in engine.evictions:
            held = ev.sequence <= last  # admitted before this cycle, not within it
            if held:
                self.dirty = True  # what it held is free: the next cycle looks again
            evicted.append(Evicted(ev.workload, ev.reason, ev.preemptor, held))
        fresh = []
        for aw in reversed(admitted.values()):
            if aw.sequence <= last:
                break
            fresh.append(aw)
        fresh.reverse()
        placed = tuple(
            Admitted(aw.name, aw.placement.gang if aw.placement is not None else None, aw)
            for aw in fresh
        )
        return Decisions(now, placed, tuple(evicted), self.waiting)
