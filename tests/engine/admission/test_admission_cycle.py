"""The admission cycle beyond the conformance files: many admissions per queue per pass,
readable pending reasons, fair sharing, fungibility, minimum run time, per-user limits."""

from __future__ import annotations

from fractions import Fraction

import pytest
from admission_builders import cq, make_gov, quota_group, wl

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.engine.reasons import Code, Reason
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    EvictionReason,
    FlavorFungibility,
    FungibilityPolicy,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    WithinClusterQueue,
)
from gpuaas.model.node import Taint, Toleration

LOWER = PreemptionPolicy(within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY)


def test_many_admissions_per_queue_in_one_pass() -> None:
    engine = AdmissionEngine(make_gov([cq("a", 100_000)]))
    for i in range(50):
        engine.submit(wl(f"w{i}", "a", 1000, created=i))
    passes = engine.run(0)
    assert len(engine.admitted) == 50
    assert passes == 2  # one pass admits all 50, the next finds nothing to do


def test_pending_reason_names_resource_flavor_amount_and_cohort() -> None:
    engine = AdmissionEngine(make_gov([cq("a", 2000, "ai-lab"), cq("b", 0, "ai-lab")]))
    engine.submit(wl("big", "a", 4000))
    engine.run(0)
    assert engine.reasons["big"] == (
        "insufficient quota for cpu in flavor default: 4 requested > 2 maximum capacity of "
        "ClusterQueue a"
    )
    engine.submit(wl("fill", "a", 2000, created=1))
    engine.submit(wl("more", "a", 1000, created=2))
    engine.run(2)
    assert "insufficient unused quota for cpu in flavor default: 1 more needed; cohort ai-lab "
    assert engine.reasons["more"].startswith(
        "insufficient unused quota for cpu in flavor default: 1 more needed; "
        "cohort ai-lab has 0 to lend"
    )
    assert engine.pending_names() == ["big", "more"]
    big, more = engine.why["big"], engine.why["more"]  # the same reasons, structured
    assert big.code is Code.QUOTA_CAPACITY_EXCEEDED
    assert dict(big.fields) == {
        "cluster_queue": "a", "flavor": "default", "resource": "cpu", "requested": 4000,
        "capacity": 2000,
    }  # fmt: skip
    assert more.code is Code.UNUSED_QUOTA_SHORT
    assert dict(more.fields) == {
        "flavor": "default", "resource": "cpu", "needed": 1000, "cohort": "ai-lab", "lend": 0
    }  # fmt: skip
    assert more.detail()["causes"] == [{"code": "NoPreemptionPossible", "fields": {}}]


@pytest.mark.parametrize(
    ("resource", "quota", "asked", "capacity_text", "asked_text"),
    [
        ("nvidia.com/gpu", 8, 2**63, "8 GPUs", "9223372036854775808 GPUs"),
        ("nvidia.com/gpu", 1024, 2048, "1024 GPUs", "2048 GPUs"),
        ("gpuaas.io/gpu-milli", 1000, 1500, "1 GPU", "1.5 GPUs"),
        ("nvidia.com/mig-1g.10gb", 7, 14, "7 x nvidia.com/mig-1g.10gb",
         "14 x nvidia.com/mig-1g.10gb"),
    ],
)  # fmt: skip
def test_pending_reasons_count_gpus_as_gpus(
    resource: str, quota: int, asked: int, capacity_text: str, asked_text: str
) -> None:
    """Never a byte suffix (``8Ei``, ``1Ki``) for a device: GPUs, shares, MIG instances."""
    gov = make_gov([ClusterQueue("a", (quota_group(resource, [("default", quota, None, None)]),))])
    engine = AdmissionEngine(gov)
    pod_set = AdmissionPodSet("main", 1, {resource: asked})
    engine.submit(AdmissionWorkload("big", "ns/a", (pod_set,)))
    engine.run(0)
    assert engine.reasons["big"] == (
        f"insufficient quota for {resource} in flavor default: {asked_text} requested > "
        f"{capacity_text} maximum capacity of ClusterQueue a"
    )


