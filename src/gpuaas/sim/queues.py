"""Replay a trace through Kueue-style governance: the admission engine decides who runs.

With a Kueue YAML (ResourceFlavors, ClusterQueues with quotas and cohorts, LocalQueues), every job
is submitted to the :class:`~gpuaas.engine.admission.AdmissionEngine` of that configuration, built
on the simulated fleet so that a workload is admitted only when its quota is free *and* the
placement engine places all of its pods. The engine's own preemptions (within a ClusterQueue,
cohort reclamation, fair sharing) become evictions in the simulation, with the same restart and
checkpoint accounting as elsewhere. A job's tenant names its LocalQueue (``namespace/name``, or
just the name when it is unique; with a single LocalQueue every job goes there).

A finished job calls the engine's ``finish``, which gives back its quota and devices. The engine
owns the fleet here: a failed or scaled-away node's jobs are requeued through the engine (they
keep their queue position by creation time), the node's free capacity is held in the engine's
snapshot while it is gone, and the engine retries its pending workloads when the node is back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import AdmissionPodSet, AdmissionWorkload, Governance
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU
from gpuaas.sim.simulate import QUEUED, RUNNING, SimConfig, SimResult, Simulator
from gpuaas.sim.traces import SimJob


def queue_for(tenant: str, gov: Governance) -> str:
    """The LocalQueue key (``namespace/name``) a tenant submits to."""
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


def admission_workload(job: SimJob, queue: str) -> AdmissionWorkload:
    """The admission engine's view of a job: whole GPUs, cpu and memory per pod set."""
    pod_sets = []
    for ps in job.workload.pod_sets:
        pod = ps.pod
        if pod.gpu_milli or pod.mig or pod.replicas or pod.claims:
            raise InvalidValue(
                f"job {job.name}", "with --queues only whole-GPU, cpu and memory requests replay"
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
    return AdmissionWorkload(job.name, queue, tuple(pod_sets), job.priority, job.submit)


class QueuedSimulator(Simulator):
    """:class:`~gpuaas.sim.simulate.Simulator` with admission by the Kueue-style engine."""

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        gov: Governance,
        config: SimConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
        admission: AdmissionConfig | None = None,
    ) -> None:
        super().__init__(nodes, jobs, config, progress)
        fair = any(cq.fair_sharing_weight is not None for cq in gov.cluster_queues.values())
        self.engine = AdmissionEngine(
            gov, admission or AdmissionConfig(fair_sharing=fair), list(self.nodes)
        )
        assert self.engine.pool is not None
        self.engine.pool.policy = self.policy  # --policy chooses the nodes here too
        self.snap = self.engine.pool.snapshot  # utilisation is measured on the engine's fleet
        self.blockers, self.blocked_milli = {}, 0
        for n in self.absent:  # nodes that a scale-up adds later are held in the engine's fleet
            self._block(n)
        self.index = {job.name: i for i, job in enumerate(self.jobs)}
        self.submitted: set[int] = set()
        self.awl = [admission_workload(j, queue_for(j.tenant, gov)) for j in self.jobs]

    def _enqueue(self, i: int, t: float) -> None:
        super()._enqueue(i, t)
        if i not in self.submitted:  # an evicted workload is requeued by the engine itself
            self.submitted.add(i)
            self.engine.submit(self.awl[i])

    def _stop(self, i: int, t: float, release_devices: bool = True) -> float:
        return super()._stop(i, t, release_devices=False)  # the engine owns the devices

    def _lose(self, i: int, t: float, reason: str) -> None:
        self.engine.requeue(self.jobs[i].name, reason)  # gives its quota and devices back
        self._evict(i, t, reason, release_devices=False)

    def _block(self, n: int) -> None:
        super()._block(n)
        if hasattr(self, "engine"):
            self.engine.nodes_changed()

    def _unblock(self, n: int) -> None:
        super()._unblock(n)
        self.engine.nodes_changed()

    def _finish(self, i: int, t: float) -> None:
        super()._finish(i, t)
        name = self.jobs[i].name
        if name in self.engine.admitted:
            self.engine.finish(name)

    def _schedule(self, t: float) -> None:
        if not (self.freed or self.new):
            return
        self.freed = False
        self.new = []
        before = len(self.engine.evictions)
        self.engine.run(t)
        for ev in self.engine.evictions[before:]:
            i = self.index[ev.workload]
            if self.status[i] == RUNNING:
                by = f" to admit {ev.preemptor}" if ev.preemptor else ""
                self._evict(i, t, f"evicted by admission ({ev.reason}){by}", release_devices=False)
                self.preemptions += 1
        for name, aw in self.engine.admitted.items():
            i = self.index[name]
            if self.status[i] == QUEUED and aw.placement is not None:
                self._start(i, aw.placement.gang, t)
        for cq in self.engine.pending.values():
            for name in cq:
                reason = self.engine.reasons.get(name)
                if reason:
                    self.reasons[self.index[name]] = reason


def simulate_with_queues(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    gov: Governance,
    config: SimConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` under the governance ``gov``; see the module docstring."""
    return QueuedSimulator(nodes, jobs, gov, config, progress).run()
