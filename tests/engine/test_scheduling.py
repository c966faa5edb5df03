"""The one scheduling path: decisions in order, reservations only through the framework, and
the snapshot exact after any sequence of events."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.fleet_changes import (
    AddNode,
    CordonNode,
    RemoveNode,
    RepartitionNode,
)
from gpuaas.engine.policies import make_policy
from gpuaas.engine.reasons import Code, Reason, node_failed
from gpuaas.engine.scheduling import NodeHolds, Request
from gpuaas.engine.scheduling.admission import AdmissionScheduler, admission_workload, queue_for
from gpuaas.engine.scheduling.fleet import PRIORITY_PREEMPTION, FleetScheduler, QueuePolicy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import UNSCHEDULABLE, Node
from gpuaas.model.workload import PodRequest, PodSet, Workload
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
from gpuaas.supply.kueue import load_objects


def fleet(nodes: int) -> list[Node]:
    spec = FleetSpec(
        nodes=nodes, model_shares=((H100, 1.0),), mig_node_share=0, time_sliced_node_share=0
    )
    return synthetic_fleet(spec)


def request(name: str, gpus: int, pods: int = 1, priority: int = 0, **kw: object) -> Request:
    pod = PodRequest(gpus=gpus)
    workload = Workload(name, (PodSet("main", pods, pod),), priority)
    return Request(name, workload, priority=priority, **kw)  # type: ignore[arg-type]


def fleet_scheduler(nodes: int = 2, **kw: object) -> FleetScheduler:
    return FleetScheduler(fleet(nodes), make_policy("packing"), **kw)  # type: ignore[arg-type]


def test_admissions_come_in_queue_order_and_the_rest_waits_with_a_reason() -> None:
    s = fleet_scheduler(1)  # 8 GPUs
    s.submit(request("a", 4, created=0), 0)
    s.submit(request("b", 8, created=1), 1)
    s.submit(request("c", 4, created=2), 2)
    d = s.cycle(2)
    assert [a.name for a in d.admitted] == ["a", "c"]  # b does not fit and is passed over
    assert "b" in d.waiting and "a" not in d.waiting
    assert all(a.placement is not None and len(a.placement) == 1 for a in d.admitted)
    assert not s.cycle(3)  # nothing happened: nothing to decide
    s.finish("a")
    s.finish("c")
    assert [a.name for a in s.cycle(4).admitted] == ["b"]


def test_a_preemption_evicts_before_it_admits_and_names_the_preemptor() -> None:
    s = fleet_scheduler(1)
    s.submit(request("low", 8, created=0), 0)
    assert [a.name for a in s.cycle(0).admitted] == ["low"]
    s.submit(request("high", 8, priority=10, created=1), 1)
    d = s.cycle(1)
    assert [(e.name, e.reason, e.preemptor, e.held_before) for e in d.evicted] == [
        ("low", PRIORITY_PREEMPTION, "high", True)
    ]
    assert [a.name for a in d.admitted] == ["high"]
    assert d.waiting["low"].code is Code.PRIORITY_PREEMPTION
    assert d.waiting["low"].render() == "preempted by high"


def test_a_failed_preemption_puts_the_victims_back_exactly() -> None:
    s = fleet_scheduler(1)
    s.submit(request("low", 4, created=0), 0)
    s.submit(request("mid", 4, priority=5, created=0), 0)
    s.cycle(0)
    before = s.snapshot.state()
    # 16 GPUs on one 8-GPU node: no victim set makes room, both victims are released and
    # then reserved again through the framework
    s.submit(request("big", 8, pods=2, priority=10, created=1), 1)
    d = s.cycle(1)
    assert not d.admitted and not d.evicted
    assert s.snapshot.state() == before
    s.snapshot.check_indexes()


def test_fifo_blocks_behind_its_head_and_backfill_lets_short_jobs_pass() -> None:
    for policy, passed in ((QueuePolicy.FIFO, []), (QueuePolicy.BACKFILL, ["short"])):
        s = fleet_scheduler(1, queue_policy=policy)
        s.submit(request("run", 4, created=0, limit=100), 0)
        s.cycle(0)
        s.submit(request("head", 8, created=1, limit=100), 1)
        s.submit(request("short", 4, created=2, limit=50), 2)
        d = s.cycle(2)
        assert [a.name for a in d.admitted] == passed, policy
        assert "head" in d.waiting


def test_requeue_and_withdraw() -> None:
    s = fleet_scheduler(1)
    s.submit(request("a", 8, created=0), 0)
    s.cycle(0)
    s.requeue("a", node_failed("node gone"))
    assert s.waiting["a"].code is Code.NODE_FAILED and s.waiting["a"].render() == "node gone"
    assert s.withdraw("a") and not s.withdraw("a")
    assert not s.cycle(1).admitted
    with pytest.raises(InvalidValue):
        s.finish("a")


def test_a_node_held_while_gone_takes_nothing_and_comes_back_whole() -> None:
    s = fleet_scheduler(2)
    names = s.snapshot.names
    empty = s.snapshot.state()
    s.nodes_changed(down=[names[0]])
    s.submit(request("a", 8, pods=2, created=0), 0)
    assert not s.cycle(0).admitted  # one node left: a 2 x 8 gang waits
    s.nodes_changed(up=[names[0]])
    assert s.snapshot.state() == empty
    assert [a.name for a in s.cycle(1).admitted] == ["a"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["submit", "finish", "requeue", "withdraw", "down", "up"]),
            st.integers(0, 7),
            st.sampled_from([1, 2, 4, 8]),
            st.integers(0, 2),
        ),
        max_size=40,
    ),
    policy=st.sampled_from(list(QueuePolicy)),
)
def test_the_snapshot_holds_exactly_what_is_admitted_and_held(
    steps: list[tuple[str, int, int, int]], policy: QueuePolicy
) -> None:
    s = fleet_scheduler(3, queue_policy=policy)
    names = s.snapshot.names
    running: dict[str, int] = {}
    gone: set[str] = set()
    t = 0.0
    for k, (op, n, gpus, prio) in enumerate(steps):
        t += 1
        if op == "submit":
            s.submit(request(f"w{k}", gpus, priority=prio, created=t, limit=10.0), t)
        elif op in ("finish", "requeue") and running:
            name = sorted(running)[n % len(running)]
            s.finish(name) if op == "finish" else s.requeue(name, node_failed("lost"))
            del running[name]
        elif op == "withdraw":
            pending = sorted(set(s.index) - set(running))
            if pending:
                s.withdraw(pending[n % len(pending)])
        elif op == "down":
            node = names[n % len(names)]
            on = [w for w in running if s.placement[s.index[w]] and node in
                  {p.placement.node_name for p in s.placement[s.index[w]]}]  # fmt: skip
            if node not in gone:
                for w in on:
                    s.requeue(w, node_failed(f"node {node} failed"))
                    del running[w]
                s.nodes_changed(down=[node])
                gone.add(node)
        elif op == "up" and gone:
            node = sorted(gone)[n % len(gone)]
            s.nodes_changed(up=[node])
            gone.discard(node)
        d = s.cycle(t)
        for e in d.evicted:
            running.pop(e.name)
        for a in d.admitted:
            assert a.placement is not None
            running[a.name] = a.placement.pods[0].pod.gpus * len(a.placement)
        s.snapshot.check_indexes()
        held = s.holds.milli
        assert s.snapshot.allocated_milli() - held == 1000 * sum(running.values())
    assert math.isfinite(t)


def governance() -> object:
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "gpu"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {},
                  "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                      {"name": "gpu", "resources": [{"name": "nvidia.com/gpu",
                                                     "nominalQuota": 8}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip
    return load_objects(yaml.safe_load(yaml.safe_dump(objects)), "test")


def test_admission_reports_each_cycle_once_and_marks_evictions_within_it() -> None:
    gov = governance()
    s = AdmissionScheduler.on_fleet(gov, fleet(2), lazy=True)  # type: ignore[arg-type]
    s.submit(request("low", 8, queue="team", created=0), 0)
    d = s.cycle(0)
    assert [a.name for a in d.admitted] == ["low"]
    assert d.admitted[0].admission is not None and d.admitted[0].admission.cluster_queue == "cq"
    assert not s.cycle(1)  # lazy: nothing changed, nothing run
    s.submit(request("high", 8, priority=10, queue="team", created=2), 2)
    d = s.cycle(2)
    assert [(e.name, e.preemptor, e.held_before) for e in d.evicted] == [("low", "high", True)]
    assert [a.name for a in d.admitted] == ["high"]
    assert "low" in d.waiting


def test_requests_become_admission_workloads_of_their_local_queue() -> None:
    gov = governance()
    assert queue_for("team", gov) == "ml/team"  # type: ignore[arg-type]
    wl = admission_workload(request("a", 2, pods=3, priority=4, created=7), "ml/team")
    assert (wl.name, wl.queue, wl.priority, wl.created) == ("a", "ml/team", 4, 7)
    assert wl.pod_sets[0].count == 3 and wl.pod_sets[0].requests["nvidia.com/gpu"] == 2
    shared = Request("s", Workload("s", (PodSet("main", 1, PodRequest(gpu_milli=500)),)))
    with pytest.raises(InvalidValue):
        admission_workload(shared, "ml/team")


def _used_nodes(s: FleetScheduler, name: str) -> set[str]:
    placed = s.placement[s.index[name]]
    assert placed is not None
    return {s.snapshot.names[n] for n in placed.nodes}


def test_fleet_strategy_adds_a_node_in_place_and_admits_onto_it() -> None:
    s = fleet_scheduler(1)
    s.submit(request("a", 8, created=0), 0)
    s.submit(request("b", 8, created=1), 1)
    assert [a.name for a in s.cycle(1).admitted] == ["a"]
    assert s.waiting["b"].code in (Code.INSUFFICIENT_GPU, Code.NO_CANDIDATE_NODES)
    snap = s.snapshot
    extra = fleet(2)[1]
    assert s.nodes_changed([AddNode(extra)]) == []
    assert s.snapshot is snap and snap.size == 2  # the same snapshot, one row more
    assert [a.name for a in s.cycle(2).admitted] == ["b"]
    assert _used_nodes(s, "b") == {extra.name}
    snap.check_indexes()


def test_fleet_strategy_drains_and_removes_displacing_only_what_ran_there() -> None:
    s = fleet_scheduler(2)
    for k, name in enumerate(("a", "b")):
        s.submit(request(name, 8, created=k), k)
    s.cycle(1)
    where = _used_nodes(s, "a").pop()
    other = _used_nodes(s, "b").pop()
    b_devices = s.placement[s.index["b"]]
    displaced = s.nodes_changed([CordonNode(where, drain=True), RemoveNode(where)])
    assert [(d.workload, d.node, d.reason.code) for d in displaced] == [
        ("a", where, Code.NODE_DRAINED)
    ]
    assert s.waiting["a"].render() == f"node {where} is draining"
    assert s.placement[s.index["b"]] is b_devices  # untouched
    assert s.snapshot.names.count(where) == 0 and not s.snapshot.live[s.snapshot.size - 2 :].all()
    assert not s.cycle(2).admitted  # one node left, b holds it
    s.snapshot.check_indexes()
    # removing without a drain displaces with NodeRemoved; the slot is reused by the next add
    moved = s.nodes_changed([RemoveNode(other)])
    assert [(d.workload, d.reason.code) for d in moved] == [("b", Code.NODE_REMOVED)]
    s.nodes_changed([AddNode(fleet(3)[2])])
    assert s.snapshot.size == 2
    assert [a.name for a in s.cycle(3).admitted] == ["a"]  # a was first in the queue
    with pytest.raises(InvalidValue):
        s.nodes_changed([RemoveNode(where)])


def test_fleet_strategy_cordon_keeps_what_runs_and_places_nothing_new() -> None:
    s = fleet_scheduler(1)
    s.submit(request("a", 4, created=0), 0)
    s.cycle(0)
    name = s.snapshot.names[0]
    assert s.nodes_changed([CordonNode(name)]) == []
    s.submit(request("b", 4, created=1), 1)
    assert not s.cycle(1).admitted and "a" not in s.waiting
    s.nodes_changed([CordonNode(name, cordoned=False)])
    assert [a.name for a in s.cycle(2).admitted] == ["b"]


def test_fleet_strategy_repartition_keeps_kept_devices_and_displaces_lost_ones() -> None:
    s = fleet_scheduler(1)
    s.submit(request("a", 4, created=0), 0)
    s.cycle(0)
    node = fleet(1)[0]
    placed = s.placement[s.index["a"]]
    assert placed is not None
    used = {g for p in placed.pods for g, _ in p.assignment.gpu_milli}
    # the same layout (other labels): a keeps exactly its devices
    same = dataclasses.replace(node, labels={**node.labels, "x": "y"})
    assert s.nodes_changed([RepartitionNode(same)]) == []
    assert s.placement[s.index["a"]] is placed
    # a node without the GPUs a holds: a is displaced with DeviceLost
    smaller = dataclasses.replace(node, gpus=[g for k, g in enumerate(node.gpus) if k not in used])
    displaced = s.nodes_changed([RepartitionNode(smaller)])
    assert [(d.workload, d.reason.code) for d in displaced] == [("a", Code.DEVICE_LOST)]
    assert s.snapshot.allocated_milli() == 0
    s.snapshot.check_indexes()


def test_fleet_strategy_repartition_displaces_what_no_longer_has_room() -> None:
    s = fleet_scheduler(2)
    node = fleet(2)[0]
    big = Workload("big", (PodSet("main", 2, PodRequest(gpus=8, cpu_milli=100_000)),))
    s.submit(Request("big", big), 0)  # one pod on each node
    assert [a.name for a in s.cycle(1).admitted] == ["big"]
    # the same GPUs, too little cpu for big's pod: big loses both pods, on both nodes
    displaced = s.nodes_changed([RepartitionNode(dataclasses.replace(node, cpu_milli=50_000))])
    assert [(d.workload, d.node, d.reason.code) for d in displaced] == [
        ("big", node.name, Code.DEVICE_LOST)
    ]
    assert "no longer has room" in s.waiting["big"].render()
    snap = s.snapshot  # nothing of big is left anywhere
    assert snap.allocated_milli() == 0 and (snap.cpu_free == snap.cpu_total).all()
    s.snapshot.check_indexes()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["submit", "finish", "add", "remove", "drain", "down", "up"]),
            st.integers(0, 7),
            st.sampled_from([1, 2, 4, 8]),
        ),
        max_size=40,
    ),
    policy=st.sampled_from(list(QueuePolicy)),
)
def test_fleet_changes_keep_the_snapshot_exact_and_touch_only_displaced_jobs(
    steps: list[tuple[str, int, int]], policy: QueuePolicy
) -> None:
    """After any sequence of additions, removals, drains, failures and repairs the strategy's
    snapshot equals one built from scratch from the live nodes with the running jobs reserved,
    and a running job either keeps exactly its devices or is displaced."""
    pool = fleet(12)
    s = FleetScheduler(pool[:2], make_policy("packing"), queue_policy=policy)
    facts = {node.name: node for node in pool}  # each node as it is now (drained: cordoned)
    spare = list(pool[2:])
    down: set[str] = set()
    t = 0.0
    for k, (op, n, gpus) in enumerate(steps):
        t += 1
        names = [x for x in s.snapshot.names if x]
        before = {w: s.placement[i] for w, i in s.index.items() if s.placement[i] is not None}
        displaced = []
        up = [x for x in names if x not in down]
        if op == "submit":
            s.submit(request(f"w{k}", gpus, created=t, limit=10.0), t)
        elif op == "finish" and s.running:
            s.finish(s.requests[sorted(s.running)[n % len(s.running)]].name)
        elif op == "add" and spare:
            displaced = s.nodes_changed([AddNode(spare.pop(0))])
        elif op in ("remove", "drain") and up:
            node = up[n % len(up)]
            change = RemoveNode(node) if op == "remove" else CordonNode(node, drain=True)
            displaced = s.nodes_changed([change])
            facts[node] = dataclasses.replace(facts[node], taints=[UNSCHEDULABLE])
        elif op == "down" and up:
            node = up[n % len(up)]
            for w, placed in before.items():
                if node in {s.snapshot.names[x] for x in placed.nodes}:  # type: ignore[union-attr]
                    s.requeue(w, node_failed(f"node {node} failed"))
            s.nodes_changed(down=[node])
            down.add(node)
        elif op == "up" and down:
            node = sorted(down)[n % len(down)]
            s.nodes_changed(up=[node])
            down.discard(node)
        gone = {d.workload for d in displaced}
        for w, placed in before.items():
            now = s.placement[s.index[w]]
            assert now is placed or now is None, w  # kept exactly, or no longer running
            if op in ("add", "remove", "drain"):
                assert (now is None) == (w in gone), w
        s.cycle(t)
        snap = s.snapshot
        snap.check_indexes()
        # the same fleet, the running jobs and the holds, built anew (slots in another order)
        live = [name for name in snap.names if name]
        fresh = Snapshot.from_nodes([facts[name] for name in reversed(live)])
        for i in s.running:
            placed = s.placement[i]
            assert placed is not None
            for p in placed.pods:
                x = fresh.index_of(snap.names[p.placement.node])
                fresh.reserve(x, dataclasses.replace(p.assignment, node=x))
        holds = NodeHolds(fresh)
        for name in down:
            holds.hold(fresh.index_of(name))
        assert snap.canonical() == fresh.canonical()
        running = sum(s.milli[i] for i in s.running)
        assert snap.allocated_milli() - s.holds.milli == running
        assert all(isinstance(why, Reason) for why in s.waiting.values())
