"""GPU packing (the published baseline ``04-GpuPacking``).

Prefer, in this order: sharing an already used GPU (the fuller the better), then fully free GPUs
on a node already in use (the fewer the better), then a completely free node (smaller first).
CPU-only tasks score the same everywhere. Scores are the integers of the authors' plugin and
equal scores go to the smallest node name, as in their simulator (see
:func:`~gpuaas.engine.policies.base.name_order_ties`).
"""

from __future__ import annotations

import numpy as np

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
