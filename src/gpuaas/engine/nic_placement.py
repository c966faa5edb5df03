"""NICs for a placed pod: which nodes can give it aligned VFs, and which VFs it takes.

The fit rule (:mod:`gpuaas.engine.fit`) already keeps only nodes with enough free VFs of the
pod's pool. Alignment depends on which GPUs the pod gets, so it is judged here, per node, on
the few nodes that survived the vectorised filters (and memoised per node version):

- :func:`narrow`: ``required`` keeps the nodes where a fully aligned choice exists (none left:
  the pod waits with :attr:`~gpuaas.engine.reasons.Code.NIC_ALIGNMENT`); ``preferred`` keeps
  them when there are any, else every node; ``none`` keeps every node;
- :func:`attach`: after the policy chose the node and GPUs, the pod's VFs
  (:meth:`~gpuaas.engine.nics.NicIndex.choose`); when the policy's GPUs cannot be aligned but
  other free whole GPUs (or another GPU for a share) of the node can, the pod takes those GPUs.

A pod asking no NICs never calls either (its shape asks 0 VFs).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuaas.engine.framework import CycleState, default_assignment
from gpuaas.engine.nics import NUMA, ROOT
from gpuaas.engine.snapshot import MILLI, Assignment, Snapshot
from gpuaas.model.network import Alignment, NetworkRequest

_MEMO: dict[tuple[int, int, int, object], bool] = {}
_MEMO_MAX = 200_000


def _gpus(a: Assignment) -> list[int]:
    """The GPU slots an assignment uses (a MIG instance or a replica counts its GPU)."""
    return sorted({g for g, _ in a.gpu_milli} | {g for g, _ in a.mig} | {g for g, _ in a.replicas})


def _candidates(state: CycleState, snap: Snapshot, node: int) -> list[list[int]] | None:
    """The GPU choices to try for alignment, best first; None when the GPUs cannot be chosen
    again (MIG, replicas: the policy's choice stands)."""
    shape = state.shape
    row = snap.gpu_free[node].tolist()
    if shape.whole:
        free = [g for g, f in enumerate(row) if f == MILLI]
        return _whole_choices(snap, node, free, shape.whole, state.pod.network)
    if shape.share:
        fits = sorted((f, g) for g, f in enumerate(row) if f >= shape.share)
        return [[g] for _, g in fits]
    return None


def _whole_choices(
    snap: Snapshot, node: int, free: list[int], need: int, network: NetworkRequest | None
) -> list[list[int]]:
    """Sets of ``need`` free GPUs worth trying, those inside one PCIe root (then one NUMA
    node) first, and, for ``perGpu``, the GPUs that have an aligned NIC in their domain."""
    topo = snap.nics.gpus.get(node, ())
    place = {g: topo[g] if g < len(topo) else ("", None) for g in free}
    choices: list[list[int]] = []
    for level in (ROOT, NUMA):
        groups: dict[object, list[int]] = {}
        for g in free:
            key = place[g][0] if level == ROOT else place[g][1]
            if key not in ("", None):
                groups.setdefault(key, []).append(g)
        for members in groups.values():
            if len(members) >= need:
                choices.append(members[:need])
    if network is not None and network.per_gpu and len(free) > need:
        # one GPU from each domain with an aligned NIC first, then the rest
        nics = snap.nics.nics.get(node, ())
        roots = {nic.pcie_root for nic in nics if nic.pcie_root}
        numas = {nic.numa_node for nic in nics if nic.numa_node is not None}
        ranked = sorted(free, key=lambda g: (place[g][0] not in roots, place[g][1] not in numas, g))
        choices.append(sorted(ranked[:need]))
    return choices


def attach(state: CycleState, snap: Snapshot, a: Assignment) -> Assignment | None:
    """``a`` with the pod's VFs (and GPUs chosen again where that aligns them); None when no
    acceptable choice exists on the node (too few VFs, or none aligned under ``required``)."""
    network = state.pod.network
    assert network is not None
    nics = snap.nics
    node = a.node
    per_pod = state.shape.nics
    first = nics.choose(node, _gpus(a), network, per_pod)
    if first is not None and first[1] == 0:
        return dataclasses.replace(a, nics=first[0])
    if network.alignment is not Alignment.NONE:
        for gpus in _candidates(state, snap, node) or ():
            found = nics.choose(node, gpus, network, per_pod)
            if found is not None and found[1] == 0:
                again = _with_gpus(state, snap, node, gpus, a)
                return dataclasses.replace(again, nics=found[0])
    if first is None or (network.alignment is Alignment.REQUIRED and first[1]):
        return None
    return dataclasses.replace(a, nics=first[0])


def _with_gpus(
    state: CycleState, snap: Snapshot, node: int, gpus: list[int], a: Assignment
) -> Assignment:
    if state.shape.share:
        return default_assignment(state, snap, node, share_gpu=gpus[0])
    return dataclasses.replace(a, gpu_milli=tuple((g, MILLI) for g in gpus))


def can_align(state: CycleState, snap: Snapshot, node: int) -> bool:
    """Whether the pod can get fully aligned VFs on ``node`` now (memoised per node version)."""
    key = (snap.uid, node, int(snap.version[node]), (state.shape, state.pod.network))
    found = _MEMO.get(key)
    if found is not None:
        return found
    network = state.pod.network
    assert network is not None
    strict = dataclasses.replace(network, alignment=Alignment.REQUIRED)
    per_pod = state.shape.nics
    choices = _candidates(state, snap, node)
    if choices is None:
        choices = [_gpus(default_assignment(state, snap, node))]
    ok = any(snap.nics.choose(node, gpus, strict, per_pod) is not None for gpus in choices)
    if not ok and state.shape.whole:  # the policy's lowest free GPUs, as a last try
        row = snap.gpu_free[node].tolist()
        lowest = [g for g, f in enumerate(row) if f == MILLI][: state.shape.whole]
        ok = snap.nics.choose(node, lowest, strict, per_pod) is not None
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = ok
    return ok


def narrow(state: CycleState, snap: Snapshot, feasible: np.ndarray) -> np.ndarray:
    """The feasible nodes the pod's alignment policy lets it use (see the module docstring)."""
    network = state.pod.network
    if network is None or network.alignment is Alignment.NONE or len(feasible) == 0:
        return feasible
    mask = np.fromiter(
        (can_align(state, snap, int(n)) for n in feasible), dtype=bool, count=len(feasible)
    )
    if network.alignment is Alignment.PREFERRED and not mask.any():
        return feasible
    return feasible[mask]
