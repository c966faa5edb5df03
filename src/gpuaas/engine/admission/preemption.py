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
share while a strategy allows it. Kueue keeps a queue a target while it borrows anything, so with
several flavors a queue can be taken below its nominal quota in the contested one and then
reclaim back: ``AdmissionConfig.reclaim_only_contested_borrowers`` (not Kueue's rule) stops that.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from typing import NamedTuple

from gpuaas.engine.admission.quota import INFINITE_SHARE, QuotaNode, QuotaTree
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
        """Fair sharing's candidates: the queue's own (by ``withinClusterQueue``) and those of
        every queue of the cohort tree that borrows a contested flavor-resource (by
        ``reclaimWithinCohort``), other queues' first, each in victim order."""
        node = self.tree.cqs[cq_name]
        own = [c.workload for c in self._own_candidates(wl, cq_name, frs)]
        others: list[AdmittedWorkload] = []
        policy = self.cluster_queues[cq_name].preemption.reclaim_within_cohort
        if node.parent is not None and policy != ReclaimWithinCohort.NEVER:
            for other in self._tree_cqs.get(node.root().name, ()):
                if other == cq_name or not self.tree.is_borrowing(self.tree.cqs[other], frs):
                    continue
                for cand in self.ordered.get(other, ()):
                    if policy != ReclaimWithinCohort.ANY and cand.priority >= wl.priority:
                        break
                    if _uses(cand, frs) and not self._protected(cand):
                        others.append(cand)
            others.sort(key=_ORDER)  # merges the already sorted runs
        return others + own

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
            return self._fair(wl, request, node, frs, candidates)
        own = self._own_candidates(wl, cq_name, frs)
        hierarchical, by_priority = self._cohort_runs(node, request, frs)

        def cohort(runs: list[_Run]) -> Iterator[_Candidate]:
            return self._cohort_candidates(wl, cq, runs, frs)

        has_hierarchical = _any(cohort(hierarchical))
        if not has_hierarchical and not _any(cohort(by_priority)):
            return self._minimal(request, node, frs, own, True) if own else []
        bwc = cq.preemption.borrow_within_cohort
        forbidden = bwc is None or bwc == BorrowWithinCohortPolicy.NEVER
        if forbidden and not self._under_nominal(node, frs):
            attempts: tuple[bool, ...] = (True,)
        elif forbidden and not has_hierarchical:
            attempts = (False, True)
        else:
            attempts = (True, False)
        if not self._could_fit(wl, cq, request, node, hierarchical + by_priority, own):
            return []
        for allow_borrowing in attempts:
            # without borrowWithinCohort every priority candidate needs a non-borrowing preemptor
            priority_candidates = () if allow_borrowing and forbidden else cohort(by_priority)
            ordered = itertools.chain(cohort(hierarchical), priority_candidates, own)
            found = self._minimal(request, node, frs, ordered, allow_borrowing)
            if found:
                return found
        return []

    def _could_fit(
        self,
        wl: AdmissionWorkload,
        cq: ClusterQueue,
        request: Mapping[FlavorResource, int],
        node: QuotaNode,
        runs: list[_Run],
        own: list[_Candidate],
    ) -> bool:
        """A cheap necessary condition: evicting every candidate frees at most their usage."""
        room = {fr: self.tree.available(node, fr) - amount for fr, amount in request.items()}
        for cand in own:
            for fr in room:
                room[fr] += cand.workload.usage.get(fr, 0)
        only_lower = cq.preemption.reclaim_within_cohort != ReclaimWithinCohort.ANY
        for workloads, _, _, queue in runs:
            if not only_lower:  # every workload of the queue: its usage is the queue's
                for fr in room:
                    room[fr] += queue.usage.get(fr, 0)
                continue
            for other in workloads:
                if other.priority >= wl.priority:
                    break
                usage = other.usage
                for fr in room:
                    room[fr] += usage.get(fr, 0)
        return all(value >= 0 for value in room.values())

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

    def _cohort_runs(
        self, node: QuotaNode, request: Mapping[FlavorResource, int], frs: set[FlavorResource]
    ) -> tuple[list[_Run], list[_Run]]:
        """The other queues whose workloads may be reclaimed, as runs of candidates (each queue's
        admitted workloads in victim order, with the common ancestor they were reached from),
        split into hierarchical and priority ones. Walks up from the preemptor; at each cohort
        only the subtrees that use more than their quota of a contested flavor-resource are
        entered, so the walk costs nothing where nobody borrows."""
        cq = self.cluster_queues[node.name]
        if node.parent is None or cq.preemption.reclaim_within_cohort == ReclaimWithinCohort.NEVER:
            return [], []
        hierarchical: list[_Run] = []
        by_priority: list[_Run] = []
        advantage, remaining = _fits_in_quota(node, request)
        previous: QuotaNode | None = None
        for subtree in node.path_to_root():
            queues: list[QuotaNode] = []
            self._over_quota_queues(subtree, previous, node, frs, queues)
            runs = hierarchical if advantage else by_priority
            for other in queues:
                workloads = self.ordered.get(other.name)
                if workloads:
                    runs.append((workloads, subtree, advantage, other))
            fits, remaining = _fits_in_quota(subtree, remaining)
            advantage = advantage or fits
            previous = subtree
        return hierarchical, by_priority

    def _cohort_candidates(
        self, wl: AdmissionWorkload, cq: ClusterQueue, runs: list[_Run], frs: set[FlavorResource]
    ) -> Iterator[_Candidate]:
        """The candidates of ``runs`` merged in victim order, each with its kind; lazy, since a
        minimal victim set is usually found among the first few."""
        policy = cq.preemption.reclaim_within_cohort
        only_lower = policy != ReclaimWithinCohort.ANY
        bwc = cq.preemption.borrow_within_cohort
        forbidden = bwc is None or bwc == BorrowWithinCohortPolicy.NEVER
        threshold = None if forbidden else cq.preemption.max_priority_threshold
        priority = wl.priority

        def run(
            workloads: list[AdmittedWorkload], lca: QuotaNode, advantage: bool, _: QuotaNode
        ) -> Iterator[tuple[tuple[int, float, str], AdmittedWorkload, QuotaNode, bool]]:
            for cand in workloads:
                if only_lower and cand.priority >= priority:
                    return  # sorted by priority: no later one qualifies either
                yield cand.victim_order, cand, lca, advantage

        if not runs:
            return
        merged = heapq.merge(*(run(*r) for r in runs)) if len(runs) > 1 else run(*runs[0])
        for _, cand, lca, advantage in merged:
            if not _uses(cand, frs) or self._protected(cand):
                continue
            if advantage:
                variant = _HIERARCHICAL
            elif (
                forbidden
                or cand.priority >= priority
                or (threshold is not None and cand.priority > threshold)
            ):
                variant = _WITHOUT_BORROWING
            else:
                variant = _WHILE_BORROWING
            yield _Candidate(cand, variant, lca)

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
        candidates: Iterable[_Candidate],
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
    ) -> list[Target]:
        """Fair-sharing preemption, as Kueue's tournament: with the preemptor's request counted
        in, walk down from the root to the child (cohort or queue) with the highest dominant
        resource share at each level, and take from the queue reached while the configured
        strategy, comparing the shares of the two subtrees just below the common ancestor of
        preemptor and target, allows it. ``borrowWithinCohort`` plays no part here."""
        tree = self.tree
        # cheap bound: evicting every candidate frees at most their usage
        for fr, amount in request.items():
            room = tree.available(node, fr) + sum(c.usage.get(fr, 0) for c in candidates)
            if room < amount:
                return []
        strategies = [_strategy(s) for s in self.config.fair_sharing_strategies]
        # A preemptor that stays within its nominal quota once admitted reclaims what it is
        # owed, whatever the shares say (Kueue's FairSharingPreemptWithinNominal, on by default)
        within_nominal = all(
            node.usage.get(fr, 0) + request.get(fr, 0) <= node.nominal.get(fr, 0) for fr in frs
        )
        tree.add_usage(node, request)  # shares are those with the preemptor admitted
        targets: list[Target] = []

        def fits() -> bool:
            tree.remove_usage(node, request)
            ok = self._fits(request, node, True)
            tree.add_usage(node, request)
            return ok

        without: dict[tuple[int, str, tuple[object, ...]], float] = {}  # shares minus a victim

        def take(cand: AdmittedWorkload, reason: EvictionReason) -> bool:
            self._remove(cand)
            targets.append((cand, reason))
            without.clear()
            tournament.changed()
            return fits()

        done = False
        retry: list[AdmittedWorkload] = []
        contested = frs if self.config.reclaim_only_contested_borrowers else None
        tournament = _Tournament(tree, node, candidates, contested)
        for target in tournament:
            queue = tournament.queue[target.name]
            if target is node:
                if take(queue.pop(0), EvictionReason.IN_CLUSTER_QUEUE):
                    done = True
                    break
                continue
            if within_nominal:
                if take(queue.pop(0), EvictionReason.IN_COHORT_RECLAMATION):
                    done = True
                    break
                continue
            mine, theirs = tournament.almost_lcas(target)
            preemptor_new, target_old = tree.share(mine), tree.share(theirs)
            if preemptor_new == INFINITE_SHARE and target_old != INFINITE_SHARE:
                retry.extend(queue)  # no candidate here can pass: keep them for rule S2-b
                queue.clear()
                continue
            while queue:
                cand = queue.pop(0)
                memo = (id(theirs), cand.cluster_queue, cand.usage_key)
                target_new = without.get(memo)
                if target_new is None:  # victims of one shape in one queue share the answer
                    tree.remove_usage(tree.cqs[cand.cluster_queue], cand.usage)
                    target_new = without[memo] = tree.share(theirs)
                    tree.add_usage(tree.cqs[cand.cluster_queue], cand.usage)
                if strategies[0](preemptor_new, target_old, target_new):
                    done = take(cand, EvictionReason.IN_COHORT_FAIR_SHARING)
                    break  # shares changed: pick the target again
                retry.append(cand)
            if done:
                break
        if not done and len(strategies) > 1 and retry:
            tournament = _Tournament(tree, node, retry, contested)
            for target in tournament:
                queue = tournament.queue[target.name]
                mine, theirs = tournament.almost_lcas(target)
                cand = queue.pop(0)
                if strategies[1](tree.share(mine), tree.share(theirs), 0.0) and take(
                    cand, EvictionReason.IN_COHORT_FAIR_SHARING
                ):
                    done = True
                    break
                tournament.drop(target)  # rule S2-b applies at most once per queue
        tree.remove_usage(node, request)
        if not done:
            self._restore(targets)
            return []
        targets = self._fill_back(targets, request, node, True)
        self._restore(targets)
        return targets


