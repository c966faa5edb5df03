"""Placing a pod set of identical pods in bulk, with exactly the one-at-a-time decisions.

A gang's pod set is placed pod by pod (:func:`gpuaas.engine.gang._place_in_scope`): each pod
runs the filters and the policy's score over every candidate node, so a pod set of 10,000
identical pods costs 10,000 fleet-wide decisions (issue 19: one abusive tenant's 10,000
one-millicore pods made a reconcile step of ~1 s, ~60 % of it placing them).

Most policies do not need that. Every pod of a pod set asks the same thing, and reserving a pod
changes only the node it went to, so the next pod sees every other node as the previous one
saw it. When, in addition, the policy's score of a node

1. depends only on that node (its free resources, what the policy remembers of it) and the pod,
   never on the other candidates, with ties broken by a fixed order (the node names, through
   :func:`~gpuaas.engine.policies.base.name_order_ties`), and
2. does not fall as copies of the pod are added to that node (best fit and packing prefer the
   fuller node; clustering a node already running the same kind),

then the node chosen for one pod stays chosen until it is full, and the next one chosen is the
next in the first pod's ranking (the others did not move). So the whole pod set is: rank the
feasible nodes once, and fill them in that order, each with as many copies as fit
(:func:`gpuaas.engine.fit.fit_count`, exact for identical pods): O(nodes) of vector work plus
a reservation per pod, not O(pods x nodes).

A policy declares that it can by a ``fill_order(state, snap, feasible)`` method
(:class:`BulkFillPlugin`): the feasible nodes in the order one-at-a-time placement would fill
them, or None where the two conditions do not hold for this pod (then the pod set keeps the
one-at-a-time path). Policies that spread (dot product, random), or whose score of a node moves
with the whole fleet's fragmentation (FGD, the default), declare nothing. Pods that ask NICs
(alignment may drop the chosen node), DRA claims, and sampled scoring (a round-robin window
that moves with every decision) are never bulk-filled. Each pod still gets its own
:class:`~gpuaas.engine.gang.PodPlacement`, its devices chosen by the policy's ``assign`` on the
node as it stands after the previous copies, and its own reservation (reserve hooks included),
so releasing the gang is unchanged (copies of a device-less pod share one assignment and are
reserved at once, :meth:`~gpuaas.engine.snapshot.Snapshot.reserve_copies`). The decisions
(node and devices of every pod) are the one-at-a-time path's, which
``tests/engine/test_bulk_fill.py`` checks on drawn fleets and pod sets for every policy that
declares bulk. A bulk-placed pod's ``score`` is its node's score
in the first pod's ranking (nothing reads it; one pod at a time, later pods can score their
node otherwise, e.g. higher as it fills).

When fewer pods fit than the pod set has, the bulk fill places what fits and the caller goes on
one pod at a time, so the failing pod's reason is the one-at-a-time path's, word for word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from gpuaas.engine.fit import fit_count
from gpuaas.engine.framework import CycleState, PodShape, ReservePlugin, feasible_nodes
from gpuaas.engine.place import Placement
from gpuaas.engine.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuaas.engine.gang import PodPlacement
    from gpuaas.model.workload import PodSet


@runtime_checkable
class BulkFillPlugin(Protocol):
    """A score plugin that can rank the nodes once for a pod set of identical pods."""

    def fill_order(
        self, state: CycleState, snap: Snapshot, feasible: np.ndarray
    ) -> np.ndarray | None:
        """``feasible`` (node indices, all of which fit one more pod) in the order
        one-at-a-time placement fills them, best first; None when this pod's decisions are not
        sticky under this policy (see the module docstring)."""
        ...


def ranked(
    keys: np.ndarray, feasible: np.ndarray, rng: np.random.Generator | None
) -> np.ndarray | None:
    """``feasible`` by descending ``keys`` (the policy's score of each node); equal keys keep
    ascending node order, which is :func:`~gpuaas.engine.place.best_score`'s choice without
    ``rng``. With ``rng`` a tie is drawn at random, which a ranking cannot foretell: None."""
    order = np.argsort(-keys, kind="stable")
    if rng is not None and len(keys) > 1:
        ordered = keys[order]
        if np.any(ordered[1:] == ordered[:-1]):
            return None
    return feasible[order]


_FILLS: dict[type, bool] = {}


def fills_in_bulk(policy: object) -> BulkFillPlugin | None:
    """The policy as a :class:`BulkFillPlugin`, or None (cached per type, as
    :func:`~gpuaas.engine.framework.reserve_hooks` is)."""
    kind = type(policy)
    has = _FILLS.get(kind)
    if has is None:
        has = _FILLS[kind] = callable(getattr(kind, "fill_order", None))
    return policy if has else None  # type: ignore[return-value]


def asks_nothing(shape: PodShape) -> bool:
    """A pod that asks for no consumable resource fits any node any number of times."""
    return (
        not (shape.cpu or shape.mem or shape.whole or shape.share or shape.mig or shape.replicas)
        and not shape.nics
    )


def device_less(shape: PodShape) -> bool:
    """Copies of such a pod on one node take the same (CPU and memory only) assignment."""
    return not (shape.whole or shape.share or shape.mig or shape.replicas or shape.nics)


def bulk_fill(
    snap: Snapshot,
    pod_set: PodSet,
    nodes: np.ndarray | None,
    policy: object,
    hooks: ReservePlugin | None,
    rng: np.random.Generator | None,
    placed: list[PodPlacement],
) -> int:
    """Reserve as many pods of ``pod_set`` as fit within ``nodes`` (None: the whole fleet),
    in the one-at-a-time path's order, appending them to ``placed``; returns how many (0 when
    the policy or the pod does not allow bulk: the caller then places every pod itself)."""
    from gpuaas.engine.gang import PodPlacement  # gang imports this module

    plugin = fills_in_bulk(policy)
    pod = pod_set.pod
    if plugin is None or pod_set.count < 2 or pod.claims:
        return 0
    shape = PodShape.of(pod)
    if shape.nics:
        return 0
    state = CycleState(pod=pod, shape=shape, rng=rng)
    feasible = feasible_nodes(state, snap, nodes)
    if len(feasible) == 0:
        return 0
    order = plugin.fill_order(state, snap, feasible)
    if order is None:
        return 0
    # each pod's score as the first pod's ranking gave it (see the module docstring)
    scores = policy.score(state, snap, order)  # type: ignore[attr-defined]
    left = pod_set.count
    if asks_nothing(shape):
        counts = np.array([left], dtype=np.int64)
        order, scores = order[:1], scores[:1]
    else:
        counts = fit_count(snap, shape, order, len(order))
    same = device_less(shape)
    name = pod_set.name
    names = snap.names
    for node, copies, score in zip(order.tolist(), counts.tolist(), scores.tolist(), strict=True):
        take = min(copies, left)
        if take <= 0:
            continue
        node_name = names[node]
        if same:  # one assignment for every copy, reserved at once
            assignment = policy.assign(state, snap, node)  # type: ignore[attr-defined]
            snap.reserve_copies(node, assignment, take)
            placement = Placement(node, node_name, assignment, score)
            first = pod_set.count - left
            placed.extend(PodPlacement(name, first + k, pod, placement) for k in range(take))
            if hooks is not None:
                for _ in range(take):
                    hooks.on_reserve(snap, pod, assignment)
            left -= take
        else:  # devices differ from copy to copy: chosen on the node as it stands
            for _ in range(take):
                assignment = policy.assign(state, snap, node)  # type: ignore[attr-defined]
                snap.reserve(node, assignment)
                if hooks is not None:
                    hooks.on_reserve(snap, pod, assignment)
                placement = Placement(node, node_name, assignment, score)
                placed.append(PodPlacement(name, pod_set.count - left, pod, placement))
                left -= 1
        if left == 0:
            break
    return pod_set.count - left
