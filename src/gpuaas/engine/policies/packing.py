"""GPU packing (the published baseline ``04-GpuPacking``).

Prefer, in this order: sharing an already used GPU (the fuller the better), then fully free GPUs
on a node already in use (the fewer the better), then a completely free node (smaller first).
CPU-only tasks score the same everywhere. Scores are the integers of the authors' plugin and
equal scores go to the smallest node name, as in their simulator (see
:func:`~gpuaas.engine.policies.base.name_order_ties`).

A pod set of identical pods is filled in bulk (:mod:`gpuaas.engine.bulk`) where the node chosen
stays chosen until full: pods without whole-mode GPUs (every node scores 0, so name order) and
whole GPUs (a node in use scores ``max(50 - GPUs, 33)`` whatever it holds, at least what an
idle node of up to 33 GPUs scores, so a node never scores lower after taking a pod; a fleet
with an idle node that outscores a used one keeps the one-at-a-time path). Shares do not: a
node whose last partly used GPU fills up falls back from the shared bucket to 49.
"""

from __future__ import annotations

import numpy as np

from gpuaas.engine.bulk import ranked
from gpuaas.engine.framework import CycleState
from gpuaas.engine.policies.base import Policy, name_order_ties
from gpuaas.engine.snapshot import MILLI, Snapshot


class GpuPackingPolicy(Policy):
    name = "packing"

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return name_order_ties(snap, nodes, self._score(state, snap, nodes))

    def _score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        if shape.milli == 0:
            return np.zeros(len(nodes))
        gf = snap.gpu_free[nodes]
        full = snap.full_free[nodes]
        total = snap.whole_gpus[nodes]
        node_free = full == total
        # case 3: an idle node: 33 - GPUs, at least the GPU count
        idle = np.maximum(33 - full, full).astype(np.float64)
        if shape.share:
            # the fullest GPU that fits; partially used GPUs come first (sorted by free milli)
            cand = np.where(gf >= shape.share, gf, np.iinfo(np.int64).max)
            best = cand.min(axis=1)
            partial = best < MILLI
            used_score = np.maximum(100 - (best * 100 // MILLI) // 10, 50).astype(np.float64)
            busy = np.where(partial, used_score, np.maximum(50 - 1, 33))
        else:
            # whole GPUs: the node has no partial GPU with 1000 free, so all are fully free ones
            busy = np.full(len(nodes), float(max(50 - shape.whole, 33)))
        return np.where(node_free, idle, busy)

    def fill_order(
        self, state: CycleState, snap: Snapshot, feasible: np.ndarray
    ) -> np.ndarray | None:
        """The bulk fill's ranking (see the module docstring); None for shares, and for whole
        GPUs where an idle feasible node outscores a node in use."""
        shape = state.shape
        if shape.share:
            return None
        if shape.whole:
            full = snap.full_free[feasible]
            idle = full == snap.whole_gpus[feasible]
            if idle.any():
                busy = max(50 - shape.whole, 33)
                if int(np.maximum(33 - full[idle], full[idle]).max()) > busy:
                    return None
        return ranked(self.score(state, snap, feasible), feasible, state.rng)
