"""The fair-sharing preemption loop of ``reclaimWithinCohort: Any``, reduced to three workloads.

Two queues of one cohort, each with nominal quota 10 in two flavors of one resource, equal
priorities. Queue b borrows a little of f1 (11) and more of f2 (12); queue a holds 8 of each and
wants 4 more. Each step below is one Kueue makes (kubernetes-sigs/kueue@ff69552e,
``pkg/scheduler/preemption``):

1. ``a-new`` needs preemption in f1 and would borrow there (12 > 10), so the strategies decide.
   A dominant resource share adds up what a queue borrows of a resource over all its flavors:
   a's share with ``a-new`` is 2 units, b's is 3 (1 of f1 + 2 of f2).
   ``LessThanOrEqualToFinalShare`` takes ``b-y`` (b's share stays 2: 2 <= 2), then, b still
   borrowing f2, ``b-x`` (2 <= 2). Kueue's target ordering prunes a queue only once it borrows
   nothing at all (``fairsharing/ordering.go``, ``nextTarget``: ``drs.IsBorrowing()``), so b
   is taken below its f1 nominal (8) because it still borrows f2.
2. ``b-x`` is then within b's f1 nominal once admitted (8 + 2 = 10), and a borrows f1: under
   ``FairSharingPreemptWithinNominal`` it reclaims ``a-new`` whatever the shares
   (``preemption.go``, ``runFirstFsStrategy``; ``InCohortReclamation``). ``b-y`` fits again.

The state is back where it began, so the engine stops the run on the repeated admitted set.
``AdmissionConfig.reclaim_only_contested_borrowers`` (off by default) breaks the loop at step 1.
"""

from __future__ import annotations

import pytest
from admission_builders import make_gov, quota_group, wl

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.engine.admission.synthetic import build_benchmark
from gpuaas.model.governance import (
    ClusterQueue,
    EvictionReason,
    PreemptionPolicy,
    ReclaimWithinCohort,
)

F1 = {"main": {"cpu": "f1"}}
F2 = {"main": {"cpu": "f2"}}
FS = EvictionReason.IN_COHORT_FAIR_SHARING
RECLAIM = EvictionReason.IN_COHORT_RECLAMATION


def _queue(name: str) -> ClusterQueue:
    return ClusterQueue(
        name,
        (quota_group("cpu", [("f1", 10, None, None), ("f2", 10, None, None)]),),
        cohort="c",
        preemption=PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY),
    )


def _engine(b_f2: int, contested_only: bool = False) -> AdmissionEngine:
    config = AdmissionConfig(fair_sharing=True, reclaim_only_contested_borrowers=contested_only)
    engine = AdmissionEngine(make_gov([_queue("a"), _queue("b")]), config)
    engine.admit_existing(wl("a-f1", "a", 8), F1, 0)
    engine.admit_existing(wl("a-f2", "a", 8), F2, 0)
    engine.admit_existing(wl("b-f1", "b", 8), F1, 0)
    engine.admit_existing(wl("b-f2", "b", b_f2), F2, 0)
    engine.admit_existing(wl("b-x", "b", 2, created=1), F1, 1)
    engine.admit_existing(wl("b-y", "b", 1, created=2), F1, 2)
    engine.submit(wl("a-new", "a", 4, created=3))
    return engine


def test_each_step_of_the_loop_is_kueues_and_the_run_stops_on_it() -> None:
    engine = _engine(b_f2=12)
    steps: list[list[tuple[str, EvictionReason, str]]] = []
    usage_after: list[dict[tuple[str, str], int]] = []
    run_pass = engine._pass

    def recording_pass() -> bool:
        before = len(engine.evictions)
        changed = run_pass()
        steps.append([(e.workload, e.reason, e.preemptor) for e in engine.evictions[before:]])
        usage_after.append(dict(engine.tree.cqs["b"].usage))
        return changed

    engine._pass = recording_pass  # type: ignore[method-assign]
    engine.run(10)
    assert steps[0] == [("b-y", FS, "a-new"), ("b-x", FS, "a-new")]
    # b was taken below its f1 nominal because it still borrows f2
    assert usage_after[0][("f1", "cpu")] == 8 and usage_after[0][("f2", "cpu")] == 12
    assert steps[1] == [("a-new", RECLAIM, "b-x")]  # b-x is within b's f1 nominal
    # and round again (b-x and b-y came back at the same time: the name breaks the tie now)
    assert sorted(steps[2]) == sorted(steps[0])
    assert engine.oscillated
    assert "a-new" in engine.admitted  # the run stops where the admitted set first repeats


def test_no_loop_when_the_victims_queue_borrows_only_the_contested_flavor() -> None:
    # b borrows 1 of f1 and nothing of f2: a's share with a-new (2) is above b's (1), neither
    # strategy passes, and a-new waits. The loop needs a victim queue that keeps borrowing a
    # flavor the preemptor does not contest.
    engine = _engine(b_f2=10)
    engine.run(10)
    assert engine.evictions == []
    assert not engine.oscillated
    assert "a-new" in engine.pending_names()


def test_reclaiming_only_from_contested_borrowers_breaks_the_loop() -> None:
    engine = _engine(b_f2=12, contested_only=True)
    engine.run(10)
    # b stops being a target in f1 once it no longer borrows f1, so f1 cannot make room for
    # a-new; f2, where b borrows 2, can: rule S2-b (a's share 2 < b's 3) takes b-f2
    assert [(e.workload, e.reason, e.preemptor) for e in engine.evictions] == [
        ("b-f2", FS, "a-new")
    ]
    assert engine.admitted["a-new"].usage == {("f2", "cpu"): 4}
    assert not engine.oscillated
    engine.run(11)  # and it stays settled
    assert len(engine.evictions) == 1


@pytest.mark.parametrize(("queues", "workloads", "seed"), [(2, 20, 8), (10, 200, 4), (4, 80, 21)])
def test_synthetic_loops_settle_when_reclaiming_only_from_contested_borrowers(
    queues: int, workloads: int, seed: int
) -> None:
    # Seeds whose run loops under Kueue's rule (one cohort, reclaimWithinCohort: Any).
    outcomes = []
    for contested_only in (False, True):
        gov, wls, _ = build_benchmark(queues, 1, workloads, 0, seed, ReclaimWithinCohort.ANY)
        config = AdmissionConfig(fair_sharing=True, reclaim_only_contested_borrowers=contested_only)
        engine = AdmissionEngine(gov, config)
        for w in wls:
            engine.submit(w)
        engine.run(float(workloads))
        outcomes.append(engine.oscillated)
    assert outcomes == [True, False]
