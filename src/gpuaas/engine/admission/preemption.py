"""Preemption: which admitted workloads to evict so that a pending one fits.

Kueue's classical rules. Candidates are of three kinds:

- *hierarchical*: workloads of other ClusterQueues over which the preemptor has a hierarchical
  advantage. Walking up from the preemptor's queue, the first node (the queue itself, or a
  cohort) whose own quota would hold the request, after what the nodes below keep locally, makes
  every borrower inside it reclaimable whatever the preemptor borrows. A queue within its
  nominal quota thus always reclaims from the borrowers of its cohort, and a cohort within its
  quota reclaims from borrowers elsewhere in the tree;
- *priority* candidates: borrowers of other queues reached before such a node is found; they
  may be evicted only if the preemptor does not borrow afterwards, unless ``borrowWithinCohort``
  allows it for candidates of lower priority, at or below ``maxPriorityThreshold``
  (``InCohortReclaimWhileBorrowing``);
- the queue's own workloads (``withinClusterQueue``).

``reclaimWithinCohort`` decides which other queues' workloads qualify by priority. Only queues
(and cohorts up to the common ancestor) that use more than their quota of a contested
flavor-resource are reclaimed from, and a subtree within its quota is not even visited: the cost
is paid only where someone borrows. Candidates are tried hierarchical first, then priority, then
the queue's own, each kind lowest priority and most recently admitted first; they are removed one
by one until the preemptor's whole request fits, then every victim that is not needed after all
is put back (the "fill-back" pass), which gives a minimal set. Whether the preemptor may borrow
is decided per attempt, as Kueue does: with borrowing first, or without borrowing first when
reclaiming without borrowing is the only way to reach other queues.

With fair sharing, victims are taken from the ClusterQueue with the highest dominant resource
share while a strategy allows it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

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
        """A minimal set of victims after which ``request`` fits in ``cq_name``, or ``[]``.

        ``request`` is everything the workload would be charged; ``frs`` the flavor-resources
        that need preemption (victims must use one of them)."""
        node = self.tree.cqs[cq_name]
        cq = self.cluster_queues[cq_name]
        if self.config.fair_sharing:
            candidates = self.candidates(wl, cq_name, frs)
            if not candidates:
                return []
            if all(c.cluster_queue == cq_name for c in candidates):
                own = [_Candidate(c, _WITHIN) for c in candidates]
                return self._minimal(request, node, frs, own, True)
            threshold: int | None = None
            bwc = cq.preemption.borrow_within_cohort
            if bwc is not None and bwc != BorrowWithinCohortPolicy.NEVER:
                threshold = wl.priority
                limit = cq.preemption.max_priority_threshold
                if limit is not None and limit < threshold:
                    threshold = limit + 1
            return self._fair(wl, request, node, frs, candidates, threshold)
        own = self._own_candidates(wl, cq_name, frs)
        hierarchical, by_priority = self._cohort_candidates(wl, node, request, frs)
        if not hierarchical and not by_priority:
            return self._minimal(request, node, frs, own, True) if own else []
        bwc = cq.preemption.borrow_within_cohort
        forbidden = bwc is None or bwc == BorrowWithinCohortPolicy.NEVER
        if forbidden and not self._under_nominal(node, frs):
            attempts: tuple[bool, ...] = (True,)
        elif forbidden and not hierarchical:
            attempts = (False, True)
        else:
            attempts = (True, False)
        ordered = hierarchical + by_priority + own
        for allow_borrowing in attempts:
            found = self._minimal(request, node, frs, ordered, allow_borrowing)
            if found:
                return found
        return []

    def _own_candidates(
        self, wl: AdmissionWorkload, cq_name: str, frs: set[FlavorResource]
    ) -> list[_Candidate]:
        within = self.cluster_queues[cq_name].preemption.within_cluster_queue
        if within == WithinClusterQueue.NEVER:
            return []
        newer = within == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        out: list[_Candidate] = []
        for cand in self.ordered.get(cq_name, ()):  # lowest priority first
            if cand.priority > wl.priority or (cand.priority == wl.priority and not newer):
                break
            eligible = cand.priority < wl.priority or wl.created < cand.workload.created
            if eligible and _uses(cand, frs) and not self._protected(cand):
                out.append(_Candidate(cand, _WITHIN))
        return out

    def _cohort_candidates(
        self,
        wl: AdmissionWorkload,
        node: QuotaNode,
        request: Mapping[FlavorResource, int],
        frs: set[FlavorResource],
    ) -> tuple[list[_Candidate], list[_Candidate]]:
        """Other queues' candidates, split into hierarchical and priority ones (each in victim
        order). Walks up from the preemptor; at each cohort only the subtrees that use more than
        their quota of a contested flavor-resource are entered."""
        cq = self.cluster_queues[node.name]
        policy = cq.preemption.reclaim_within_cohort
        if node.parent is None or policy == ReclaimWithinCohort.NEVER:
            return [], []
        bwc = cq.preemption.borrow_within_cohort
        forbidden = bwc is None or bwc == BorrowWithinCohortPolicy.NEVER
        threshold = None if forbidden else cq.preemption.max_priority_threshold
        hierarchical: list[_Candidate] = []
        by_priority: list[_Candidate] = []
        advantage, remaining = _fits_in_quota(node, request)
        previous: QuotaNode | None = None
        for subtree in node.path_to_root():
            queues: list[QuotaNode] = []
            self._over_quota_queues(subtree, previous, node, frs, queues)
            out = hierarchical if advantage else by_priority
            for other in queues:
                for cand in self.ordered.get(other.name, ()):
                    if policy != ReclaimWithinCohort.ANY and cand.priority >= wl.priority:
                        break  # sorted by priority: no later one qualifies either
                    if not _uses(cand, frs) or self._protected(cand):
                        continue
                    if advantage:
                        variant = _HIERARCHICAL
                    elif (
                        forbidden
                        or cand.priority >= wl.priority
                        or (threshold is not None and cand.priority > threshold)
                    ):
                        variant = _WITHOUT_BORROWING
                    else:
                        variant = _WHILE_BORROWING
                    out.append(_Candidate(cand, variant, subtree))
            fits, remaining = _fits_in_quota(subtree, remaining)
            advantage = advantage or fits
            previous = subtree
        hierarchical.sort(key=_by_victim)
        by_priority.sort(key=_by_victim)
        return hierarchical, by_priority

    def _over_quota_queues(
        self,
        cohort: QuotaNode,
        skip: QuotaNode | None,
        preemptor: QuotaNode,
        frs: set[FlavorResource],
        out: list[QuotaNode],
    ) -> None:
        """The queues below ``cohort`` (but not in ``skip``) that use more than their quota,
        reached through cohorts that do too."""
        tree = self.tree
        for child in cohort.children:
            if child is skip or child is preemptor or not tree.is_borrowing(child, frs):
                continue  # within its quota: nothing below it is reclaimed
            if child.is_cq:
                out.append(child)
            else:
                self._over_quota_queues(child, skip, preemptor, frs, out)

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

    def _valid(self, cand: _Candidate, borrow: bool, frs: set[FlavorResource]) -> bool:
        """Whether a candidate may still be taken: an own-queue one always; another queue's
        only while it (and every cohort below the common ancestor) still uses more than its
        quota, and, when the preemptor may borrow, only if its kind allows that."""
        if cand.variant == _WITHIN:
            return True
        if borrow and cand.variant == _WITHOUT_BORROWING:
            return False
        tree = self.tree
        node: QuotaNode | None = tree.cqs[cand.workload.cluster_queue]
        while node is not None and node is not cand.lca:
            if not tree.is_borrowing(node, frs):
                return False
            node = node.parent
        return True

    def _minimal(
        self,
        request: Mapping[FlavorResource, int],
        node: QuotaNode,
        frs: set[FlavorResource],
        candidates: list[_Candidate],
        allow_borrowing: bool,
    ) -> list[Target]:
        targets: list[Target] = []
        fits = False
        for cand in candidates:
            if not self._valid(cand, allow_borrowing, frs):
                continue
            self._remove(cand.workload)
            targets.append((cand.workload, _REASON[cand.variant]))
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
        # A preemptor that stays within its nominal quota once admitted reclaims what it is
        # owed, whatever the shares say (Kueue's FairSharingPreemptWithinNominal, on by default)
        within_nominal = all(
            node.usage.get(fr, 0) + request.get(fr, 0) <= node.nominal.get(fr, 0) for fr in frs
        )
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
            if within_nominal:
                cand = workloads.pop(0)
                self._remove(cand)
                targets.append((cand, EvictionReason.IN_COHORT_RECLAMATION))
                if self._fits(request, node, True):
                    fits = True
                    break
                if workloads and tree.is_borrowing(cq_node, frs):
                    heapq.heappush(heap, (-tree.share(cq_node), name))
                continue
            for i, cand in enumerate(workloads):
                memo = (name, cand.usage_key)
                new_share = without.get(memo)
                if new_share is None:
                    new_share = without[memo] = tree.share(cq_node, minus=cand.usage)
                if strategies[0](preemptor_share, -neg_share, new_share):
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


# candidate kinds (Kueue's preemption variants) and the reason each is evicted with
_WITHIN, _HIERARCHICAL, _WITHOUT_BORROWING, _WHILE_BORROWING = range(4)
_REASON = {
    _WITHIN: EvictionReason.IN_CLUSTER_QUEUE,
    _HIERARCHICAL: EvictionReason.IN_COHORT_RECLAMATION,
    _WITHOUT_BORROWING: EvictionReason.IN_COHORT_RECLAMATION,
    _WHILE_BORROWING: EvictionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


class _Candidate(NamedTuple):
    """A possible victim, its kind, and (for another queue's) the common ancestor with the
    preemptor: cohorts below it must still be over quota for the victim to be taken."""

    workload: AdmittedWorkload
    variant: int
    lca: QuotaNode | None = None


def _by_victim(cand: _Candidate) -> tuple[int, float, str]:
    return cand.workload.victim_order


def _fits_in_quota(
    node: QuotaNode, request: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Whether ``node``'s own subtree quota holds ``request`` on top of its usage, and what of
    the request is left for the ancestors once the node's locally kept quota is used."""
    fits = True
    remaining: dict[FlavorResource, int] = {}
    for fr, amount in request.items():
        usage = node.usage.get(fr, 0)
        if node.subtree.get(fr, 0) < usage + amount:
            fits = False
        remaining[fr] = max(0, amount - max(0, node.guaranteed.get(fr, 0) - usage))
    return fits, remaining