class _Tournament:
    """Kueue's order of target queues in fair-sharing preemption: from the root, the child with
    the highest share (a cohort when tied with a queue), pruning what does not borrow. With
    ``contested`` (``reclaim_only_contested_borrowers``), another queue is pruned as soon as it
    borrows none of those flavor-resources, even if it still borrows others."""

    def __init__(
        self,
        tree: QuotaTree,
        preemptor: QuotaNode,
        candidates: Iterable[AdmittedWorkload],
        contested: set[FlavorResource] | None = None,
    ) -> None:
        self.tree = tree
        self.preemptor = preemptor
        self.contested = contested
        self.ancestors = {id(a) for a in preemptor.path_to_root()}
        self.queue: dict[str, list[AdmittedWorkload]] = {}
        for cand in candidates:
            self.queue.setdefault(cand.cluster_queue, []).append(cand)
        self.pruned: set[int] = set()
        self._shares: dict[int, tuple[float, bool]] = {}  # per node, until usage changes

    def changed(self) -> None:
        """Usage changed (a victim was taken): shares must be computed again."""
        self._shares.clear()

    def _share(self, node: QuotaNode) -> tuple[float, bool]:
        known = self._shares.get(id(node))
        if known is None:
            known = self._shares[id(node)] = (self.tree.share(node), _borrows(node))
        return known

    def drop(self, cq: QuotaNode) -> None:
        self.pruned.add(id(cq))

    def __iter__(self) -> Iterator[QuotaNode]:
        preemptor = self.preemptor
        if preemptor.parent is None:
            while id(preemptor) not in self.pruned and self.queue.get(preemptor.name):
                yield preemptor
            return
        root = preemptor.root()
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        best_cq: QuotaNode | None = None
        best_cq_share = -1.0
        best_cohort: QuotaNode | None = None
        best_cohort_share = -1.0
        for child in cohort.children:
            if id(child) in self.pruned:
                continue
            if child.is_cq:
                if not self.queue.get(child.name):
                    self.pruned.add(id(child))
                    continue
                share, borrows = self._share(child)
                if child is not self.preemptor and (
                    not borrows
                    or (
                        self.contested is not None
                        and not self.tree.is_borrowing(child, self.contested)
                    )
                ):
                    self.pruned.add(id(child))
                    continue
                if share > best_cq_share or (
                    share == best_cq_share
                    and best_cq is not None
                    and _before(self.queue[child.name][0], self.queue[best_cq.name][0], self)
                ):
                    best_cq, best_cq_share = child, share
            else:
                share, borrows = self._share(child)
                if not borrows and id(child) not in self.ancestors:
                    self.pruned.add(id(child))
                elif share >= best_cohort_share:
                    best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_cq is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and best_cohort_share >= best_cq_share:
            return self._next(best_cohort)
        return best_cq

    def almost_lcas(self, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
        """The children of the common ancestor of preemptor and ``target`` on either side."""
        theirs = target
        lca = target.parent
        while lca is not None and id(lca) not in self.ancestors:
            theirs = lca
            lca = lca.parent
        mine = self.preemptor
        while mine.parent is not lca:
            mine = mine.parent  # type: ignore[assignment]
        return mine, theirs


def _borrows(node: QuotaNode) -> bool:
    usage = node.usage
    return any(usage.get(fr, 0) > quota for fr, quota in node.subtree.items()) or any(
        fr not in node.subtree and amount > 0 for fr, amount in usage.items()
    )


def _before(a: AdmittedWorkload, b: AdmittedWorkload, t: _Tournament) -> bool:
    """Kueue's candidate order between two queues' first candidates: other queues before the
    preemptor's own, then lower priority, then more recently admitted."""
    key_a = (a.cluster_queue == t.preemptor.name, *a.victim_order)
    key_b = (b.cluster_queue == t.preemptor.name, *b.victim_order)
    return key_a < key_b


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


# a queue's admitted workloads (victim order), the common ancestor they are reached from,
# whether the preemptor has the hierarchical advantage over them, and the queue
_Run = tuple[list[AdmittedWorkload], QuotaNode, bool, QuotaNode]


def _any(candidates: Iterator[_Candidate]) -> bool:
    return next(candidates, None) is not None


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
