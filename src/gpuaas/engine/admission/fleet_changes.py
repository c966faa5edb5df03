"""Typed fleet changes the admission engine takes in place, and the diff that produces them.

A fleet changes all day (an autoscaler adds and removes nodes, an operator cordons, drains or
repartitions one), and none of it should cost a rebuild of the engine or a re-reservation of
the workloads it does not touch. :meth:`AdmissionEngine.nodes_changed
<gpuaas.engine.admission.cycle.AdmissionEngine.nodes_changed>` takes a sequence of:

- :class:`AddNode`: a new node, fully free;
- :class:`RemoveNode`: the node leaves; every workload with a pod there is *displaced*;
- :class:`CordonNode`: nothing new is placed there (the unschedulable taint); with ``drain``
  the workloads there are displaced too, without it they keep running;
- :class:`RepartitionNode`: the node's new facts (MIG/MPS/time-slice layout, or capacity,
  labels, taints); a workload keeps its pods there when every device it holds still exists in
  the same form and the node still has the cpu and memory, and is displaced otherwise.

A displaced workload is requeued by the engine (its quota and all its devices are given back,
it queues again with its original creation time) and reported as a :class:`Displaced`, so the
caller can stop its pods and record why. Every other admitted workload keeps exactly its
devices. :func:`fleet_diff` turns two lists of nodes (before, after) into these changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gpuaas.engine.admission.nodes import NodeCapacity
from gpuaas.engine.gang import PodPlacement
from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.node import UNSCHEDULABLE, Node

W = TypeVar("W")


@dataclass(frozen=True, slots=True)
class AddNode:
    """``node`` joins the fleet, with nothing reserved on it."""

    node: Node | NodeCapacity


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """Node ``name`` leaves the fleet; the workloads with pods there are displaced."""

    name: str


@dataclass(frozen=True, slots=True)
class CordonNode:
    """Cordon (``cordoned``) or uncordon node ``name``; ``drain`` displaces its workloads."""

    name: str
    cordoned: bool = True
    drain: bool = False


@dataclass(frozen=True, slots=True)
class RepartitionNode:
    """Node ``node.name`` now has the facts of ``node`` (its GPU layout above all)."""

    node: Node | NodeCapacity


FleetChange = AddNode | RemoveNode | CordonNode | RepartitionNode


def keeps_devices(
    snap: Snapshot, new: Node, held: Iterable[W], pods_on: Callable[[W], Sequence[PodPlacement]]
) -> tuple[list[W], list[W]]:
    """The repartition rule, for every strategy: of the workloads ``held`` on a node about to
    take the facts of ``new``, (those that keep their pods there, those that lose a device). A
    workload keeps its pods when every device each of them holds still exists in the same form
    (:meth:`Snapshot.devices_kept`); whether they still *fit* once reserved again is the
    caller's second step (:func:`no_room_after_repartition`)."""
    kept: list[W] = []
    lost: list[W] = []
    for w in held:
        ok = all(snap.devices_kept(p.assignment, new) for p in pods_on(w))
        (kept if ok else lost).append(w)
    return kept, lost


def devices_gone(node: str) -> Reason:
    """Why a workload left ``node`` when a repartition took its devices."""
    return reason(
        Code.DEVICE_LOST, detail=f"node {node} was repartitioned and its devices are gone"
    )


def no_room_after_repartition(node: str) -> Reason:
    """Why a workload whose devices survived a repartition of ``node`` still left it."""
    return reason(
        Code.DEVICE_LOST,
        detail=f"node {node} was repartitioned and no longer has room for its pods",
    )


@dataclass(frozen=True, slots=True)
class Displaced:
    """An admitted workload the engine requeued because a change took its devices away."""

    workload: str
    node: str
    reason: Reason


def fleet_diff(
    before: Sequence[Node], after: Sequence[Node], draining: frozenset[str] = frozenset()
) -> list[FleetChange]:
    """The changes that turn fleet ``before`` into fleet ``after`` (nodes matched by name):
    removals first (their slots are then reused by additions), then cordons and repartitions,
    then additions. A node whose only difference is the unschedulable taint is a cordon (a
    drain when its name is in ``draining``); any other difference is a repartition."""
    old = {node.name: node for node in before}
    new = {node.name: node for node in after}
    changes: list[FleetChange] = [RemoveNode(name) for name in old if name not in new]
    for name, node in new.items():
        was = old.get(name)
        if was is None or was == node:
            if was is not None and name in draining:
                changes.append(CordonNode(name, True, drain=True))
            continue
        plain_was = [t for t in was.taints if t != UNSCHEDULABLE]
        plain_now = [t for t in node.taints if t != UNSCHEDULABLE]
        if plain_was == plain_now and dataclasses.replace(was, taints=node.taints) == node:
            changes.append(CordonNode(name, UNSCHEDULABLE in node.taints, drain=name in draining))
        else:
            changes.append(RepartitionNode(node))
    changes.extend(AddNode(node) for name, node in new.items() if name not in old)
    return changes
