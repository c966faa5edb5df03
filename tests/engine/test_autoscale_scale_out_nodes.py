"""Which nodes a scale-out takes (``engine/autoscale.nodes_for_scale_out``, the one rule the
service loop and the what-if share): never a node the cluster released within the flap window
while another eligible node (free, or in the pool and matching) is left; free nodes before pool
nodes; among the pool nodes allowed, the fewest pool jobs disturbed (brute force); when only
recently released nodes are left, they are held back until the demand has waited ``max_wait``,
then taken and named as flaps."""

from __future__ import annotations

import math
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.autoscale import FLAP_WINDOW_SECONDS, nodes_for_scale_out
from gpuaas.engine.idle_pool import PoolNode, jobs_disturbed

NOW = 10_000.0


def test_free_nodes_first_then_the_pool_never_the_one_just_released() -> None:
    pool = [PoolNode("p1", 8, (1,)), PoolNode("p2", 8, ())]
    released = {"f1": NOW - 60}  # f1 left this cluster a minute ago
    got = nodes_for_scale_out(2, ["f1", "f2"], pool, lambda n: True, released, NOW)
    assert got.free == ("f2",) and got.reclaim == ("p2",) and got.flaps == () and got.held == 0
    # released before the window: an ordinary free node again
    old = {"f1": NOW - FLAP_WINDOW_SECONDS - 1}
    got = nodes_for_scale_out(2, ["f1", "f2"], pool, lambda n: True, old, NOW)
    assert got.free == ("f1", "f2") and got.reclaim == ()


def test_a_pool_node_with_spot_work_is_taken_before_a_free_node_just_released() -> None:
    pool = [PoolNode("p1", 8, (1,))]
    got = nodes_for_scale_out(1, ["f1"], pool, lambda n: True, {"f1": NOW - 1}, NOW)
    assert got.free == () and got.reclaim == ("p1",)


def test_only_recent_nodes_left_waits_then_takes_the_oldest_release_and_names_the_flap() -> None:
    released = {"a": NOW - 100, "b": NOW - 500, "c": NOW - 300}
    held = nodes_for_scale_out(2, ["a", "b", "c"], [], lambda n: True, released, NOW)
    assert held.count == 0 and held.held == 2  # the default waits (at most the window)
    early = nodes_for_scale_out(
        2, ["a", "b", "c"], [], lambda n: True, released, NOW, waited=30, max_wait=60
    )
    assert early.count == 0 and early.held == 2
    late = nodes_for_scale_out(
        2, ["a", "b", "c"], [], lambda n: True, released, NOW, waited=60, max_wait=60
    )
    assert late.free == ("b", "c") and late.flaps == ("b", "c") and late.held == 0


def test_reclaims_in_flight_count_against_the_pool_part() -> None:
    pool = [PoolNode("p1", 8, ()), PoolNode("p2", 8, ())]
    got = nodes_for_scale_out(3, ["f1"], pool, lambda n: True, {}, NOW, reclaiming=1)
    assert got.free == ("f1",) and got.reclaim == ("p1",)
    got = nodes_for_scale_out(2, ["f1"], pool, lambda n: True, {}, NOW, reclaiming=3)
    assert got.free == ("f1",) and got.reclaim == ()


# -- properties ---------------------------------------------------------------------------


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    n_free = draw(st.integers(0, 5))
    n_pool = draw(st.integers(0, 6))
    free = [f"f{i}" for i in range(n_free)]
    n_jobs = draw(st.integers(0, 5))
    pool = [
        PoolNode(
            f"p{i}",
            8,
            tuple(sorted(set(draw(st.lists(st.integers(0, max(n_jobs - 1, 0)), max_size=2)))))
            if n_jobs
            else (),
        )
        for i in range(n_pool)
    ]
    names = free + [p.name for p in pool]
    released = {
        n: NOW - draw(st.floats(0, 2 * FLAP_WINDOW_SECONDS)) for n in names if draw(st.booleans())
    }
    unmatched = {p.name for p in pool if draw(st.integers(0, 4)) == 0}
    count = draw(st.integers(0, 8))
    waited = draw(st.sampled_from([0.0, 30.0, 120.0]))
    max_wait = draw(st.sampled_from([0.0, 60.0, math.inf]))
    disturbed = set(draw(st.lists(st.integers(0, 4), max_size=2)))
    return free, pool, released, unmatched, count, waited, max_wait, disturbed


def recent(name: str, released: dict[str, float]) -> bool:
    return name in released and released[name] >= NOW - FLAP_WINDOW_SECONDS


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_never_a_recently_released_node_while_another_eligible_node_is_left(case) -> None:  # type: ignore[no-untyped-def]
    free, pool, released, unmatched, count, waited, max_wait, disturbed = case

    def matches(name: str) -> bool:
        return name not in unmatched

    got = nodes_for_scale_out(
        count,
        free,
        pool,
        matches,
        released,
        NOW,
        disturbed=disturbed,
        waited=waited,
        max_wait=max_wait,
    )
    chosen = [*got.free, *got.reclaim]
    eligible = set(free) | {p.name for p in pool if matches(p.name)}
    # never more than asked, each node once, only eligible nodes, free ones from the free list
    assert len(chosen) == len(set(chosen)) <= count
    assert set(got.free) <= set(free) and set(got.reclaim) <= eligible - set(free)
    # the flaps are exactly the recently released nodes chosen
    assert set(got.flaps) == {n for n in chosen if recent(n, released)}
    # THE property: a recent node only when every eligible node not recent is chosen
    if got.flaps:
        assert {n for n in eligible if not recent(n, released)} <= set(chosen)
        assert waited >= max_wait
    # free before pool: a pool node (not recent) only when every free node not recent is taken
    if any(not recent(n, released) for n in got.reclaim):
        assert {n for n in free if not recent(n, released)} <= set(got.free)
    # as many as there are, but for those held back to wait out the window
    assert len(chosen) + got.held == min(count, len(eligible))
    if waited >= max_wait:
        assert got.held == 0
    # among the pool nodes allowed (not recent, matching), the fewest pool jobs disturbed
    fresh_taken = [n for n in got.reclaim if not recent(n, released)]
    fresh_pool = [p for p in pool if matches(p.name) and not recent(p.name, released)]
    best = min(
        len(jobs_disturbed(fresh_pool, combo) - disturbed)
        for combo in combinations([p.name for p in fresh_pool], len(fresh_taken))
    )
    assert len(jobs_disturbed(pool, fresh_taken) - disturbed) == best
