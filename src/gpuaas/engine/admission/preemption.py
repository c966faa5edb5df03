"""Preemption: which admitted workloads to evict so that a pending one fits.

Kueue's rules: candidates come from the preemptor's own ClusterQueue (``withinClusterQueue``)
and from ClusterQueues of the same cohort tree that borrow the contested flavor-resources
(``reclaimWithinCohort``). Candidates are ordered (other queues first, lower priority first, most
recently admitted first); they are removed one by one until the preemptor fits, then every
victim that is not needed after all is put back (the "fill-back" pass), which gives a minimal
set. ``borrowWithinCohort`` lets a preemptor that borrows evict lower-priority borrowers below a
priority threshold. With fair sharing, victims are taken from the ClusterQueue with the highest
dominant resource share while a strategy allows it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter

from gpuaas.engine.admission.quota import QuotaNode, QuotaTree
from gpuaas.engine.admission.state import AdmissionConfig, AdmittedWorkload
from gpuaas.model.governance import (
    AdmissionWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    EvictionReason,
    FairSharingStrategy,
    FlavorResource,
    ReclaimWithinCohort,
    WithinClusterQueue,
)

Target = tuple[AdmittedWorkload, EvictionReason]
_ORDER = attrgetter("victim_order")


def _strategy(kind: FairSharingStrategy) -> Callable[[float, float, float], bool]:
    if kind == FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return lambda preemptor_new, _target_old, target_new: preemptor_new <= target_new
    return lambda preemptor_new, target_old, _target_new: preemptor_new < target_old


class Preemptor:
    """Finds victims against the live quota tree (removing and restoring usage as it tries)."""

    def __init__(
        self,
        tree: QuotaTree,
        cluster_queues: Mapping[str, ClusterQueue],
        by_cq: Mapping[str, dict[str, AdmittedWorkload]],
        config: AdmissionConfig,
        ordered: Mapping[str, list[AdmittedWorkload]] | None = None,
    ) -> None:
        self.tree = tree
        self.cluster_queues = cluster_queues
        self.by_cq = by_cq
        # per queue, admitted workloads in victim order (kept sorted by the engine)
        self.ordered: Mapping[str, list[AdmittedWorkload]] = (
            ordered
            if ordered is not None
            else {q: sorted(ws.values(), key=_ORDER) for q, ws in by_cq.items()}
        )
        self.config = config
        self.now = 0.0
        self._tree_cqs: dict[str, list[str]] = {}
        for name, node in tree.cqs.items():
            if node.parent is not None:
                self._tree_cqs.setdefault(node.root().name, []).append(name)

    # --- candidates -----------------------------------------------------------------------

    def _protected(self, cand: AdmittedWorkload) -> bool:
        return (
            self.config.min_run_time > 0 and self.now - cand.admitted_at < self.config.min_run_time
        )

    def candidates(
        self, wl: AdmissionWorkload, cq_name: str, frs: set[FlavorResource]
    ) -> list[AdmittedWorkload]:
        cq = self.cluster_queues[cq_name]
        node = self.tree.cqs[cq_name]
        policy = cq.preemption
        own: list[AdmittedWorkload] = []
        within = policy.within_cluster_queue
        if within != WithinClusterQueue.NEVER:
            newer = within == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
            for cand in self.ordered.get(cq_name, ()):  # lowest priority first
                if cand.priority > wl.priority or (cand.priority == wl.priority and not newer):
                    break
                eligible = cand.priority < wl.priority or wl.created < cand.workload.created
                if eligible and _uses(cand, frs) and not self._protected(cand):
                    own.append(cand)
        others: list[AdmittedWorkload] = []
        if node.parent is not None and policy.reclaim_within_cohort != ReclaimWithinCohort.NEVER:
            only_lower = policy.reclaim_within_cohort != ReclaimWithinCohort.ANY
            ancestors = set(map(id, node.path_to_root()))
            for other in self._tree_cqs.get(node.root().name, ()):
                if other == cq_name or not self._exceeds_to_lca(
                    self.tree.cqs[other], ancestors, frs
                ):
                    continue
                for cand in self.ordered.get(other, ()):
                    if only_lower and cand.priority >= wl.priority:
                        break
                    if _uses(cand, frs) and not self._protected(cand):
                        others.append(cand)
            others.sort(key=_ORDER)  # merges the already sorted runs
        # other queues' workloads first, then the queue's own
        out = others + own
        return out

    def _exceeds_to_lca(
        self, other: QuotaNode, ancestors: set[int], frs: set[FlavorResource]
    ) -> bool:
        """Whether ``other`` and every cohort between it and the common ancestor with the
        preemptor use more than their quota: a subtree within its quota is not reclaimed from."""
        tree = self.tree
        if not tree.is_borrowing(other, frs):
            return False
        cohort = other.parent
        while cohort is not None and id(cohort) not in ancestors:
            if not tree.is_borrowing(cohort, frs):
                return False
            cohort = cohort.parent
        return True

    # --- targets --------------------------------------------------------------------------

    def targets(
        self,
        wl: AdmissionWorkload,
        cq_name: str,
        request: Mapping[FlavorResource, int],
        frs: set[FlavorResource],
    ) -> list[Target]:
        """A minimal set of victims after which ``request`` fits in ``cq_name``, or ``[]``."""
        candidates = self.candidates(wl, cq_name, frs)
        if not candidates:
            return []
        node = self.tree.cqs[cq_name]
        cq = self.cluster_queues[cq_name]
        same = [c for c in candidates if c.cluster_queue == cq_name]
        if len(same) == len(candidates):
            return self._minimal(request, node, frs, candidates, True, None)
        threshold: int | None = None
        bwc = cq.preemption.borrow_within_cohort
        if bwc is not None and bwc != BorrowWithinCohortPolicy.NEVER:
            threshold = wl.priority
            limit = cq.preemption.max_priority_threshold
            if limit is not None and limit < threshold:
                threshold = limit + 1
        if self.config.fair_sharing:
            return self._fair(wl, request, node, frs, candidates, threshold)
        if threshold is not None:
            if not self._under_nominal(node, frs):
                candidates = [
                    c for c in candidates if c.cluster_queue == cq_name or c.priority < threshold
                ]
            return self._minimal(request, node, frs, candidates, True, threshold)
        if self._under_nominal(node, frs):
            found = self._minimal(request, node, frs, candidates, False, None)
            if found:
                return found
        return self._minimal(request, node, frs, same, True, None)

    def _under_nominal(self, node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
        return all(node.usage.get(fr, 0) < node.nominal.get(fr, 0) for fr in frs)

    def _fits(
        self, request: Mapping[FlavorResource, int], node: QuotaNode, allow_borrowing: bool
    ) -> bool:
        tree = self.tree
        for fr, amount in request.items():
            if not allow_borrowing and tree.borrowing_with(node, fr, amount):
                return False
            if amount > tree.available(node, fr):
                return False
        return True

    def _remove(self, cand: AdmittedWorkload) -> None:
        self.tree.remove_usage(self.tree.cqs[cand.cluster_queue], cand.usage)

    def _restore(self, targets: Iterable[Target]) -> None:
        for cand, _ in targets:
            self.tree.add_usage(self.tree.cqs[cand.cluster_queue], cand.usage)

    def _fill_back(
        self,
        targets: list[Target],
        request: Mapping[FlavorResource, int],
        node: QuotaNode,
        allow: bool,
    ) -> list[Target]:
        """Put back, newest-tried first, every victim whose return still lets ``request`` fit."""
        kept = list(targets)
        for i in range(len(kept) - 2, -1, -1):
            cand = kept[i][0]
            self.tree.add_usage(self.tree.cqs[cand.cluster_queue], cand.usage)
            if self._fits(request, node, allow):
                kept.pop(i)
            else:
                self._remove(cand)
        return kept

    def _minimal(
        self,
        request: Mapping[FlavorResource, int],
        node: QuotaNode,
        frs: set[FlavorResource],
        candidates: list[AdmittedWorkload],
        allow_borrowing: bool,
        threshold: int | None,
    ) -> list[Target]:
        targets: list[Target] = []
        fits = False
        for cand in candidates:
            reason = EvictionReason.IN_CLUSTER_QUEUE
            if cand.cluster_queue != node.name:
                if not self.tree.is_borrowing(self.tree.cqs[cand.cluster_queue], frs):
                    continue
                reason = EvictionReason.IN_COHORT_RECLAMATION
                if threshold is not None:
                    if cand.priority >= threshold:
                        allow_borrowing = False
                    else:
                        reason = EvictionReason.IN_COHORT_RECLAIM_WHILE_BORROWING
            self._remove(cand)
            targets.append((cand, reason))
            if self._fits(request, node, allow_borrowing):
                fits = True
                break
        if not fits:
            self._restore(targets)
            return []
        targets = self._fill_back(targets, request, node, allow_borrowing)
        self._restore(targets)
        return targets

    def _fair(
        self,
        wl: AdmissionWorkload,
        request: Mapping[FlavorResource, int],
        node: QuotaNode,
        frs: set[FlavorResource],
        candidates: list[AdmittedWorkload],
        threshold: int | None,
    ) -> list[Target]:
        """Fair-sharing preemption: take from the queue with the highest share first, while the
        configured strategy says the preemptor's share would stay no higher than the victim's."""
        tree = self.tree
        # cheap bound: evicting every candidate frees at most their usage
        for fr, amount in request.items():
            room = tree.available(node, fr) + sum(c.usage.get(fr, 0) for c in candidates)
            if room < amount:
                return []
        strategies = [_strategy(s) for s in self.config.fair_sharing_strategies]
        groups: dict[str, list[AdmittedWorkload]] = {}
        for cand in candidates:
            groups.setdefault(cand.cluster_queue, []).append(cand)

        def heap_of(groups: Mapping[str, list[AdmittedWorkload]]) -> list[tuple[float, str]]:
            heap = [(-tree.share(tree.cqs[name]), name) for name, ws in groups.items() if ws]
            heapq.heapify(heap)
            return heap

        heap = heap_of(groups)
        preemptor_share = tree.share(node, plus=request)
        without: dict[tuple[object, ...], float] = {}  # share of a queue minus one victim shape
        targets: list[Target] = []
        retry: dict[str, list[AdmittedWorkload]] = {}
        fits = False
        while heap and not fits:
            neg_share, name = heapq.heappop(heap)
            cq_node = tree.cqs[name]
            workloads = groups[name]
            if name == node.name:
                cand = workloads.pop(0)
                self._remove(cand)
                targets.append((cand, EvictionReason.IN_CLUSTER_QUEUE))
                if self._fits(request, node, True):
                    fits = True
                    break
                preemptor_share = tree.share(node, plus=request)
                if workloads:
                    heapq.heappush(heap, (-tree.share(cq_node), name))
                continue
            for i, cand in enumerate(workloads):
                below = threshold is not None and cand.priority < threshold
                memo = (name, cand.usage_key)
                new_share = without.get(memo)
                if new_share is None:
                    new_share = without[memo] = tree.share(cq_node, minus=cand.usage)
                if below or strategies[0](preemptor_share, -neg_share, new_share):
                    without.clear()
                    self._remove(cand)
                    targets.append((cand, EvictionReason.IN_COHORT_FAIR_SHARING))
                    if self._fits(request, node, True):
                        fits = True
                        break
                    groups[name] = workloads[i + 1 :]
                    if groups[name] and tree.is_borrowing(cq_node, frs):
                        heapq.heappush(heap, (-tree.share(cq_node), name))
                    break
                retry.setdefault(name, []).append(cand)
        if not fits and len(strategies) > 1:
            heap = heap_of(retry)
            while heap and not fits:
                neg_share, name = heapq.heappop(heap)
                if strategies[1](preemptor_share, -neg_share, 0.0):
                    cand = retry[name][0]
                    self._remove(cand)
                    targets.append((cand, EvictionReason.IN_COHORT_FAIR_SHARING))
                    fits = self._fits(request, node, True)
        if not fits:
            self._restore(targets)
            return []
        targets = self._fill_back(targets, request, node, True)
        self._restore(targets)
        return targets


def _uses(cand: AdmittedWorkload, frs: set[FlavorResource]) -> bool:
    return not cand.frs.isdisjoint(frs)
