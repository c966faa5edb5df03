"""The quota tree: nominal quota, borrowing and lending up a tree of cohorts.

Semantics follow Kueue's hierarchical cohorts. Every node (a ClusterQueue leaf or a Cohort) has,
per flavor-resource:

- ``subtree``: its own nominal quota plus what its children put into it (a child keeps back its
  *guaranteed* part, ``subtree - lendingLimit``, and offers the rest to its parent);
- ``usage``: what is in use in the subtree; only the part of a child's usage above its guaranteed
  quota is charged to the parent.

``available`` is what a ClusterQueue can still take (its unused guaranteed quota plus what its
ancestors can give, capped by each borrowingLimit on the way); ``potential_available`` is the same
on an empty tree, the most it could ever hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction

from gpuaas.model.governance import FlavorResource, Governance, ResourceGroup

INFINITE_SHARE = float("inf")


class QuotaNode:
    """One ClusterQueue or Cohort in the tree."""

    __slots__ = (
        "borrowing_limit",
        "children",
        "guaranteed",
        "height",
        "is_cq",
        "lendable",
        "lending_limit",
        "name",
        "nominal",
        "parent",
        "subtree",
        "usage",
        "weight",
        "weight_f",
    )

    def __init__(self, name: str, is_cq: bool, weight: Fraction) -> None:
        self.name = name
        self.is_cq = is_cq
        self.weight = weight
        self.weight_f = float(weight)
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.nominal: dict[FlavorResource, int] = {}
        self.borrowing_limit: dict[FlavorResource, int] = {}
        self.lending_limit: dict[FlavorResource, int] = {}
        self.subtree: dict[FlavorResource, int] = {}
        self.guaranteed: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.lendable: dict[str, int] = {}
        self.height = 0

    def __repr__(self) -> str:
        kind = "ClusterQueue" if self.is_cq else "Cohort"
        return f"<{kind} {self.name}>"

    def path_to_root(self) -> Iterator[QuotaNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


def _load_groups(node: QuotaNode, groups: Iterable[ResourceGroup]) -> None:
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                fr = (flavor.name, quota.name)
                node.nominal[fr] = quota.nominal
                if quota.borrowing_limit is not None:
                    node.borrowing_limit[fr] = quota.borrowing_limit
                if quota.lending_limit is not None:
                    node.lending_limit[fr] = quota.lending_limit


class QuotaTree:
    """Quota and usage of every ClusterQueue and Cohort of a :class:`Governance`."""

    def __init__(self, gov: Governance) -> None:
        self.cqs: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        for name in sorted(gov.cohort_names()):
            cohort = gov.cohort(name)
            node = QuotaNode(name, False, cohort.weight)
            _load_groups(node, cohort.resource_groups)
            self.cohorts[name] = node
        for name in sorted(gov.cohort_names()):
            parent = gov.cohort(name).parent
            if parent:
                self.cohorts[name].parent = self.cohorts[parent]
                self.cohorts[parent].children.append(self.cohorts[name])
        for cq in gov.cluster_queues.values():
            node = QuotaNode(cq.name, True, cq.weight)
            _load_groups(node, cq.resource_groups)
            self.cqs[cq.name] = node
            if cq.cohort:
                node.parent = self.cohorts[cq.cohort]
                node.parent.children.append(node)
        for node in self.cohorts.values():
            if node.parent is None:
                self._compute(node)
        for node in self.cqs.values():
            if node.parent is None:
                self._compute(node)
        for node in self.cohorts.values():
            for fr in node.subtree:
                node.lendable[fr[1]] = node.lendable.get(fr[1], 0) + self.potential_available(
                    node, fr
                )

    def _compute(self, node: QuotaNode) -> None:
        """Subtree quota and guaranteed quota, bottom up; cohort height (distance to a leaf)."""
        subtree = dict(node.nominal)
        height = 1 if node.children else 0
        for child in node.children:
            self._compute(child)
            if not child.is_cq:
                height = max(height, child.height + 1)
            for fr, amount in child.subtree.items():
                subtree[fr] = subtree.get(fr, 0) + amount - child.guaranteed.get(fr, 0)
        node.height = height
        node.subtree = subtree
        node.guaranteed = {
            fr: max(0, subtree.get(fr, 0) - limit) for fr, limit in node.lending_limit.items()
        }

    # --- queries --------------------------------------------------------------------------

    def available(self, node: QuotaNode, fr: FlavorResource) -> int:
        """What ``node`` can still take of ``fr`` now, borrowing included."""
        usage = node.usage.get(fr, 0)
        parent = node.parent
        if parent is None:
            return node.subtree.get(fr, 0) - usage
        guaranteed = node.guaranteed.get(fr, 0)
        local = max(0, guaranteed - usage)
        from_parent = self.available(parent, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            stored = node.subtree.get(fr, 0) - guaranteed
            used_in_parent = max(0, usage - guaranteed)
            from_parent = min(stored - used_in_parent + limit, from_parent)
        return local + from_parent

    def potential_available(self, node: QuotaNode, fr: FlavorResource) -> int:
        """The most ``node`` could hold of ``fr`` if nothing else used anything."""
        if node.parent is None:
            return node.subtree.get(fr, 0)
        amount = node.guaranteed.get(fr, 0) + self.potential_available(node.parent, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            amount = min(node.subtree.get(fr, 0) + limit, amount)
        return amount

    def borrowing_with(self, node: QuotaNode, fr: FlavorResource, amount: int) -> bool:
        return node.usage.get(fr, 0) + amount > node.subtree.get(fr, 0)

    def is_borrowing(self, node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
        return any(node.usage.get(fr, 0) > node.subtree.get(fr, 0) for fr in frs)

    def lendable_from_cohort(self, node: QuotaNode, fr: FlavorResource) -> int:
        """How much of ``fr`` the cohort could still give ``node`` beyond its own unused quota."""
        if node.parent is None:
            return 0
        own = max(0, node.subtree.get(fr, 0) - node.usage.get(fr, 0))
        return max(0, self.available(node, fr) - own)

    def borrow_height(self, node: QuotaNode, fr: FlavorResource, amount: int) -> tuple[int, bool]:
        """Height of the lowest subtree that fits ``amount`` more, and whether it is below the root.

        0 means no borrowing; a workload that needs a lower subtree borrows "less" and is
        considered first (Kueue's hierarchical ordering).
        """
        if node.parent is None or not self.borrowing_with(node, fr, amount):
            return 0, node.parent is not None
        remaining = amount - max(0, node.guaranteed.get(fr, 0) - node.usage.get(fr, 0))
        for ancestor in node.path_to_root():
            if not self.borrowing_with(ancestor, fr, remaining):
                return ancestor.height, ancestor.parent is not None
            remaining -= max(0, ancestor.guaranteed.get(fr, 0) - ancestor.usage.get(fr, 0))
        return node.root().height, False

    # --- usage ----------------------------------------------------------------------------

    def add_usage(self, node: QuotaNode, usage: Mapping[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            self._add(node, fr, amount)

    def remove_usage(self, node: QuotaNode, usage: Mapping[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            self._remove(node, fr, amount)

    def _add(self, node: QuotaNode | None, fr: FlavorResource, amount: int) -> None:
        while node is not None and amount > 0:
            current = node.usage.get(fr, 0)
            local = max(0, node.guaranteed.get(fr, 0) - current)
            node.usage[fr] = current + amount
            amount -= local
            node = node.parent

    def _remove(self, node: QuotaNode | None, fr: FlavorResource, amount: int) -> None:
        while node is not None and amount > 0:
            current = node.usage.get(fr, 0)
            in_parent = current - node.guaranteed.get(fr, 0)
            node.usage[fr] = current - amount
            if in_parent <= 0:
                return
            amount = min(amount, in_parent)
            node = node.parent

    # --- fair sharing ---------------------------------------------------------------------

    def share(
        self,
        node: QuotaNode,
        plus: Mapping[FlavorResource, int] | None = None,
        minus: Mapping[FlavorResource, int] | None = None,
    ) -> float:
        """Weighted dominant resource share: the largest fraction of the parent's lendable
        capacity of any resource that ``node`` borrows, divided by its fair-sharing weight."""
        parent = node.parent
        if parent is None:
            return 0.0
        borrowed: dict[str, int] = {}
        usage = node.usage
        for fr, quota in node.subtree.items():
            used = usage.get(fr, 0)
            if plus:
                used += plus.get(fr, 0)
            if minus:
                used -= minus.get(fr, 0)
            if used > quota:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + used - quota
        if not borrowed:
            return 0.0
        if node.weight_f == 0:
            return INFINITE_SHARE
        dominant = 0.0
        for resource, amount in borrowed.items():
            lendable = parent.lendable.get(resource, 0)
            if lendable > 0:
                dominant = max(dominant, amount * 1000 / lendable)
        return dominant / node.weight_f
