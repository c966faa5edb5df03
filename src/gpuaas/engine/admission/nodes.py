"""Physical fit at admission: quota alone is not enough when the nodes are known.

A workload is admitted only if every pod also fits on a node whose labels match the flavors it
was assigned (their ``nodeLabels``) and the pod set's ``nodeSelector``, and whose taints the pod
tolerates (all-or-nothing, first fit in node order). This is the simple, exact check the
admission cycle uses for scenario nodes; fleet-scale placement lives in the placement engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuaas.model.governance import AdmissionWorkload, ResourceFlavor
from gpuaas.model.node import Taint, TaintEffect, Toleration
from gpuaas.model.resources import ResourceList


@dataclass(slots=True)
class NodeCapacity:
    name: str
    labels: dict[str, str]
    capacity: ResourceList
    taints: tuple[Taint, ...] = ()
    used: ResourceList = field(default_factory=dict)

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.used.get(resource, 0)


def tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    """Whether every NoSchedule/NoExecute taint is tolerated."""
    return all(
        taint.effect == TaintEffect.PREFER_NO_SCHEDULE
        or any(tol.tolerates(taint) for tol in tolerations)
        for taint in taints
    )


class NodePool:
    """Free capacity per node; ``place`` reserves all pods of a workload or nothing."""

    def __init__(self, nodes: Sequence[NodeCapacity], flavors: Mapping[str, ResourceFlavor]):
        self.nodes = list(nodes)
        self.flavors = flavors
        self._by_name = {n.name: n for n in self.nodes}
        # eligible nodes per (labels, tolerations), and per (that, resources) the index of the
        # first node that still has some of every resource: first fit starts there
        self._eligible: dict[tuple[object, ...], list[NodeCapacity]] = {}
        self._hint: dict[tuple[object, ...], int] = {}
        # capacity only shrinks between releases: a pod-set shape that did not fit still
        # does not, until something is released
        self._released = 0
        self._no_fit: dict[tuple[object, ...], int] = {}
        self.last_failed: str | None = None  # the pod set that did not fit in the last place()

    def _nodes_for(
        self, labels: Mapping[str, str], tolerations: Sequence[Toleration]
    ) -> tuple[tuple[object, ...], list[NodeCapacity]]:
        key = (tuple(sorted(labels.items())), tuple(tolerations))
        nodes = self._eligible.get(key)
        if nodes is None:
            nodes = [
                n
                for n in self.nodes
                if all(n.labels.get(k) == v for k, v in labels.items())
                and tolerated(n.taints, tolerations)
            ]
            self._eligible[key] = nodes
        return key, nodes

    def place(
        self, wl: AdmissionWorkload, assignment: Mapping[str, Mapping[str, str]]
    ) -> dict[str, list[str]] | None:
        """Reserve nodes for every pod; the node name per pod, per pod set, or ``None``."""
        reserved: list[tuple[NodeCapacity, ResourceList]] = []
        placement: dict[str, list[str]] = {}
        for ps in wl.pod_sets:
            labels: dict[str, str] = dict(ps.node_selector)
            tolerations = list(ps.tolerations)
            for flavor_name in set(assignment.get(ps.name, {}).values()):
                flavor = self.flavors[flavor_name]
                labels.update(flavor.node_labels)
                tolerations.extend(flavor.tolerations)
            key, eligible = self._nodes_for(labels, tolerations)
            shape = (key, tuple(sorted(ps.requests.items())), ps.count)
            reserved_before = len(reserved)
            if self._no_fit.get(shape) == self._released:
                self._undo(reserved)
                self.last_failed = ps.name
                return None
            hint_key = (key, tuple(sorted(ps.requests)))
            start = self._hint.get(hint_key, 0)
            while start < len(eligible) and any(
                eligible[start].free(r) <= 0 for r, amount in ps.requests.items() if amount > 0
            ):
                start += 1
            self._hint[hint_key] = start
            names: list[str] = []
            for _ in range(ps.count):
                for i in range(start, len(eligible)):
                    node = eligible[i]
                    if all(node.free(r) >= amount for r, amount in ps.requests.items()):
                        for r, amount in ps.requests.items():
                            node.used[r] = node.used.get(r, 0) + amount
                        reserved.append((node, ps.requests))
                        names.append(node.name)
                        break
                else:
                    if reserved_before == 0:  # it failed on its own, not behind other pod sets
                        self._no_fit[shape] = self._released
                    self._undo(reserved)
                    self.last_failed = ps.name
                    return None
            placement[ps.name] = names
        return placement

    def _undo(self, reserved: list[tuple[NodeCapacity, ResourceList]]) -> None:
        # back to the state before place(): no capacity is new, so no-fit memories stay valid
        if reserved:
            for node, requests in reserved:
                self._release(node, requests)
            self._hint.clear()

    def release(self, wl: AdmissionWorkload, placement: Mapping[str, list[str]]) -> None:
        for ps in wl.pod_sets:
            for node_name in placement.get(ps.name, ()):
                self._release(self._by_name[node_name], ps.requests)
        self._hint.clear()  # freed capacity may sit before any hint
        self._released += 1

    def reserve(self, wl: AdmissionWorkload, placement: Mapping[str, list[str]]) -> None:
        """Reserve exactly ``placement`` again (undoing a :meth:`release`)."""
        for ps in wl.pod_sets:
            for node_name in placement.get(ps.name, ()):
                node = self._by_name[node_name]
                for r, amount in ps.requests.items():
                    node.used[r] = node.used.get(r, 0) + amount

    @staticmethod
    def _release(node: NodeCapacity, requests: Mapping[str, int]) -> None:
        for r, amount in requests.items():
            node.used[r] = node.used.get(r, 0) - amount
