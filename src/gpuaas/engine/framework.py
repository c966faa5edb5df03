"""Placement framework in the shape of the Kubernetes scheduling framework.

One placement attempt gets a :class:`CycleState`; :class:`FilterPlugin` s remove nodes (vectorised:
a bool mask over the candidate node indices, plus the reason a user reads), a :class:`ScorePlugin`
ranks the survivors (vectorised: one float per candidate, higher is better) and picks the devices
on the chosen node, and :class:`ReservePlugin` hooks see every reserve and unreserve (policies that
remember what runs where, such as GPU clustering, use them).

A policy is a score plugin; :mod:`gpuaas.engine.policies` holds them. The default filters below
cover a :class:`~gpuaas.model.workload.PodRequest`'s CPU, memory, GPU forms (whole GPUs, a share of
one GPU, MIG instances by profile, time-sliced replicas), GPU model restriction, node selector and
taints/tolerations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from gpuaas.engine.fit import fit_mask
from gpuaas.engine.reasons import Code, Reason
from gpuaas.engine.snapshot import MILLI, Assignment, Snapshot
from gpuaas.model.node import TaintEffect
from gpuaas.model.workload import PodRequest


@dataclass(frozen=True, slots=True)
class PodShape:
    """A pod request reduced to the integers the filters compare (computed once per attempt).

    ``share`` is the milli-GPU of one GPU when the pod shares a GPU (0 < share < 1000), ``whole``
    the number of fully free whole-mode GPUs it needs.
    """

    cpu: int
    mem: int
    whole: int
    share: int
    mig: tuple[tuple[str, int], ...]
    replicas: int
    models: frozenset[str]
    #: VFs of ``nic_pool`` one pod takes (0: the pod asks no NICs; see gpuaas.engine.nics)
    nics: int = 0
    nic_pool: str = ""

    @property
    def milli(self) -> int:
        """Milli-GPU the pod takes on whole-mode GPUs."""
        return self.share if self.share else self.whole * MILLI

    @property
    def per_gpu(self) -> int:
        """Milli-GPU per GPU used (the trace's ``gpu_milli``); 0 for no whole-mode GPU."""
        return self.share if self.share else (MILLI if self.whole else 0)

    @property
    def gpu_count(self) -> int:
        return 1 if self.share else self.whole

    @classmethod
    def of(cls, pod: PodRequest) -> PodShape:
        """The shape of ``pod``, memoised per request object (requests are frozen, and the same
        object is placed many times: every pod of a pod set, every retry)."""
        found = _SHAPES.get(id(pod))
        if found is not None and found[0] is pod:
            return found[1]
        shape = cls._compute(pod)
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        _SHAPES[id(pod)] = (pod, shape)
        return shape

    @classmethod
    def _compute(cls, pod: PodRequest) -> PodShape:
        share = pod.gpu_milli if pod.gpus == 1 and 0 < pod.gpu_milli < MILLI else 0
        whole = 0 if share else pod.gpus
        network = pod.network
        nics = 0
        if network is not None:
            devices = whole or bool(share) or sum(n for _, n in pod.mig) or pod.replicas
            nics = network.vfs_for(int(devices))
        return cls(
            cpu=pod.cpu_milli,
            mem=pod.memory_bytes,
            whole=whole,
            share=share,
            mig=pod.mig,
            replicas=pod.replicas,
            models=pod.gpu_models,
            nics=nics,
            nic_pool=network.pool if network is not None else "",
        )


_SHAPES: dict[int, tuple[PodRequest, PodShape]] = {}
_MAX_SHAPES = 65_536


@dataclass(slots=True)
class CycleState:
    """Scratch data of one placement attempt (as in kube-scheduler), shared by its plugins."""

    pod: PodRequest
    shape: PodShape
    rng: np.random.Generator | None = None
    data: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class FilterPlugin(Protocol):
    """Removes nodes that cannot run the pod."""

    name: str

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        """Bool mask over ``nodes`` (int indices): True where the pod may run."""
        ...

    def reason(self, state: CycleState) -> Reason:
        """Why a node failed this filter (see :mod:`gpuaas.engine.reasons`; rendered, in
        words a user can act on)."""
        ...


@runtime_checkable
class ScorePlugin(Protocol):
    """Ranks feasible nodes and chooses the devices on the chosen one."""

    name: str

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        """One float per node of ``nodes``; higher is better. Ties are broken by the caller."""
        ...

    def assign(self, state: CycleState, snap: Snapshot, node: int) -> Assignment:
        """Which GPUs / instances / replicas the pod takes on ``node`` (feasible by the filters)."""
        ...


@runtime_checkable
class ReservePlugin(Protocol):
    """Told of every reservation, so policy state can follow the snapshot."""

    def on_reserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None: ...

    def on_unreserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None: ...


_HAS_HOOKS: dict[type, bool] = {}


def reserve_hooks(policy: object) -> ReservePlugin | None:
    """The policy's reserve hooks, or None (the answer is cached per type: a runtime-checkable
    Protocol ``isinstance`` costs 20-50 us, more than a reservation)."""
    kind = type(policy)
    has = _HAS_HOOKS.get(kind)
    if has is None:
        has = _HAS_HOOKS[kind] = isinstance(policy, ReservePlugin)
    return policy if has else None  # type: ignore[return-value]


# ---------------------------------------------------------------------------- filters
_TAINT = Reason(Code.TAINT)
_CPU = Reason(Code.INSUFFICIENT_CPU)
_MEMORY = Reason(Code.INSUFFICIENT_MEMORY)
_GPU = Reason(Code.INSUFFICIENT_GPU)
_REPLICAS = Reason(Code.INSUFFICIENT_REPLICAS)
_NIC = Reason(Code.INSUFFICIENT_NIC)


class GpuModelFilter:
    """``gpu_models``: the node's GPU model must be one of them."""

    name = "GpuModel"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        models = state.shape.models
        if not models:
            return np.ones(len(nodes), dtype=bool)
        ids = [snap.model_id(m) for m in models]
        ids = [i for i in ids if i >= 0]
        if not ids:
            return np.zeros(len(nodes), dtype=bool)
        return np.isin(snap.model_of_node[nodes], ids)

    def reason(self, state: CycleState) -> Reason:
        return Reason(Code.GPU_MODEL, {"models": sorted(state.shape.models)})


class NodeSelectorFilter:
    """``node_selector``: every ``key=value`` must be a label of the node."""

    name = "NodeSelector"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        mask = np.ones(len(nodes), dtype=bool)
        for key, value in state.pod.node_selector:
            mask &= snap.label_mask(key, value)[nodes]
        return mask

    def reason(self, state: CycleState) -> Reason:
        return Reason(Code.NODE_SELECTOR, {"selector": dict(state.pod.node_selector)})


class TaintFilter:
    """A NoSchedule/NoExecute taint must be tolerated (PreferNoSchedule never blocks)."""

    name = "TaintToleration"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        mask = np.ones(len(nodes), dtype=bool)
        if len(snap.tainted) == 0:
            return mask
        tolerations = state.pod.tolerations
        blocked = [
            i
            for i in snap.tainted.tolist()
            if any(
                taint.effect is not TaintEffect.PREFER_NO_SCHEDULE
                and not any(t.tolerates(taint) for t in tolerations)
                for taint in snap.taints[i]
            )
        ]
        if blocked:
            mask &= ~np.isin(nodes, blocked)
        return mask

    def reason(self, state: CycleState) -> Reason:
        return _TAINT


def _rule_mask(state: CycleState, snap: Snapshot, nodes: np.ndarray, group: str) -> np.ndarray:
    """The fit rule's verdict for one group of resources (see :mod:`gpuaas.engine.fit`)."""
    mask = fit_mask(snap, state.shape, nodes, len(nodes), group)
    return np.ones(len(nodes), dtype=bool) if mask is None else mask


class CpuFilter:
    name = "Cpu"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return _rule_mask(state, snap, nodes, "cpu")

    def reason(self, state: CycleState) -> Reason:
        return _CPU


class MemoryFilter:
    name = "Memory"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return _rule_mask(state, snap, nodes, "memory")

    def reason(self, state: CycleState) -> Reason:
        return _MEMORY


class GpuFilter:
    """Whole GPUs need that many fully free GPUs; a share needs one GPU with that much free;
    MIG needs free instances of each profile; time-sliced needs free replicas."""

    name = "Gpu"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return _rule_mask(state, snap, nodes, "gpu")

    def reason(self, state: CycleState) -> Reason:
        shape = state.shape
        if shape.mig:
            return Reason(Code.INSUFFICIENT_MIG, {"instances": dict(shape.mig)})
        if shape.replicas:
            return _REPLICAS
        return _GPU


class NicFilter:
    """Enough free VFs of the pod's NIC pool (alignment is judged after, on the survivors:
    see :mod:`gpuaas.engine.nic_placement`)."""

    name = "Nic"

    def filter(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return _rule_mask(state, snap, nodes, "nic")

    def reason(self, state: CycleState) -> Reason:
        pool = state.shape.nic_pool
        return Reason(Code.INSUFFICIENT_NIC, {"pool": pool}) if pool else _NIC


#: The filters whose verdict depends only on the node's static facts, never on reservations.
STATIC_FILTERS: tuple[FilterPlugin, ...] = (GpuModelFilter(), NodeSelectorFilter(), TaintFilter())
DEFAULT_FILTERS: tuple[FilterPlugin, ...] = (
    *STATIC_FILTERS,
    CpuFilter(),
    MemoryFilter(),
    GpuFilter(),
    NicFilter(),
)


def static_mask(snap: Snapshot, pod: PodRequest) -> np.ndarray | None:
    """Bool mask over the fleet of nodes ``pod`` may use at all (GPU model, node selector,
    taints: the filters whose verdict never changes with reservations), cached per snapshot
    layout; None when that is every node (the common case, so callers skip the mask)."""
    key = (pod.gpu_models, pod.node_selector, pod.tolerations)
    cache = snap._static_masks
    if key in cache:
        return cache[key]
    state = CycleState(pod=pod, shape=PodShape.of(pod))
    everything = np.arange(snap.size)
    mask = np.ones(snap.size, dtype=bool)
    for plugin in STATIC_FILTERS:
        if plugin.name == "NodeSelector" and not pod.node_selector:
            continue
        mask &= plugin.filter(state, snap, everything)
    if snap.holes:  # a removed node's slot is never a place to run
        mask &= snap.live
    result: np.ndarray | None = None if mask.all() else mask
    if result is not None:
        result.flags.writeable = False
    if len(cache) >= 1024:
        cache.clear()
    cache[key] = result
    return result


def feasible_nodes(state: CycleState, snap: Snapshot, nodes: np.ndarray | None) -> np.ndarray:
    """Node indices (ascending, from ``nodes`` or the whole fleet when None) that pass every
    default filter: the fused equivalent of the :data:`DEFAULT_FILTERS` chain, with the static
    filters read from :func:`static_mask` and the consumable resources by the one fit rule
    (:func:`gpuaas.engine.fit.fit_mask`, on the snapshot's maintained per-node indexes): a
    handful of vector compares, no per-filter bookkeeping. Reasons are only worth computing
    when nothing is left; see :func:`run_filters`."""
    shape = state.shape
    sel: slice | np.ndarray = slice(None) if nodes is None else nodes
    static = static_mask(snap, state.pod)
    mask = None if static is None else static[sel]

    size = snap.size if nodes is None else len(nodes)
    fits = fit_mask(snap, shape, sel, size)
    if fits is not None:
        mask = fits if mask is None else np.logical_and(fits, mask, out=fits)
    if nodes is None:
        return np.arange(snap.size) if mask is None else np.flatnonzero(mask)
    return nodes if mask is None else nodes[mask]


def run_filters(
    state: CycleState,
    snap: Snapshot,
    nodes: np.ndarray,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
) -> tuple[np.ndarray, list[tuple[Reason, int]]]:
    """Apply filters in order; returns surviving node indices and (reason, count) of removals
    (a node is counted under the first filter it fails)."""
    rejected: list[tuple[Reason, int]] = []
    for plugin in filters:
        if len(nodes) == 0:
            break
        if plugin.name in ("NodeSelector",) and not state.pod.node_selector:
            continue
        mask = plugin.filter(state, snap, nodes)
        removed = int(len(mask) - np.count_nonzero(mask))
        if removed:
            rejected.append((plugin.reason(state), removed))
            nodes = nodes[mask]
    return nodes, rejected


# ---------------------------------------------------------------------------- device choice
def default_assignment(
    state: CycleState, snap: Snapshot, node: int, share_gpu: int | None = None
) -> Assignment:
    """Devices for the pod on ``node``: a share goes to ``share_gpu`` or else the fullest GPU that
    fits (best fit); whole GPUs take the lowest-index fully free GPUs; MIG instances the lowest
    free slots of each profile; replicas come from the GPUs with the fewest free replicas first
    (packing time-sliced GPUs).

    No device names here: a backend names devices from the recorded slots in the supply
    plane's one naming (:func:`gpuaas.engine.admission.restore.typed_pods`); only DRA claims
    add the names of the devices they claimed."""
    # Rows of at most a few dozen GPUs: plain Python lists beat numpy's per-call overhead.
    shape = state.shape
    gpu_milli: list[tuple[int, int]] = []
    if shape.share:
        if share_gpu is None:
            row = snap.gpu_free[node].tolist()
            share_gpu = min((f, g) for g, f in enumerate(row) if f >= shape.share)[1]
        gpu_milli.append((share_gpu, shape.share))
    elif shape.whole:
        row = snap.gpu_free[node].tolist()
        full = [g for g, f in enumerate(row) if f == MILLI][: shape.whole]
        for g in full:
            gpu_milli.append((g, MILLI))
    mig: list[tuple[int, int]] = []
    for profile, count in shape.mig:
        p = snap.profile_id(profile)
        slots = snap.mig_slots.get((node, p), [])
        for g, k in slots[::-1][:count]:
            mig.append((g, k))
    replicas: list[tuple[int, int]] = []
    need = shape.replicas
    if need:
        free = snap.replica_free[node].tolist()
        big = np.iinfo(np.int64).max
        for g in sorted(range(len(free)), key=lambda g: free[g] if free[g] > 0 else big):
            if need == 0 or free[g] <= 0:
                break
            take = min(need, free[g])
            replicas.append((g, take))
            need -= take
    return Assignment(
        node=node,
        cpu_milli=shape.cpu,
        memory_bytes=shape.mem,
        gpu_milli=tuple(gpu_milli),
        mig=tuple(mig),
        replicas=tuple(replicas),
    )
