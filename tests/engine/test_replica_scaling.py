"""The workload autoscaler's rule (engine/replica_scaling.py): the HPA's ceil(replicas x
utilisation / target) with a tolerance, held within [min, max], monotone in utilisation, quiet
in its cooldown; where new replicas go, which spill to the next cluster, which go first."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gpuaas.engine.reasons import Code, reason
from gpuaas.engine.replica_scaling import (
    TOLERANCE,
    Replica,
    ReplicaSetView,
    decide,
    desired_replicas,
)
from gpuaas.model.autoscale import ReplicaScaling

utils = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
maybe_utils = st.none() | utils
FULL = reason(Code.INSUFFICIENT_GPU, detail="0/2 nodes fit")


def view(
    states: list[tuple[bool, float | None]],
    lo: int = 1,
    hi: int = 10,
    target: float = 50.0,
    scaled_at: float | None = None,
    clusters: tuple[str, ...] = (),
) -> ReplicaSetView:
    replicas = tuple(
        Replica(i + 1, "a", running, util if running else None, primary=i == 0)
        for i, (running, util) in enumerate(states)
    )
    return ReplicaSetView(ReplicaScaling(lo, hi, target, clusters, 60.0), "a", replicas, scaled_at)


@st.composite
def replica_sets(draw: st.DrawFn) -> ReplicaSetView:
    lo = draw(st.integers(1, 6))
    hi = draw(st.integers(lo, 12))
    n = draw(st.integers(1, 14))
    states = [(draw(st.booleans()) or i == 0, draw(maybe_utils)) for i in range(n)]
    target = draw(st.floats(min_value=5.0, max_value=100.0))
    scaled_at = draw(st.none() | st.floats(min_value=0.0, max_value=200.0))
    return view(states, lo, hi, target, scaled_at)


@given(replica_sets(), st.floats(min_value=0.0, max_value=400.0))
def test_the_count_ends_within_min_and_max_and_each_replica_is_named_once(
    v: ReplicaSetView, now: float
) -> None:
    d = decide(v, now)
    s = v.scaling
    after = len(v.replicas) + len(d.add) - len(d.remove)
    assert after == d.desired
    # out of bounds: moved within at once, cooldown or not (no cluster is full here)
    assert s.min_replicas <= after <= s.max_replicas
    assert not (d.add and d.remove)
    assert len(set(d.remove)) == len(d.remove)
    assert 1 not in d.remove  # the job itself is never removed
    assert not {sp.job for sp in d.spill} & set(d.remove)


@given(
    st.lists(st.floats(min_value=-0.9 * TOLERANCE, max_value=0.9 * TOLERANCE), min_size=1,
             max_size=20),
    st.floats(min_value=0.05, max_value=1.0),
)  # fmt: skip
def test_inside_the_tolerance_nothing_changes(offsets: list[float], target: float) -> None:
    measured = [target * (1 + e) for e in offsets]  # each, so their mean, inside the band
    assert desired_replicas(measured, target) == len(measured)


@given(
    st.lists(st.tuples(maybe_utils, utils), min_size=1, max_size=20),
    st.floats(min_value=0.05, max_value=1.0),
)
def test_more_utilisation_never_asks_for_fewer_replicas(
    pairs: list[tuple[float | None, float]], target: float
) -> None:
    low = [u for u, _ in pairs]
    high = [None if u is None else min(1.0, u + extra) for u, extra in pairs]
    assert desired_replicas(low, target) <= desired_replicas(high, target)


@given(st.lists(utils, min_size=1, max_size=20), st.floats(min_value=0.05, max_value=1.0))
def test_outside_the_tolerance_it_is_the_hpa_rule(measured: list[float], target: float) -> None:
    ratio = sum(measured) / len(measured) / target
    got = desired_replicas(measured, target)
    if abs(ratio - 1) <= TOLERANCE:
        assert got == len(measured)
    else:
        assert got == math.ceil(round(len(measured) * ratio, 9))


def test_nothing_measured_changes_nothing() -> None:
    assert desired_replicas([None, None], 0.5) == 2
    d = decide(view([(True, None), (True, None)]), 100.0)
    assert d.desired == 2 and not d.add and not d.remove and d.reason is None


def test_a_replica_without_telemetry_counts_as_the_hpa_counts_a_pod_without_metrics() -> None:
    # scaling up: the unknown one reads 0 %; 2 x 100 % + 0 % over 3 at 50 % -> ceil(4) = 4
    assert desired_replicas([1.0, 1.0, None], 0.5) == 4
    # scaling down: the unknown one reads the target; (0.1 + 0.5) / 2 / 0.5 = 0.6 -> 2
    assert desired_replicas([0.1, None], 0.5) == 2
    # and when that lands in the tolerance, nothing changes
    assert desired_replicas([0.54, None], 0.5) == 2


def test_scale_up_on_utilisation_with_its_reason_then_the_cooldown_holds() -> None:
    v = view([(True, 1.0), (True, 0.9)])
    d = decide(v, 100.0)
    assert d.desired == 4 and d.add == ("a", "a") and d.scaled
    assert d.reason is not None and d.reason.code is Code.REPLICAS_SCALED_UP
    assert dict(d.reason.fields) == {"current": 2, "desired": 4, "utilization": 95.0,
                                     "target": 50.0}  # fmt: skip
    assert d.reason.render() == (
        "scaled up from 2 to 4 replicas: GPU utilisation 95% against a target of 50%"
    )
    cooling = view([(True, 1.0), (True, 0.9)], scaled_at=50.0)
    held = decide(cooling, 100.0)
    assert held.desired == 2 and not held.add and held.reason is None
    assert decide(cooling, 110.0).add == ("a", "a")  # 60 s after


def test_below_min_is_raised_at_once_even_in_the_cooldown() -> None:
    d = decide(view([(True, None)], lo=3, scaled_at=99.0), 100.0)
    assert d.add == ("a", "a")
    assert d.reason is not None and d.reason.fields["utilization"] is None
    assert "(minReplicas / maxReplicas)" in d.reason.render()


def test_at_max_says_so_and_adds_nothing() -> None:
    d = decide(view([(True, 1.0)] * 4, hi=4), 100.0)
    assert not d.add and d.reason is not None and d.reason.code is Code.REPLICAS_AT_MAX
    assert d.reason.fields["wanted"] == 8 and d.reason.fields["limit"] == 4


def test_scale_down_removes_pending_first_then_the_newest_never_the_job_itself() -> None:
    v = view([(True, 0.05), (True, 0.05), (True, 0.05), (False, None)], lo=1)
    d = decide(v, 100.0)
    # 3 running at 5 % with the pending one at the target: ceil(0.65 / 0.5) = 2
    assert d.desired == 2 and d.remove == (4, 3)
    assert d.reason is not None and d.reason.code is Code.REPLICAS_SCALED_DOWN
    low = decide(view([(True, 0.0)] * 3, lo=1), 100.0)
    assert low.remove == (3, 2) and low.desired == 1
    at_min = decide(view([(True, 0.0)], lo=1), 100.0)
    assert at_min.reason is not None and at_min.reason.code is Code.REPLICAS_AT_MIN


def test_a_replica_waiting_for_capacity_spills_to_the_next_cluster_and_new_ones_follow() -> None:
    scaling = ReplicaScaling(1, 6, 50.0, ("b", "c"), 60.0)
    replicas = (
        Replica(1, "a", True, 1.0, primary=True),
        Replica(2, "a", False, waiting=FULL),
    )
    v = ReplicaSetView(scaling, "a", replicas)
    d = decide(v, 100.0)
    (spill,) = d.spill
    assert (spill.job, spill.from_cluster, spill.to_cluster) == (2, "a", "b")
    assert spill.reason.render() == (
        "replica job 2 spilled from cluster a (InsufficientGpu) to cluster b"
    )
    # one running at 100 % and one waiting (as 0 %): ceil(1.0 / 0.5) = 2, nothing more to add
    assert not d.add
    # after the spill a is full for the cooldown: a new replica goes to b
    busy = (Replica(1, "a", True, 1.0, primary=True), Replica(3, "b", True, 1.0))
    later = decide(ReplicaSetView(scaling, "a", busy, full={"a": 100.0}), 130.0)
    assert later.add == ("b", "b")
    # once the cooldown has passed, a is tried first again
    again = decide(ReplicaSetView(scaling, "a", busy, full={"a": 100.0}), 161.0)
    assert again.add == ("a", "a")


def test_every_cluster_full_adds_nothing_and_says_so() -> None:
    scaling = ReplicaScaling(1, 6, 50.0, ("b",), 60.0)
    replicas = (
        Replica(1, "a", True, 1.0, primary=True),
        Replica(2, "a", True, 1.0),
        Replica(3, "b", False, waiting=FULL),
    )
    d = decide(ReplicaSetView(scaling, "a", replicas, full={"a": 90.0}), 100.0)
    assert not d.add and not d.spill
    assert d.reason is not None and d.reason.code is Code.REPLICAS_CLUSTERS_FULL
    assert d.reason.render() == (
        "wants 4 replicas, has 3: every cluster it may use is full (cluster a, cluster b)"
    )


def test_the_shared_pool_is_a_place_too() -> None:
    scaling = ReplicaScaling(1, 6, 50.0, ("b",), 60.0)
    replicas = (Replica(1, "", True, 1.0, primary=True), Replica(2, "", False, waiting=FULL))
    (spill,) = decide(ReplicaSetView(scaling, "", replicas), 0.0).spill
    assert spill.to_cluster == "b"
    assert "from the shared pool" in spill.reason.render()
