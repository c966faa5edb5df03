"""Replay a trace through Kueue-style governance: the admission engine decides who runs.

With a Kueue YAML (ResourceFlavors, ClusterQueues with quotas and cohorts, LocalQueues), the
simulator's queue is the admission strategy of the one scheduling path
(:class:`~gpuaas.engine.scheduling.admission.AdmissionScheduler`), built on the simulated fleet
so that a workload is admitted only when its quota is free *and* the placement engine places all
of its pods. The engine's own preemptions (within a ClusterQueue, cohort reclamation, fair
sharing) become evictions in the simulation, with the same restart and checkpoint accounting as
elsewhere. A job's tenant names its LocalQueue (``namespace/name``, or just the name when it is
unique; with a single LocalQueue every job goes there).

A finished job gives back its quota and devices. The engine owns the fleet here: a failed or
scaled-away node's jobs are requeued through it (they keep their queue position by creation
time), the node's free capacity is held in the engine's snapshot while it is gone, and the
engine retries its pending workloads when the node is back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuaas.engine.scheduling.admission import queue_for
from gpuaas.model.governance import Governance
from gpuaas.model.node import Node
from gpuaas.sim.simulate import SimConfig, SimResult, simulate
from gpuaas.sim.traces import SimJob

__all__ = ["queue_for", "simulate_with_queues"]


def simulate_with_queues(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    gov: Governance,
    config: SimConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` under the governance ``gov``; see the module docstring."""
    return simulate(nodes, jobs, config, progress, gov)
