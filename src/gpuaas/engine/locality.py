"""Data locality: place a workload where the dataset it reads is already warm.

A workload that reads a dataset (:attr:`~gpuaas.model.workload.Workload.data`) is placed by
:func:`place_reading`, the data-aware front of :func:`~gpuaas.engine.gang.place_workload`:

- ``required``: only the nodes where the dataset is warm are tried (a filter); when no warm
  node fits, the workload waits with ``DatasetNotWarm`` (fields ``dataset``, ``warm``: how many
  nodes hold it warm), the placement engine's own sentence for the warm nodes in ``detail``.
- ``preferred``: warm against fragmentation, in three steps. (1) The whole workload is tried on
  the warm nodes that are already in use (filling them opens no empty node), the placement
  policy choosing among them as usual. (2) Otherwise the fleet's own choice: the ordinary
  placement with :class:`WarmScore`, which adds ``weight`` to the policy's score of a warm node,
  the policy's scores being scaled to 0..1 over the candidates first (with ``weight`` 0.5 a warm
  node wins unless a cold one is better by more than half the spread of the policy's scores;
  0 turns the bonus off). (3) If that choice is not all warm and opens empty nodes anyway, the
  workload is tried on the warm nodes alone and takes that placement when it opens no more
  empty nodes than the fleet's choice did; else the fleet's choice stands. So a dataset never
  costs a whole node that the fleet's choice would have kept free.

Which nodes are warm is :class:`WarmSets`: per dataset (the pair of the tenant and the
dataset's name, as registered), a set of node names. The driver keeps it current (the service
from the dataset caches it stores, the simulator as its jobs complete and its preloads run),
incrementally, between cycles: nothing here is rebuilt, and a warm set never names a node
outside the strategy's fleet (names it does not know are dropped on the way in, and a node
removed from the fleet leaves every warm set). Like the rest of the engine this module does
no I/O and reads no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gpuaas.engine.framework import CycleState, reserve_hooks
from gpuaas.engine.gang import GangPlacement, place_workload, release, reserve
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.reasons import Code, Reason
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.dataset import DataLocality
from gpuaas.model.errors import InvalidValue
from gpuaas.model.workload import PodRequest, Workload

#: a dataset as the engine knows it: (tenant, the dataset's registered name)
DatasetKey = tuple[str, str]

#: The bonus of a warm node against the policy's scaled score (see the module docstring).
DEFAULT_WEIGHT = 0.5


class WarmSets:
    """Which nodes of a fleet hold a warm cache of each dataset.

    Every change goes through :meth:`update` (a dataset's whole warm set, as the driver
    knows it now), :meth:`warm` (nodes became warm) or :meth:`forget_node` (a node left the
    fleet); names outside ``fleet`` are dropped, so a warm set only ever names nodes of the
    fleet. ``version`` grows with every change that changed something, so a strategy can tell
    a failure it remembers is stale.
    """

    def __init__(self, fleet: Iterable[str] = ()) -> None:
        self._fleet: set[str] = set(fleet)
        self._warm: dict[DatasetKey, frozenset[str]] = {}
        self.version = 0

    # --- the fleet ---------------------------------------------------------------------------
    def add_node(self, name: str) -> None:
        self._fleet.add(name)

    def forget_node(self, name: str) -> None:
        """``name`` left the fleet: it leaves every warm set."""
        self._fleet.discard(name)
        for key, nodes in list(self._warm.items()):
            if name in nodes:
                self._set(key, nodes - {name})

    # --- warm state --------------------------------------------------------------------------
    def update(self, warm: Mapping[DatasetKey, Iterable[str]]) -> bool:
        """Replace the warm set of each dataset given (an empty one: warm nowhere); True when
        something changed."""
        changed = False
        for key, nodes in warm.items():
            changed |= self._set(key, frozenset(nodes) & self._fleet)
        return changed

    def warm(self, key: DatasetKey, nodes: Iterable[str]) -> bool:
        """``nodes`` now hold ``key`` warm (a job that read it completed there, a preload ran)."""
        return self._set(key, self.nodes(key) | (frozenset(nodes) & self._fleet))

    def cool(self, key: DatasetKey, nodes: Iterable[str]) -> bool:
        """``nodes`` no longer hold ``key`` (evicted from their cache)."""
        return self._set(key, self.nodes(key) - frozenset(nodes))

    def _set(self, key: DatasetKey, nodes: frozenset[str]) -> bool:
        if self._warm.get(key, frozenset()) == nodes:
            return False
        if nodes:
            self._warm[key] = nodes
        else:
            self._warm.pop(key, None)
        self.version += 1
        return True

    # --- reading -----------------------------------------------------------------------------
    def nodes(self, key: DatasetKey) -> frozenset[str]:
        return self._warm.get(key, frozenset())

    def datasets(self) -> dict[DatasetKey, frozenset[str]]:
        return dict(self._warm)

    @property
    def fleet(self) -> frozenset[str]:
        return frozenset(self._fleet)

    def mask(self, snap: Snapshot, key: DatasetKey) -> np.ndarray | None:
        """Bool mask over ``snap``'s node slots: the live nodes where ``key`` is warm; None
        when there is none."""
        names = self._warm.get(key)
        if not names:
            return None
        index = snap._name_index
        slots = [index[n] for n in names if n in index]
        if not slots:
            return None
        mask = np.zeros(snap.size, dtype=bool)
        mask[slots] = True
        return mask


class WarmScore:
    """A score plugin around the placement policy: the policy's scores scaled to 0..1 over the
    candidates, plus ``weight`` on warm nodes; devices and reserve hooks are the policy's."""

    name = "DataLocality"

    def __init__(self, policy: Any, warm: np.ndarray, weight: float) -> None:
        self.policy = policy
        self.warm = warm
        self.weight = weight
        self._hooks = reserve_hooks(policy)

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        base = np.asarray(self.policy.score(state, snap, nodes), dtype=np.float64)
        if len(base) <= 1:
            return base
        finite = np.isfinite(base)
        scaled = np.zeros(len(base))
        if finite.any():
            lo, hi = base[finite].min(), base[finite].max()
            if hi > lo:
                scaled[finite] = (base[finite] - lo) / (hi - lo)
        scaled[~finite] = np.where(base[~finite] > 0, 1.0, -np.inf)
        return scaled + self.weight * self.warm[nodes]

    def assign(self, state: CycleState, snap: Snapshot, node: int) -> Assignment:
        return self.policy.assign(state, snap, node)

    def on_reserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        if self._hooks is not None:
            self._hooks.on_reserve(snap, pod, assignment)

    def on_unreserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        if self._hooks is not None:
            self._hooks.on_unreserve(snap, pod, assignment)