def test_strict_fifo_blocks_and_says_why() -> None:
    gov = make_gov([cq("a", 3000, queueing_strategy=QueueingStrategy.STRICT_FIFO)])
    engine = AdmissionEngine(gov)
    engine.submit(wl("head", "a", 5000, priority=10))
    engine.submit(wl("small", "a", 1000, priority=1))
    engine.run(0)
    assert not engine.admitted
    assert engine.reasons["small"] == "StrictFIFO: waiting behind head in ClusterQueue a"


def test_unknown_queue_is_rejected() -> None:
    engine = AdmissionEngine(make_gov([cq("a", 1000)]))
    with pytest.raises(InvalidValue, match="workload w: queue: LocalQueue 'ns/zz' does not exist"):
        engine.submit(wl("w", "zz", 1))


def test_min_run_time_protects_recent_admissions() -> None:
    config = AdmissionConfig(min_run_time=60)
    engine = AdmissionEngine(make_gov([cq("a", 2000, preemption=LOWER)]), config)
    engine.admit_existing(wl("old", "a", 2000), {"main": {"cpu": "default"}}, at=100)
    engine.submit(wl("urgent", "a", 2000, priority=10, created=120))
    engine.run(120)
    assert "old" in engine.admitted and not engine.evictions
    engine.run(161)
    assert "urgent" in engine.admitted
    assert engine.evictions[0].workload == "old"
    assert engine.evictions[0].reason == EvictionReason.IN_CLUSTER_QUEUE


def test_per_user_limit_inside_a_queue() -> None:
    config = AdmissionConfig(user_limits={"ns/a": 2})
    engine = AdmissionEngine(make_gov([cq("a", 100_000)]), config)
    for i in range(4):
        engine.submit(wl(f"alice-{i}", "a", 1000, created=i, user="alice"))
    engine.submit(wl("bob-0", "a", 1000, created=9, user="bob"))
    engine.run(10)
    assert sorted(engine.admitted) == ["alice-0", "alice-1", "bob-0"]
    assert (
        "user alice already has 2 admitted workloads in LocalQueue ns/a"
        in (engine.reasons["alice-2"])
    )
    assert engine.why["alice-2"] == Reason(
        Code.USER_LIMIT, {"user": "alice", "queue": "ns/a", "limit": 2}
    )
    engine.evict("alice-0", EvictionReason.IN_CLUSTER_QUEUE, "bob-0")
    assert engine.why["alice-0"] == Reason(Code.IN_CLUSTER_QUEUE, {"preemptor": "bob-0"})
    assert engine.reasons["alice-0"] == "evicted (InClusterQueue) to admit bob-0"
    engine.run(11)
    assert "alice-0" in engine.admitted  # oldest first, back within the limit


def test_when_can_borrow_try_next_flavor_prefers_no_borrowing() -> None:
    fung = FlavorFungibility(when_can_borrow=FungibilityPolicy.TRY_NEXT_FLAVOR)
    group = quota_group("cpu", [("spot", 1000, None, None), ("on-demand", 4000, None, None)])
    a = ClusterQueue("a", (group,), cohort="c", flavor_fungibility=fung)
    b = ClusterQueue("b", (quota_group("cpu", [("spot", 8000, None, None)]),), cohort="c")
    engine = AdmissionEngine(make_gov([a, b]))
    engine.submit(wl("w", "a", 2000))
    engine.run(0)
    assert engine.admitted["w"].flavors == {"main": {"cpu": "on-demand"}}
    # with the default MayStopSearch the first flavor is taken while borrowing
    a2 = ClusterQueue("a", (group,), cohort="c")
    engine = AdmissionEngine(make_gov([a2, b]))
    engine.submit(wl("w", "a", 2000))
    engine.run(0)
    assert engine.admitted["w"].flavors == {"main": {"cpu": "spot"}}


