"""Best fit (the published baseline ``05-BestFit``): the node left with the least free
resource, as 0.5 * CPU left / 128 cores + 0.5 * GPU left / 8 GPUs, scaled to 0..100 and
min-max normalised over the feasible nodes as kube-scheduler's NormalizeScore does.

The normalised score is highest exactly for the highest raw score, so one pod at a time
always goes to the node of the highest raw score (the smallest name among equals); a pod only
lowers its node's free resource, so that node's raw score never falls while it fills. A pod
set of identical pods is therefore filled in bulk in raw-score order
(:mod:`gpuaas.engine.bulk`), for every kind of pod."""

from __future__ import annotations

import numpy as np

from gpuaas.engine.bulk import ranked
from gpuaas.engine.framework import CycleState
from gpuaas.engine.policies.base import MAX_CPU, MAX_GPU, Policy, fullness, name_order_ties
from gpuaas.engine.snapshot import Snapshot


class BestFitPolicy(Policy):
    name = "bestfit"

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return name_order_ties(snap, nodes, self._score(state, snap, nodes))

    def fill_order(self, state: CycleState, snap: Snapshot, feasible: np.ndarray) -> np.ndarray:
        """The bulk fill's ranking: raw score, then name (see the module docstring)."""
        raw = name_order_ties(snap, feasible, self._raw(state, snap, feasible))
        order = ranked(raw, feasible, None)  # raw scores with name offsets never tie
        assert order is not None
        return order

    def _raw(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        left = (snap.cpu_free[nodes] - shape.cpu) / MAX_CPU * 0.5
        left += (fullness(snap, nodes) - shape.milli) / MAX_GPU * 0.5
        return np.floor((1.0 - left) * 100.0)

    def _score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        raw = self._raw(state, snap, nodes)
        lo, hi = raw.min(), raw.max()
        if hi == lo:
            return np.zeros(len(nodes))
        return np.floor((raw - lo) * 100.0 / (hi - lo))
