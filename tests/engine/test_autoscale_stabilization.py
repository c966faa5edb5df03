"""The planner's scale-in stabilization (HPA's scale-down stabilization window, for nodes): the
peak a :class:`PeakWindow` keeps is the brute-force maximum over the window, and no scale-in
ever takes a pool below its recent peak; a window a caller has not seen whole holds the size
it started at."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.autoscale import (
    Action,
    ClusterView,
    NodeFacts,
    PeakWindow,
    PoolView,
    nodes_needed,
    plan,
)
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary

NOW = 100_000.0
TPL = Node(
    "tpl", 64_000, 2**39, [GPU(i, f"g{i}", "H100", 81920, Partition.whole()) for i in range(8)]
)


def idle(name: str, since: float = 0.0) -> NodeFacts:
    return NodeFacts(name, "p", 0.0, UtilSummary(0.0, 0.0, 10, 300.0, NOW), since)


def busy(name: str) -> NodeFacts:
    return NodeFacts(name, "p", 1.0, UtilSummary(0.9, 0.9, 10, 300.0, NOW), None)


def cluster(nodes: list[NodeFacts], peak: int, spec: AutoscaleSpec) -> ClusterView:
    pool = PoolView("p", 0, 64, TPL, tuple(nodes), recent_peak=peak)
    return ClusterView("t.c", spec, (pool,), ())


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1, 5000),
    st.lists(st.tuples(st.floats(0, 2000), st.integers(0, 40)), min_size=1, max_size=60),
)
def test_the_window_keeps_the_brute_force_peak(seconds: float, steps) -> None:  # type: ignore[no-untyped-def]
    window = PeakWindow(seconds, 0.0)
    seen: list[tuple[float, int]] = []
    t = 0.0
    for gap, value in steps:
        t += gap
        got = window.see(t, value)
        seen.append((t, value))
        assert got == max(v for at, v in seen if at >= t - seconds)
        assert window.peak(t) == got


def test_a_window_not_yet_seen_whole_holds_the_size_it_started_at() -> None:
    window = PeakWindow(600.0, 0.0, start_at=5)
    assert window.see(10.0, 1) == 5  # a new leader: the lull before it took over is unknown
    assert window.see(599.0, 1) == 5
    assert window.see(601.0, 1) == 1  # one whole window seen


@settings(max_examples=300, deadline=None)
@given(
    busy_nodes=st.integers(0, 12),
    idle_nodes=st.integers(0, 12),
    peak=st.integers(0, 30),
    budget=st.integers(1, 10),
    window=st.sampled_from([0.0, 600.0, 3600.0]),
)
def test_no_scale_in_goes_below_the_recent_peak(
    busy_nodes: int, idle_nodes: int, peak: int, budget: int, window: float
) -> None:
    spec = AutoscaleSpec(
        target_percent=95,
        unneeded_seconds=60,
        cooldown_seconds=0,
        disruption_budget=budget,
        stabilization_seconds=window,
    )
    nodes = [busy(f"b{i}") for i in range(busy_nodes)] + [idle(f"i{i}") for i in range(idle_nodes)]
    kept = peak if window else 0  # the caller passes 0 without a window
    released = sum(
        d.count for d in plan([cluster(nodes, kept, spec)], NOW) if d.action is Action.SCALE_IN
    )
    assert len(nodes) - released >= min(len(nodes), kept)
    assert released <= max(0, len(nodes) - max(kept, busy_nodes))
    # with nothing to keep, an idle pool goes (within the budget)
    if not kept and not busy_nodes and idle_nodes:
        assert released == min(idle_nodes, budget)


def test_nodes_needed_counts_all_but_the_unneeded_ready_nodes() -> None:
    joining = NodeFacts("j", "p", 0.0, None, None, 0.0, False)
    assert nodes_needed([busy("a"), idle("b"), joining, idle("c")]) == 2