def test_untolerated_flavor_taint_moves_to_next_flavor() -> None:
    group = quota_group("cpu", [("tainted", 4000, None, None), ("plain", 4000, None, None)])
    gov = make_gov([ClusterQueue("a", (group,))])
    gov.flavors["tainted"] = ResourceFlavor("tainted", node_taints=(Taint("dedicated", "x"),))
    engine = AdmissionEngine(gov)
    engine.submit(wl("w", "a", 1000))
    tolerant = AdmissionWorkload(
        "t",
        "ns/a",
        (
            AdmissionPodSet(
                "main", 1, {"cpu": 1000}, tolerations=(Toleration("dedicated", "Exists"),)
            ),
        ),
    )
    engine.submit(tolerant)
    engine.run(0)
    assert engine.admitted["w"].flavors["main"]["cpu"] == "plain"
    assert engine.admitted["t"].flavors["main"]["cpu"] == "tainted"


def _fair_gov() -> AdmissionEngine:
    reclaim = PreemptionPolicy(
        within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
        reclaim_within_cohort=ReclaimWithinCohort.ANY,
    )
    gov = make_gov(
        [
            cq("a", 4000, "c", preemption=reclaim),
            cq("b", 4000, "c", preemption=reclaim),
            cq("c0", 4000, "c", preemption=reclaim, fair_sharing_weight=Fraction(1)),
        ]
    )
    return AdmissionEngine(gov, AdmissionConfig(fair_sharing=True))


@pytest.mark.parametrize("fair", [False, True])
def test_fair_sharing_orders_by_share_not_only_priority(fair: bool) -> None:
    gov = make_gov([cq("a", 4000, "c"), cq("b", 0, "c"), cq("lender", 8000, "c")])
    engine = AdmissionEngine(gov, AdmissionConfig(fair_sharing=fair))
    engine.admit_existing(wl("a0", "a", 8000), {"main": {"cpu": "default"}}, 0)
    engine.submit(wl("a-next", "a", 4000, priority=100, created=1))
    engine.submit(wl("b-next", "b", 4000, priority=0, created=2))
    engine.run(2)
    # Both borrow. Classically the higher priority goes first; with fair sharing the queue
    # whose share stays lower (b: 4/12 borrowed, against a: 8/12) goes first.
    winner = "b-next" if fair else "a-next"
    assert set(engine.admitted) == {"a0", winner}


def test_fair_sharing_preemption_reclaims_from_the_biggest_borrower() -> None:
    engine = _fair_gov()
    for i in range(6):
        engine.admit_existing(wl(f"a{i}", "a", 2000), {"main": {"cpu": "default"}}, 0)
    engine.submit(wl("c-job", "c0", 4000, created=1))
    engine.run(1)
    assert "c-job" in engine.admitted
    reasons = {e.workload: e.reason for e in engine.evictions}
    assert len(reasons) == 2
    # c0 stays within its nominal quota: it reclaims what it is owed whatever the shares
    # (Kueue's FairSharingPreemptWithinNominal), so the reason is reclamation
    assert set(reasons.values()) == {EvictionReason.IN_COHORT_RECLAMATION}
    assert all(name.startswith("a") for name in reasons)


def test_admit_existing_checks_flavors() -> None:
    engine = AdmissionEngine(make_gov([cq("a", 1000)], flavors=["other"]))
    with pytest.raises(InvalidValue, match="flavor 'other' has no quota for cpu"):
        engine.admit_existing(wl("w", "a", 1), {"main": {"cpu": "other"}}, 0)
    with pytest.raises(InvalidValue, match="no flavor given"):
        engine.admit_existing(wl("w", "a", 1), {"main": {}}, 0)


