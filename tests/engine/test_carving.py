"""The carving planner: best fit on topology domains, idle nodes released first, sizes within
the pool's bounds; and, as a property over random sequences of creations, scalings, work
and deletions: a node is in at most one cluster, a cluster never holds fewer than its min or
more than its max nodes, and a node given back carries no work."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuaas.engine.carving import CarvingError, choose, choose_release, plan_pool
from gpuaas.model.cluster import NodePoolSpec
from gpuaas.model.node import Node
from gpuaas.model.topology import Topology


def node(name: str, rack: str = "", domain: str = "", block: str = "") -> Node:
    return Node(name, 64_000, 1 << 39, topology=Topology(block=block, rack=rack,
                                                         nvlink_domain=domain))  # fmt: skip


#: rack r1: d1 = 4 nodes, d2 = 2 nodes; rack r2: d3 = 3 nodes; rack r3: no domain, 2 nodes
FLEET = [
    *(node(f"a{i}", "r1", "d1") for i in range(4)),
    *(node(f"b{i}", "r1", "d2") for i in range(2)),
    *(node(f"c{i}", "r2", "d3") for i in range(3)),
    *(node(f"e{i}", "r3") for i in range(2)),
]


def names(nodes: list[Node]) -> list[str]:
    return sorted(n.name for n in nodes)


def test_the_smallest_domain_that_fits_keeps_the_large_ones_whole() -> None:
    assert names(choose(FLEET, 2)) == ["b0", "b1"]  # d2, not half of d1
    assert names(choose(FLEET, 3)) == ["c0", "c1", "c2"]  # d3, d1 stays whole
    assert names(choose(FLEET, 4)) == ["a0", "a1", "a2", "a3"]


def test_beyond_any_domain_whole_domains_then_the_best_fitting_rest() -> None:
    six = names(choose(FLEET, 6))  # rack r1 holds 6: d1 + d2, one rack
    assert six == ["a0", "a1", "a2", "a3", "b0", "b1"]
    # no rack holds 7: whole racks largest first (r1), the rest where it fits best (a node
    # in no rack, not a piece of r2)
    seven = names(choose(FLEET, 7))
    assert seven == ["a0", "a1", "a2", "a3", "b0", "b1", "e0"]
    five = names(choose(FLEET, 5))  # r1 fits best: d1 whole and the best-fitting rest from d2
    assert five == ["a0", "a1", "a2", "a3", "b0"]
    with pytest.raises(CarvingError):
        choose(FLEET, len(FLEET) + 1)


def test_release_takes_idle_nodes_first_then_the_smallest_holding() -> None:
    held = [*FLEET[:4], FLEET[4]]  # all of d1, one of d2
    assert names(choose_release(held, 1, busy=())) == ["b0"]  # the lone one of d2
    assert names(choose_release(held, 1, busy={"b0"})) != ["b0"]
    pool = NodePoolSpec("p", 5, min_count=2, max_count=6)
    plan = plan_pool(pool, held, [], {"a3", "b0"}, 2)
    assert len(plan.release) + len(plan.drain) == 3
    assert set(plan.drain) <= {"a3", "b0"} and not set(plan.release) & {"a3", "b0"}


@pytest.mark.parametrize(("target", "problem"), [(1, "below"), (7, "above"), (-1, "below")])
def test_a_size_outside_the_bounds_is_refused_naming_the_field(target: int, problem: str) -> None:
    pool = NodePoolSpec("p", 3, min_count=2, max_count=6)
    with pytest.raises(CarvingError) as refused:
        plan_pool(pool, [], FLEET, (), target, "pools[0].count")
    assert refused.value.field == "pools[0].count" and problem in refused.value.problem


def test_a_busy_node_is_never_carved_and_too_few_free_is_refused() -> None:
    pool = NodePoolSpec("p", 2, max_count=20)
    with pytest.raises(CarvingError, match="holds work"):
        plan_pool(pool, [], FLEET, {"a0"}, 2)
    with pytest.raises(CarvingError, match="free"):
        plan_pool(pool, [], FLEET[:3], (), 5)


class Carving(RuleBasedStateMachine):
    """The service's bookkeeping over the planner (service/clusters.py and the worker): a
    carve holds nodes at once; a release gives an idle node back at once and a busy one once
    its work is gone (drained); a deletion releases everything the same way."""

    def __init__(self) -> None:
        super().__init__()
        self.fleet = {n.name: n for n in FLEET}
        self.members: dict[str, set[str]] = {}  # cluster -> its nodes (releasing included)
        self.releasing: set[str] = set()
        self.work: set[str] = set()  # nodes holding a job
        self.pools: dict[str, NodePoolSpec] = {}
        self.given_back: list[tuple[str, bool]] = []  # (node, held work when given back)

    @property
    def owned(self) -> set[str]:
        return set().union(*self.members.values()) if self.members else set()

    def held(self, cluster: str) -> list[Node]:
        return [self.fleet[n] for n in sorted(self.members.get(cluster, ()))
                if n not in self.releasing]  # fmt: skip

    def free(self) -> list[Node]:
        owned = self.owned
        return [n for name, n in self.fleet.items() if name not in owned
                and name not in self.work]  # fmt: skip

    def carve(self, cluster: str, names: tuple[str, ...]) -> None:
        self.members.setdefault(cluster, set()).update(names)

    def give_back(self, name: str) -> None:
        self.given_back.append((name, name in self.work))
        for nodes in self.members.values():
            nodes.discard(name)
        self.releasing.discard(name)

    @rule(
        cluster=st.sampled_from(["x", "y", "z"]),
        low=st.integers(0, 3),
        span=st.integers(0, 4),
        data=st.data(),
    )
    def create(self, cluster: str, low: int, span: int, data: st.DataObject) -> None:
        if cluster in self.pools or f"deleted:{cluster}" in self.pools:
            return  # the name is taken until the deleted cluster is gone (as in the service)
        pool = NodePoolSpec("p", low, min_count=low, max_count=low + span)
        count = data.draw(st.integers(-1, low + span + 2))
        try:
            plan = plan_pool(pool, [], self.free(), self.work, count)
        except CarvingError:
            return
        self.pools[cluster] = pool
        self.carve(cluster, plan.carve)

    @precondition(lambda self: self.pools)
    @rule(data=st.data())
    def scale(self, data: st.DataObject) -> None:
        cluster = data.draw(st.sampled_from(sorted(self.pools)))
        pool = self.pools[cluster]
        target = data.draw(st.integers(-1, pool.upper + 2))
        try:
            plan = plan_pool(pool, self.held(cluster), self.free(), self.work, target)
        except CarvingError:
            return
        self.carve(cluster, plan.carve)
        for name in plan.release:
            self.give_back(name)
        self.releasing.update(plan.drain)

    @rule(data=st.data())
    def work_lands(self, data: st.DataObject) -> None:
        """A job starts on a node that takes work: a shared one, or a cluster's staying one."""
        open_ = [n for n in self.fleet if n not in self.releasing and n not in self.work]
        if open_:
            self.work.add(data.draw(st.sampled_from(sorted(open_))))

    @precondition(lambda self: self.work)
    @rule(data=st.data())
    def work_ends(self, data: st.DataObject) -> None:
        """A job finishes, or is drained off its releasing node (requeued)."""
        self.work.discard(data.draw(st.sampled_from(sorted(self.work))))

    @rule()
    def worker_pass(self) -> None:
        for name in sorted(self.releasing):
            if name not in self.work:
                self.give_back(name)
        for cluster in [c for c in self.pools if c.startswith("deleted:")]:
            if not self.members.get(cluster):
                del self.pools[cluster]
                self.members.pop(cluster, None)

    @precondition(lambda self: any(not c.startswith("deleted:") for c in self.pools))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        cluster = data.draw(st.sampled_from(sorted(c for c in self.pools if ":" not in c)))
        gone = f"deleted:{cluster}"
        self.pools[gone] = NodePoolSpec("p", 0)
        del self.pools[cluster]
        self.members[gone] = self.members.pop(cluster, set())
        for name in sorted(self.members[gone]):
            if name in self.work:
                self.releasing.add(name)
            else:
                self.give_back(name)

    @invariant()
    def a_node_is_in_at_most_one_cluster(self) -> None:
        seen: set[str] = set()
        for nodes in self.members.values():
            assert not nodes & seen, nodes & seen
            seen |= nodes
        assert self.releasing <= seen

    @invariant()
    def sizes_stay_within_bounds(self) -> None:
        for cluster, pool in self.pools.items():
            if cluster.startswith("deleted:"):
                continue
            assert pool.min_count <= len(self.held(cluster)) <= pool.upper, cluster

    @invariant()
    def given_back_nodes_carry_no_work(self) -> None:
        assert not any(busy for _, busy in self.given_back)


TestCarving = Carving.TestCase
TestCarving.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
