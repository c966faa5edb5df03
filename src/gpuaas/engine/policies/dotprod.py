"""Dot product (Tetris-style alignment; the published baseline ``02-DotProd``).

As configured in the FGD experiments (GPU dimension merged, normalised by the largest node,
128 cores and 8 GPUs): score = 1 - (free · request) / 2 on the vectors (CPU, GPU), scaled to
the integers 0..100 of kube-scheduler; a share goes to the fullest GPU that fits.
"""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState
from gpuaas.engine.policies.base import MAX_CPU, MAX_GPU, Policy, fullness, name_order_ties
from gpuaas.engine.snapshot import Snapshot


class DotProductPolicy(Policy):
    name = "dotprod"

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return name_order_ties(snap, nodes, self._score(state, snap, nodes))

    def _score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        cpu = snap.cpu_free[nodes] / MAX_CPU * (shape.cpu / MAX_CPU)
        gpu = fullness(snap, nodes) / MAX_GPU * (shape.milli / MAX_GPU)
        return np.floor(100.0 * (1.0 - (cpu + gpu) / 2.0))
