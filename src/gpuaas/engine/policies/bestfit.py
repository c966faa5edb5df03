"""Best fit (the published baseline ``05-BestFit``): the node left with the least free
resource, as 0.5 * CPU left / 128 cores + 0.5 * GPU left / 8 GPUs, scaled to 0..100 and
min-max normalised over the feasible nodes as kube-scheduler's NormalizeScore does."""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState
from gpuaas.engine.policies.base import MAX_CPU, MAX_GPU, Policy, fullness, name_order_ties
from gpuaas.engine.snapshot import Snapshot


class BestFitPolicy(Policy):
    name = "bestfit"

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return name_order_ties(snap, nodes, self._score(state, snap, nodes))

    def _score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        left = (snap.cpu_free[nodes] - shape.cpu) / MAX_CPU * 0.5
        left += (fullness(snap, nodes) - shape.milli) / MAX_GPU * 0.5
        raw = np.floor((1.0 - left) * 100.0)
        lo, hi = raw.min(), raw.max()
        if hi == lo:
            return np.zeros(len(nodes))
        return np.floor((raw - lo) * 100.0 / (hi - lo))