def not_warm(dataset: str, warm: int, detail: str, cold: int) -> Unschedulable:
    """The failure of a workload that requires ``dataset`` warm: ``warm`` nodes hold it,
    ``cold`` nodes were left out, ``detail`` says why the warm ones did not do."""
    return Unschedulable(
        detail,
        ((Reason(Code.DATASET_NOT_WARM, {"dataset": dataset, "warm": warm}), cold),),
        Code.DATASET_NOT_WARM,
        {"dataset": dataset, "warm": warm},
    )


def place_reading(
    snapshot: Snapshot,
    workload: Workload,
    policy: Any,
    warm: WarmSets | None,
    tenant: str,
    *,
    weight: float = DEFAULT_WEIGHT,
    **options: Any,
) -> GangPlacement | Unschedulable:
    """:func:`~gpuaas.engine.gang.place_workload` for a workload that may read a dataset of
    ``tenant`` (see the module docstring); ``options`` are ``place_workload``'s. Without a
    dataset, or without warm sets, it is exactly ``place_workload``."""
    data = workload.data
    if data is None or warm is None:
        return place_workload(snapshot, workload, policy, **options)
    if weight < 0:
        raise InvalidValue("weight", f"must be >= 0, got {weight}")
    mask = warm.mask(snapshot, (tenant, data.dataset))
    count = 0 if mask is None else int(np.count_nonzero(mask))
    live = int(np.count_nonzero(snapshot.live)) if snapshot.holes else snapshot.size
    if data.locality is DataLocality.REQUIRED:
        if mask is None:
            return not_warm(
                data.dataset,
                0,
                f"workload {workload.name}: dataset {data.dataset} is warm on no node",
                live,
            )
        result = place_workload(snapshot, workload, policy, within=mask, **options)
        if isinstance(result, GangPlacement):
            return result
        return not_warm(
            data.dataset,
            count,
            f"{result.reason} (on the {count} nodes where dataset {data.dataset} is warm)",
            live - count,
        )
    if mask is None:
        return place_workload(snapshot, workload, policy, **options)
    empty = (snapshot.full_free == snapshot.whole_gpus) & (snapshot.whole_gpus > 0)
    used = mask & ~empty
    if used.any():  # warm nodes already in use: filling them opens no node
        first = place_workload(snapshot, workload, policy, within=used, **options)
        if isinstance(first, GangPlacement):
            return first
    scored = WarmScore(policy, mask, weight) if weight > 0 else policy
    normal = place_workload(snapshot, workload, scored, **options)
    if not isinstance(normal, GangPlacement):
        return normal
    opened = _opened(normal, empty)
    if opened == 0 or _all_warm(normal, mask):
        return normal
    # the fleet's own choice opens nodes anyway: warm ones do as well if they open no more
    release(snapshot, normal, policy)
    warm_only = place_workload(snapshot, workload, policy, within=mask, **options)
    if isinstance(warm_only, GangPlacement):
        if _opened(warm_only, empty) <= opened:
            return warm_only
        release(snapshot, warm_only, policy)
    reserve(snapshot, normal, policy)
    return normal


def _opened(placement: GangPlacement, empty: np.ndarray) -> int:
    """How many nodes that were empty before ``placement`` holds pods on."""
    return len({n for n in placement.nodes if empty[n]})


def _all_warm(placement: GangPlacement, mask: np.ndarray) -> bool:
    return all(mask[n] for n in placement.nodes)


def warm_when_placed(
    snapshot: Snapshot, placement: GangPlacement, warm: WarmSets, key: DatasetKey
) -> bool:
    """Whether every pod of ``placement`` is on a node where ``key`` is warm."""
    names = warm.nodes(key)
    return bool(names) and all(snapshot.names[p.placement.node] in names for p in placement)
