"""The idle pool's pure choices: settle takes whole GPU nodes idle long enough, longest idle
first, within max_nodes; reclaim gives back whole pool nodes that match, never more than
asked, disturbing the fewest pool jobs (compared with brute force on small pools, exact and
greedy paths both)."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine import idle_pool
from gpuaas.engine.idle_pool import FreeNode, PoolNode, jobs_disturbed, reclaim, settle
from gpuaas.model.autoscale import IdlePoolSpec

SPEC = IdlePoolSpec(settle_seconds=60, grace_seconds=30, max_nodes=0)


def test_settle_takes_nodes_idle_for_the_settle_time_longest_first() -> None:
    free = [FreeNode("b", 10, 8), FreeNode("a", 50, 8), FreeNode("c", 0, 8), FreeNode("d", 90, 8)]
    assert settle(free, SPEC, 0, now=100) == ["c", "b"]  # a: 50 s idle, d: 10 s
    assert settle(free, SPEC, 0, now=110) == ["c", "b", "a"]  # exactly the settle time


def test_settle_keeps_the_pool_within_max_nodes() -> None:
    free = [FreeNode(f"n{i}", i, 8) for i in range(5)]
    spec = IdlePoolSpec(settle_seconds=0, max_nodes=3)
    assert settle(free, spec, 0, now=100) == ["n0", "n1", "n2"]
    assert settle(free, spec, 2, now=100) == ["n0"]
    assert settle(free, spec, 3, now=100) == []
    assert settle(free, spec, 7, now=100) == []  # over the limit: nothing, and nothing given back


def test_settle_holds_a_node_reclaimed_from_the_pool_for_the_hold() -> None:
    """A node the pool gave back less than ``hold`` ago does not go back in yet (a pool flap);
    without a hold, or once it has passed, it settles as any idle node."""
    back = FreeNode("back", 0, 8, left_pool=500.0)
    other = FreeNode("other", 0, 8)
    assert settle([back, other], SPEC, 0, now=1000) == ["back", "other"]
    assert settle([back, other], SPEC, 0, now=1000, hold=600) == ["other"]
    assert settle([back, other], SPEC, 0, now=1100, hold=600) == ["other"]  # exactly the hold
    assert settle([back, other], SPEC, 0, now=1101, hold=600) == ["back", "other"]


def test_settle_never_takes_a_node_without_gpus() -> None:
    assert settle([FreeNode("cpu", 0, 0), FreeNode("gpu", 0, 4)], SPEC, 0, now=1000) == ["gpu"]


def test_reclaim_takes_empty_nodes_first() -> None:
    pool = [PoolNode("a", 8, (1,)), PoolNode("b", 8, ())]
    pool += [PoolNode("c", 8, (2,)), PoolNode("d", 8, ())]
    assert reclaim(pool, 2, lambda n: True) == ["b", "d"]
    assert reclaim(pool, 0, lambda n: True) == []
    assert reclaim(pool, -3, lambda n: True) == []


def test_reclaim_keeps_a_multi_node_jobs_nodes_together() -> None:
    # job 7 spans three nodes; jobs 1 and 2 hold one node each
    pool = [
        PoolNode("a", 8, (1,)),
        PoolNode("b", 8, (2,)),
        PoolNode("m1", 8, (7,)),
        PoolNode("m2", 8, (7,)),
        PoolNode("m3", 8, (7,)),
    ]
    got = reclaim(pool, 2, lambda n: True)
    assert len(got) == 2 and set(got) <= {"m1", "m2", "m3"}
    assert jobs_disturbed(pool, got) == {7}
    got = reclaim(pool, 4, lambda n: True)
    assert jobs_disturbed(pool, got) == {1, 7}  # job 1's node, by name, with job 7's three


def test_reclaim_prefers_nodes_whose_jobs_are_already_disturbed() -> None:
    pool = [PoolNode("a", 8, (1,)), PoolNode("b", 8, (2,)), PoolNode("c", 8, (3, 2))]
    assert reclaim(pool, 1, lambda n: True, disturbed={3, 2}) == ["b"]  # b, c free; b by name
    assert reclaim(pool, 2, lambda n: True, disturbed={2, 3}) == ["b", "c"]


def test_reclaim_takes_only_matching_nodes_and_no_more_than_match() -> None:
    pool = [PoolNode("h1", 8, ()), PoolNode("a1", 8, ()), PoolNode("h2", 8, (4,))]
    assert reclaim(pool, 5, lambda n: n.startswith("h")) == ["h1", "h2"]


def test_reclaim_prefers_fewer_gpus_of_busy_nodes_on_a_tie() -> None:
    pool = [PoolNode("big", 8, (1,)), PoolNode("small", 2, (2,))]
    assert reclaim(pool, 1, lambda n: True) == ["small"]


# -- against brute force ----------------------------------------------------------------


def brute(pool: list[PoolNode], count: int, ok, disturbed=frozenset()) -> int:
    cand = [n for n in pool if ok(n.name)]
    k = min(count, len(cand))
    return min(
        len(jobs_disturbed(pool, [n.name for n in s]) - set(disturbed))
        for s in combinations(cand, k)
    )


@st.composite
def pools(draw, max_nodes: int = 8, max_jobs: int = 7):
    n = draw(st.integers(1, max_nodes))
    jobs = draw(st.integers(0, max_jobs))
    nodes: list[set[int]] = [set() for _ in range(n)]
    for job in range(jobs):
        # a job holds one node, or spans several (a multi-node job)
        span = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=min(n, 3)))
        for i in span:
            nodes[i].add(job)
    gpus = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    return [PoolNode(f"n{i}", gpus[i], tuple(sorted(nodes[i]))) for i in range(n)]


@settings(max_examples=300, deadline=None)
@given(
    pool=pools(),
    count=st.integers(0, 9),
    odd=st.booleans(),
    disturbed=st.sets(st.integers(0, 6), max_size=2),
)
def test_reclaim_is_whole_nodes_never_more_than_asked_and_minimal(
    pool: list[PoolNode], count: int, odd: bool, disturbed: set[int]
) -> None:
    def ok(name: str) -> bool:
        return not odd or int(name[1:]) % 2 == 0

    got = reclaim(pool, count, ok, disturbed)
    names = {n.name for n in pool}
    matching = [n for n in pool if ok(n.name)]
    assert len(got) == len(set(got))  # each node once
    assert set(got) <= names and all(ok(n) for n in got)  # whole pool nodes that match
    assert len(got) == min(max(count, 0), len(matching))  # never more than asked
    if count > 0 and matching:
        assert len(jobs_disturbed(pool, got) - disturbed) == brute(pool, count, ok, disturbed)


@settings(max_examples=100, deadline=None)
@given(pool=pools(max_nodes=9, max_jobs=9), count=st.integers(1, 9))
def test_the_greedy_path_for_large_groups_is_whole_nodes_and_no_worse_than_a_node_a_job(
    pool: list[PoolNode], count: int
) -> None:
    saved = idle_pool.EXACT_LIMIT
    idle_pool.EXACT_LIMIT = 0  # every group greedy
    try:
        got = reclaim(pool, count, lambda n: True)
    finally:
        idle_pool.EXACT_LIMIT = saved
    assert len(got) == len(set(got)) == min(count, len(pool))
    # greedy never disturbs more jobs than the nodes' own jobs, and never more than all
    assert len(jobs_disturbed(pool, got)) <= len({j for n in pool for j in n.jobs})


def test_greedy_takes_the_multi_node_job_over_many_single_ones() -> None:
    # one group large enough to be greedy: job 0 on eight nodes, each also sharing a node with
    # a chain of single-node jobs to join them into one group
    pool = [PoolNode(f"m{i}", 8, (0,)) for i in range(8)]
    pool += [PoolNode(f"s{i}", 8, (100 + i, 100 + i + 1)) for i in range(14)]
    pool.append(PoolNode("link", 8, (0, 100)))
    got = reclaim(pool, 8, lambda n: True)
    assert jobs_disturbed(pool, got) == {0}


def test_reclaim_scales_to_a_large_pool() -> None:
    pool = [PoolNode(f"n{i:04}", 8, (i // 2,)) for i in range(2000)]  # 1000 two-node jobs
    got = reclaim(pool, 100, lambda n: True)
    assert len(jobs_disturbed(pool, got)) == 50


@pytest.mark.parametrize("count", [1, 3])
def test_reclaim_order_puts_what_disturbs_nothing_new_first(count: int) -> None:
    pool = [PoolNode("x", 8, (1,)), PoolNode("y", 8, (1,)), PoolNode("z", 8, ())]
    got = reclaim(pool, count, lambda n: True)
    assert got[0] == "z"
