"""The admission cycle's per-namespace placement budget (``AdmissionConfig.pods_per_cycle``):
one tenant's huge gangs cost a cycle a bounded amount of work, the rest waits for the next
cycle with ``CycleBudgetSpent``, and nobody else waits for them."""

from __future__ import annotations

from admission_builders import cq
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionEngine
from gpuaas.engine.admission.state import AdmissionConfig
from gpuaas.engine.reasons import Code
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    Governance,
    LocalQueue,
    QueueingStrategy,
    ResourceFlavor,
)

BIG = 10**9


def two_tenants(strict: bool = False) -> Governance:
    """Namespaces ``abuse`` and ``good``, each with its own ClusterQueue and LocalQueue ``q``."""
    gov = Governance()
    gov.flavors["default"] = ResourceFlavor("default")
    strategy = QueueingStrategy.STRICT_FIFO if strict else QueueingStrategy.BEST_EFFORT_FIFO
    for ns in ("abuse", "good"):
        gov.cluster_queues[ns] = cq(ns, BIG, queueing_strategy=strategy)
        lq = LocalQueue("q", ns, ns)
        gov.local_queues[lq.key] = lq
    gov.validate()
    return gov


def job(name: str, ns: str, pods: int, created: float = 0.0) -> AdmissionWorkload:
    return AdmissionWorkload(
        name, f"{ns}/q", (AdmissionPodSet("main", pods, {"cpu": 1}),), created=created
    )


def test_a_namespace_past_its_budget_waits_for_the_next_cycle_and_no_one_else_does() -> None:
    engine = AdmissionEngine(two_tenants(), AdmissionConfig(pods_per_cycle=150))
    for i in range(3):
        engine.submit(job(f"huge-{i}", "abuse", 100, created=i))
    for i in range(5):
        engine.submit(job(f"small-{i}", "good", 1, created=10 + i))
    engine.run(0.0)
    # 100 pods tried, under 150: the second is tried too (200), then the budget is spent
    assert {"huge-0", "huge-1"} <= set(engine.admitted)
    assert "huge-2" not in engine.admitted
    assert all(f"small-{i}" in engine.admitted for i in range(5))
    why = engine.why["huge-2"]
    assert why.code == Code.CYCLE_BUDGET_SPENT
    assert why.fields == {"namespace": "abuse", "pods": 200, "pods_budget": 150}
    assert "deferred to the next admission cycle" in why.render()
    assert engine.deferred
    engine.run(1.0)
    assert "huge-2" in engine.admitted
    assert not engine.deferred


def test_a_job_larger_than_the_budget_still_gets_one_turn_per_cycle() -> None:
    engine = AdmissionEngine(two_tenants(), AdmissionConfig(pods_per_cycle=10))
    for i in range(3):
        engine.submit(job(f"huge-{i}", "abuse", 1000, created=i))
    for cycle in range(3):
        engine.run(float(cycle))
        assert sum(name.startswith("huge") for name in engine.admitted) == cycle + 1


def test_no_budget_tries_everything_in_one_cycle() -> None:
    engine = AdmissionEngine(two_tenants(), AdmissionConfig())
    for i in range(3):
        engine.submit(job(f"huge-{i}", "abuse", 1000, created=i))
    engine.run(0.0)
    assert len(engine.admitted) == 3 and not engine.deferred


def test_a_strict_fifo_queue_keeps_its_order_behind_a_deferred_head() -> None:
    engine = AdmissionEngine(two_tenants(strict=True), AdmissionConfig(pods_per_cycle=5))
    engine.submit(job("a", "abuse", 5, created=0))
    engine.submit(job("b", "abuse", 1, created=1))
    engine.submit(job("c", "abuse", 1, created=2))
    engine.run(0.0)
    assert set(engine.admitted) == {"a"}
    assert engine.why["b"].code == Code.CYCLE_BUDGET_SPENT
    assert engine.why["c"].code == Code.STRICT_FIFO_BLOCKED
    engine.run(1.0)
    assert set(engine.admitted) == {"a", "b", "c"}


def test_the_scheduler_runs_the_next_cycle_when_work_was_deferred() -> None:
    """A lazy scheduler skips a cycle when nothing changed; deferred work is a change."""
    engine = AdmissionEngine(two_tenants(), AdmissionConfig(pods_per_cycle=1))
    scheduler = AdmissionScheduler(engine, lazy=True)
    for i in range(3):
        engine.submit(job(f"j{i}", "abuse", 1, created=i))
    scheduler.dirty = True
    admitted = [len(scheduler.cycle(float(t)).admitted) for t in range(4)]
    assert admitted == [1, 1, 1, 0]


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(1, 50),
    abusive=st.lists(st.integers(1, 80), min_size=1, max_size=6),
    good=st.lists(st.integers(1, 3), min_size=1, max_size=6),
)
def test_per_cycle_work_is_bounded_and_everything_is_admitted_in_the_end(
    budget: int, abusive: list[int], good: list[int]
) -> None:
    """With quota for all, each cycle tries at most the budget plus one workload per
    namespace, the small tenant within its budget is never deferred behind the other, and
    every workload is admitted after at most one cycle per workload."""
    engine = AdmissionEngine(two_tenants(), AdmissionConfig(pods_per_cycle=budget))
    for i, pods in enumerate(abusive):
        engine.submit(job(f"a{i}", "abuse", pods, created=i))
    for i, pods in enumerate(good):
        engine.submit(job(f"g{i}", "good", pods, created=i))
    good_pods = sum(good)
    for cycle in range(len(abusive) + len(good)):
        before = set(engine.admitted)
        engine.run(float(cycle))
        fresh = set(engine.admitted) - before
        for ns, sizes in (("a", abusive), ("g", good)):
            pods = [sizes[int(n[1:])] for n in fresh if n[0] == ns]
            assert sum(pods) < budget + max(sizes)
        if cycle == 0 and good_pods <= budget:
            assert all(f"g{i}" in engine.admitted for i in range(len(good)))
    assert len(engine.admitted) == len(abusive) + len(good)
