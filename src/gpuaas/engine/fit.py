"""The fit rule: whether one more pod fits a node now, and how many identical pods fit.

Every consumable resource a pod asks for is one :class:`Rule` in :data:`RULES`: what one pod
needs of it (:attr:`Rule.needs`, read from the pod's :class:`~gpuaas.engine.framework.PodShape`)
and what each node has free (:attr:`Rule.free`, read from the snapshot's maintained arrays). A
pod fits a node when, for every rule and every amount it needs, ``free >= amount``; ``free //
amount`` pods fit (a rule may count differently, as a share of one GPU does: shares do not
span GPUs, so the count sums over the node's GPUs). The filter plugins, the fused fast path
(:func:`~gpuaas.engine.framework.feasible_nodes`) and topology's per-node and per-domain counts
all read these rules, so a new resource is one new entry here (plus its array in the snapshot).

Static facts (GPU model, node selector, taints, cordons) are not rules: they never change with
reservations and are cached per snapshot layout by
:func:`~gpuaas.engine.framework.static_mask`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuaas.engine.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuaas.engine.framework import PodShape

#: A node selection: every node (``slice(None)``) or int node indices.
Selection = slice | np.ndarray
#: What one pod needs of a rule's resource: ``(key, amount)`` pairs, the key naming which of
#: the rule's free arrays to read (a MIG profile; None for rules with one array).
Needs = tuple[tuple[object, int], ...]
_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, slots=True)
class Rule:
    """One consumable resource of the fit rule.

    ``group`` is the filter plugin that reports it (``cpu``, ``memory``, ``gpu``); ``needs``
    what one pod asks; ``free`` the free amount per selected node comparable with an amount, or
    None when no node can ever have it (an unknown MIG profile); ``count`` how many pods of
    ``amount`` fit, when that is not ``free // amount``.
    """

    name: str
    group: str
    needs: Callable[[PodShape], Needs]
    free: Callable[[Snapshot, Selection, object], np.ndarray | None]
    count: Callable[[Snapshot, Selection, object, int], np.ndarray] | None = None


def sum_per_row(matrix: np.ndarray) -> np.ndarray:
    """``matrix.sum(axis=1)`` for an int [N, G] matrix (einsum is ~2.5x faster here)."""
    return np.einsum("ij->i", matrix)


def _share_count(snap: Snapshot, sel: Selection, key: object, share: int) -> np.ndarray:
    """Shares of ``share`` milli that fit the node's whole-mode GPUs (one share per GPU)."""
    free = snap.gpu_free[sel]
    return sum_per_row(np.where(free >= 0, free, 0) // share)


def _mem_free(snap: Snapshot, sel: Selection, key: object) -> np.ndarray:
    return snap.mem_free[sel]


def _mig_free(snap: Snapshot, sel: Selection, profile: object) -> np.ndarray | None:
    p = snap.profile_id(str(profile))
    return None if p < 0 else snap.mig_free[sel, p]


def _nic_free(snap: Snapshot, sel: Selection, pool: object) -> np.ndarray | None:
    free = snap.nics.free_of(str(pool))
    return None if free is None else free[sel]


#: The rules, cheapest and most selective first (the fused path ANDs them in this order).
RULES: tuple[Rule, ...] = (
    Rule("cpu", "cpu", lambda s: ((None, s.cpu),) if s.cpu else (), lambda n, x, _: n.cpu_free[x]),
    Rule("memory", "memory", lambda s: ((None, s.mem),) if s.mem else (), _mem_free),
    Rule(
        "whole GPUs",
        "gpu",
        lambda s: ((None, s.whole),) if s.whole else (),
        lambda n, x, _: n.full_free[x],
    ),
    Rule(
        "GPU share",
        "gpu",
        lambda s: ((None, s.share),) if s.share else (),
        lambda n, x, _: n.max_free[x],
        _share_count,
    ),
    Rule("MIG instances", "gpu", lambda s: s.mig, _mig_free),
    Rule(
        "time-sliced replicas",
        "gpu",
        lambda s: ((None, s.replicas),) if s.replicas else (),
        lambda n, x, _: n.replica_sum[x],
    ),
    # NIC VFs of the pod's pool (group ``nic``), free per node from gpuaas.engine.nics
    Rule("NIC VFs", "nic", lambda s: ((s.nic_pool, s.nics),) if s.nics else (), _nic_free),
)


#: Per shape object: the (rule, key, amount) it needs, in rule order (see :func:`needs_of`).
_NEEDS: dict[int, tuple[PodShape, tuple[tuple[Rule, object, int], ...]]] = {}
_MAX_NEEDS = 4096


def needs_of(shape: PodShape) -> tuple[tuple[Rule, object, int], ...]:
    """Every ``(rule, key, amount)`` one pod of ``shape`` needs, in the order of
    :data:`RULES` and of each rule's needs: what :func:`fit_mask` compares, listed once per
    shape object (shapes are frozen and memoised per request, and asking every rule what a
    shape needs costs more than the compares on a rack of nodes)."""
    found = _NEEDS.get(id(shape))
    if found is not None and found[0] is shape:
        return found[1]
    plan = tuple((rule, key, amount) for rule in RULES for key, amount in rule.needs(shape))
    if len(_NEEDS) >= _MAX_NEEDS:
        _NEEDS.clear()
    _NEEDS[id(shape)] = (shape, plan)
    return plan


def fit_mask(
    snap: Snapshot, shape: PodShape, sel: Selection, size: int, group: str | None = None
) -> np.ndarray | None:
    """Bool per selected node (``size`` of them): one more pod of ``shape`` fits now, by every
    rule (or only those of ``group``). None when no rule applies (everything fits), so the
    caller can skip a mask."""
    mask: np.ndarray | None = None
    for rule, key, amount in needs_of(shape):
        if group is not None and rule.group != group:
            continue
        free = rule.free(snap, sel, key)
        if free is None:
            return np.zeros(size, dtype=bool)
        part = free >= amount
        mask = part if mask is None else np.logical_and(mask, part, out=mask)
    return mask


def fits_one(snap: Snapshot, shape: PodShape, node: int) -> bool:
    """:func:`fit_mask` for one node, on scalars: whether one more pod of ``shape`` fits
    ``node`` now by every rule (a few scalar reads; numpy's per-call overhead on a one-node
    selection costs more than the compares)."""
    for rule, key, amount in needs_of(shape):
        free = rule.free(snap, node, key)
        if free is None or free < amount:
            return False
    return True


def fit_count(snap: Snapshot, shape: PodShape, sel: Selection, size: int) -> np.ndarray:
    """How many more pods of ``shape`` fit each selected node now, by every rule (int64, one
    per node); exact for identical pods. A pod asking for nothing counts one per node."""
    fit = np.full(size, _BIG, dtype=np.int64)
    asked = False
    for rule in RULES:
        for key, amount in rule.needs(shape):
            asked = True
            if rule.count is not None:
                np.minimum(fit, rule.count(snap, sel, key, amount), out=fit)
                continue
            free = rule.free(snap, sel, key)
            if free is None:
                fit[:] = 0
                return fit
            np.minimum(fit, free // amount, out=fit)
    if not asked:
        np.minimum(fit, 1, out=fit)
    return fit
