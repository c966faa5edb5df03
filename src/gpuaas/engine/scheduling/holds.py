"""Nodes held out of a snapshot while they are down (failed, to be repaired).

A node that is down is still part of the fleet: it keeps its row in the snapshot and its whole
free capacity is reserved by a hold, so placement never picks it, and given back when the node
is up again. The node's workloads must have been released first (a hold takes what is free, not
what others hold). The reservation is an ordinary
:meth:`~gpuaas.engine.snapshot.Snapshot.reserve`, so every index stays exact. A node that joins
or leaves the fleet is a fleet change instead (:mod:`gpuaas.engine.admission.fleet_changes`).
"""

from __future__ import annotations

from gpuaas.engine.snapshot import Assignment, Snapshot


class NodeHolds:
    """The holds on one snapshot's nodes."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.held: dict[int, Assignment] = {}
        #: milli-GPU the holds take (utilisation leaves them out)
        self.milli = 0

    def hold(self, node: int) -> None:
        """Reserve everything free on ``node``."""
        snap = self.snapshot
        gm = tuple(
            (g, int(snap.gpu_free[node, g])) for g in range(snap.gmax) if snap.gpu_free[node, g] > 0
        )
        mig = tuple(slot for (n, _), slots in snap.mig_slots.items() if n == node for slot in slots)
        rep = tuple(
            (g, int(snap.replica_free[node, g]))
            for g in range(snap.gmax)
            if snap.replica_free[node, g] > 0
        )
        a = Assignment(
            node=node,
            cpu_milli=int(snap.cpu_free[node]),
            memory_bytes=int(snap.mem_free[node]),
            gpu_milli=gm,
            mig=mig,
            replicas=rep,
        )
        snap.reserve(node, a)
        self.held[node] = a
        self.milli += a.milli_gpu

    def release(self, node: int) -> None:
        """Give ``node``'s capacity back."""
        a = self.held.pop(node)
        self.snapshot.unreserve(a)
        self.milli -= a.milli_gpu

    def __contains__(self, node: object) -> bool:
        return node in self.held
