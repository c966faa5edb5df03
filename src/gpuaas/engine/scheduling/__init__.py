"""One scheduling path: the interface every driver uses, and the strategies behind it.

A *driver* owns time and the outside world; a *strategy* owns the queue and decides. The
simulator (:mod:`gpuaas.sim.simulate`), the scenario runner (:mod:`gpuaas.sim.scenario`) and the
service reconciler (:mod:`gpuaas.service.reconciler`) are drivers. They tell a
:class:`Scheduler` what happened (a workload arrived, finished, lost its nodes, was cancelled;
nodes went or came back) and ask it, at a time they pass in, for a :class:`Decisions`: who is
admitted and where, who is evicted and why, and why everyone else waits. Strategies:

- :class:`~gpuaas.engine.scheduling.admission.AdmissionScheduler`: Kueue's semantics (quota
  tree, flavors, cohorts, preemption, fair sharing) by the
  :class:`~gpuaas.engine.admission.AdmissionEngine`, with physical fit by its node pool;
- :class:`~gpuaas.engine.scheduling.fleet.FleetScheduler`: a fleet without quotas, queued by a
  :class:`~gpuaas.engine.scheduling.fleet.QueuePolicy` (priority and weighted-tenant fair order
  with priority preemption and a starvation guard, strict FIFO, or EASY backfill).

Both place through the placement framework (:func:`~gpuaas.engine.gang.place_workload` on a
:class:`~gpuaas.engine.snapshot.Snapshot`): a reservation is never made by hand. Like the rest of
the engine, a strategy does no I/O and reads no clock.
"""

from gpuaas.engine.scheduling.decisions import (
    Admitted,
    Decisions,
    Evicted,
    Request,
    Scheduler,
)
from gpuaas.engine.scheduling.holds import NodeHolds

__all__ = ["Admitted", "Decisions", "Evicted", "NodeHolds", "Request", "Scheduler"]
