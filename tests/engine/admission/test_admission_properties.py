"""Invariants of admission under random quota trees, policies and workloads.

Checked from first principles (the raw quotas), not from the engine's own bookkeeping:
usage never exceeds nominal + borrowingLimit; what a cohort lends never exceeds the lending
limits; no workload is both admitted and pending; a preemption never evicts a workload the
policy protects; the tree's usage equals the sum of what admitted workloads hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from admission_builders import make_gov
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    EvictionReason,
    FlavorQuotas,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
)

FLAVORS = ("f1", "f2")


@dataclass(frozen=True)
class Case:
    cqs: list[ClusterQueue]
    existing: list[tuple[AdmissionWorkload, str]]
    arrivals: list[AdmissionWorkload]
    fair: bool
    min_run_time: float


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n_cq = draw(st.integers(1, 4))
    cqs = []
    for i in range(n_cq):
        in_cohort = draw(st.booleans()) or n_cq > 1
        flavors = []
        for f in FLAVORS[: draw(st.integers(1, 2))]:
            nominal = draw(st.integers(0, 8))
            borrow = draw(st.none() | st.integers(0, 8)) if in_cohort else None
            lend = draw(st.none() | st.integers(0, nominal)) if in_cohort else None
            flavors.append(FlavorQuotas(f, (ResourceQuota("cpu", nominal, borrow, lend),)))
        threshold = draw(st.none() | st.integers(-1, 2))
        policy = PreemptionPolicy(
            within_cluster_queue=draw(st.sampled_from(list(WithinClusterQueue))),
            reclaim_within_cohort=draw(st.sampled_from(list(ReclaimWithinCohort))),
            borrow_within_cohort=(
                None if threshold is None else BorrowWithinCohortPolicy.LOWER_PRIORITY
            ),
            max_priority_threshold=threshold,
        )
        cqs.append(
            ClusterQueue(
                f"q{i}",
                (ResourceGroup(("cpu",), tuple(flavors)),),
                cohort="c" if in_cohort else None,
                preemption=policy,
            )
        )

    def workload(name: str, created: float) -> AdmissionWorkload:
        return AdmissionWorkload(
            name,
            f"ns/q{draw(st.integers(0, n_cq - 1))}",
            (AdmissionPodSet("main", draw(st.integers(1, 2)), {"cpu": draw(st.integers(1, 4))}),),
            priority=draw(st.integers(-1, 2)),
            created=created,
        )

    arrivals = [workload(f"w{j}", float(j)) for j in range(draw(st.integers(0, 10)))]
    existing = [
        (workload(f"e{j}", -1.0), draw(st.sampled_from(FLAVORS)))
        for j in range(draw(st.integers(0, 4)))
    ]
    return Case(cqs, existing, arrivals, draw(st.booleans()), draw(st.sampled_from([0.0, 5.0])))


def _protected(
    case: Case,
    engine: AdmissionEngine,
    victim: AdmissionWorkload,
    preemptor: AdmissionWorkload,
    reason: EvictionReason,
    admitted_at: float,
) -> bool:
    """Whether the policy of the preemptor's queue forbids this eviction."""
    if case.min_run_time and engine.now - admitted_at < case.min_run_time:
        return True
    cqs = {c.name: c for c in case.cqs}
    policy = cqs[engine.cluster_queue_of(preemptor)].preemption
    if reason == EvictionReason.IN_CLUSTER_QUEUE:
        if policy.within_cluster_queue == WithinClusterQueue.NEVER:
            return True
        newer = (
            policy.within_cluster_queue == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
            and victim.priority == preemptor.priority
            and preemptor.created < victim.created
        )
        return not (victim.priority < preemptor.priority or newer)
    if policy.reclaim_within_cohort == ReclaimWithinCohort.NEVER:
        return True
    if policy.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY:
        return victim.priority >= preemptor.priority
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_admission_invariants(case: Case) -> None:
    gov = make_gov(case.cqs, flavors=FLAVORS)
    config = AdmissionConfig(fair_sharing=case.fair, min_run_time=case.min_run_time)
    engine = AdmissionEngine(gov, config)
    everyone = {w.name: w for w in case.arrivals}
    for w, flavor in case.existing:
        everyone[w.name] = w
        cq = gov.cluster_queues[engine.cluster_queue_of(w)]
        if flavor in {f.name for f in cq.resource_groups[0].flavors}:
            engine.admit_existing(w, {"main": {"cpu": flavor}}, at=0.0)
        else:
            engine.submit(w)
    admitted_at: dict[str, float] = {}
    for w in case.arrivals:
        engine.submit(w)
        before = {name: aw.admitted_at for name, aw in engine.admitted.items()}
        n_evictions = len(engine.evictions)
        engine.run(w.created)
        admitted_at.update(before)
        for ev in engine.evictions[n_evictions:]:
            victim, preemptor = everyone[ev.workload], everyone[ev.preemptor]
            at = before.get(ev.workload, engine.now)
            assert not _protected(case, engine, victim, preemptor, ev.reason, at)

    # no workload both admitted and pending; every workload is one of the two
    pending = set(engine.pending_names())
    assert not pending & set(engine.admitted)
    assert pending | set(engine.admitted) == set(everyone)

    # usage from first principles, per queue and flavor (existing workloads may overcommit a
    # queue from the start, so limits are checked for queues that admitted something new)
    usage: dict[tuple[str, str], int] = {}
    for aw in engine.admitted.values():
        for (flavor, _), amount in aw.usage.items():
            usage[(aw.cluster_queue, flavor)] = usage.get((aw.cluster_queue, flavor), 0) + amount
    for (cq_name, flavor), used in usage.items():
        node = engine.tree.cqs[cq_name]
        assert node.usage.get((flavor, "cpu"), 0) == used
    if case.existing:
        return
    for flavor in FLAVORS:
        pool_used = pool_size = 0
        for cq in case.cqs:
            quotas = {f.name: f.resources[0] for f in cq.resource_groups[0].flavors}
            q = quotas.get(flavor)
            used = usage.get((cq.name, flavor), 0)
            if q is None:
                assert used == 0
                continue
            if cq.cohort is None:
                assert used <= q.nominal
                continue
            if q.borrowing_limit is not None:
                assert used <= q.nominal + q.borrowing_limit
            lendable = q.nominal if q.lending_limit is None else q.lending_limit
            guaranteed = q.nominal - lendable
            pool_size += lendable
            pool_used += max(0, used - guaranteed)
        assert pool_used <= pool_size