def test_physical_fit_moves_to_a_flavor_whose_nodes_have_room() -> None:
    from gpuaas.engine.admission import NodeCapacity

    group = quota_group("cpu", [("pool-a", 100_000, None, None), ("pool-b", 100_000, None, None)])
    gov = make_gov([ClusterQueue("a", (group,))])
    gov.flavors["pool-a"] = ResourceFlavor("pool-a", {"pool": "a"})
    gov.flavors["pool-b"] = ResourceFlavor("pool-b", {"pool": "b"})
    nodes = [
        NodeCapacity("n-a", {"pool": "a"}, {"cpu": 4000}),
        NodeCapacity("n-b", {"pool": "b"}, {"cpu": 4000}),
    ]
    engine = AdmissionEngine(gov, nodes=nodes)
    for i in range(3):
        engine.submit(wl(f"w{i}", "a", 3000, created=i))
    engine.run(3)
    # quota would put all three on pool-a; its single node takes one, pool-b's the next
    assert engine.admitted["w0"].flavors["main"]["cpu"] == "pool-a"
    assert engine.admitted["w1"].flavors["main"]["cpu"] == "pool-b"
    placement = engine.admitted["w0"].placement
    assert placement is not None and placement.nodes == {"main": ["n-a"]}
    assert engine.pending_names() == ["w2"]
    assert "do not fit on the nodes" in engine.reasons["w2"]
    engine.evict("w0", EvictionReason.IN_CLUSTER_QUEUE)
    engine.run(4)
    assert sorted(engine.admitted) == ["w0", "w1"]  # w0 is older than w2: it goes first
    assert engine.pool is not None and engine.pool.used("n-a")["cpu"] == 3000


def test_preemption_with_nodes_frees_the_node_it_needs() -> None:
    from gpuaas.engine.admission import NodeCapacity

    nodes = [NodeCapacity("n1", {}, {"cpu": 4000})]
    engine = AdmissionEngine(make_gov([cq("a", 4000, preemption=LOWER)]), nodes=nodes)
    engine.admit_existing(wl("low", "a", 3000), {"main": {"cpu": "default"}}, at=0)
    assert engine.pool is not None and engine.pool.used("n1")["cpu"] == 3000
    engine.submit(wl("high", "a", 3000, priority=10, created=1))
    engine.run(1)
    assert set(engine.admitted) == {"high"}
    placement = engine.admitted["high"].placement
    assert placement is not None and placement.nodes == {"main": ["n1"]}
    assert [e.workload for e in engine.evictions] == ["low"]
    assert engine.pool.used("n1")["cpu"] == 3000


@pytest.mark.parametrize("reclaim", [ReclaimWithinCohort.LOWER_PRIORITY, ReclaimWithinCohort.ANY])
def test_synthetic_benchmark_settles_within_quota(reclaim: ReclaimWithinCohort) -> None:
    from gpuaas.engine.admission.synthetic import build_benchmark

    gov, workloads, _ = build_benchmark(60, 6, 900, reclaim=reclaim)
    engine = AdmissionEngine(gov, AdmissionConfig(fair_sharing=True))
    for w in workloads:
        engine.submit(w)
    engine.run(900)
    assert len(engine.admitted) + len(engine.pending_names()) == 900
    assert 0 < len(engine.admitted) < 900
    for name, node in engine.tree.cqs.items():
        for fr, used in node.usage.items():
            limit = node.borrowing_limit.get(fr)
            assert used <= node.nominal[fr] + (limit if limit is not None else 10**18), name
        for fr, used in node.usage.items():
            assert used == sum(aw.usage.get(fr, 0) for aw in engine.by_cq[name].values())
    for cohort in engine.tree.cohorts.values():
        for fr, used in cohort.usage.items():
            assert used <= cohort.subtree[fr]


def test_hierarchical_reclaim_spares_a_subtree_within_its_quota() -> None:
    from gpuaas.model.governance import Cohort

    reclaim = PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.LOWER_PRIORITY)
    gov = make_gov(
        [
            cq("A", 4000, "left", preemption=reclaim),
            cq("B", 0, "left"),
            cq("C", 2000, "right"),
            cq("D", 2000, "right"),
        ],
        [Cohort("root"), Cohort("left", parent="root"), Cohort("right", parent="root")],
    )
    engine = AdmissionEngine(gov)
    engine.admit_existing(wl("b", "B", 4000, priority=0), {"main": {"cpu": "default"}}, 0)
    # C borrows from its sibling D, but the right subtree as a whole stays within its quota
    engine.admit_existing(wl("c", "C", 4000, priority=-1), {"main": {"cpu": "default"}}, 0)
    engine.submit(wl("a", "A", 4000, priority=1, created=1))
    engine.run(1)
    assert "a" in engine.admitted
    assert [(e.workload, e.reason) for e in engine.evictions] == [
        ("b", EvictionReason.IN_COHORT_RECLAMATION)
    ]
