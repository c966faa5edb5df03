"""usage.held_runs: a run of identical device-less pods holds one item per resource with the
run's length; usage_open stores it as one row (stored_held) and readers expand it (held_of)
into exactly the items each pod holds alone, so records stay one per pod and device."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.billing.metering import Held
from gpuaas.billing.skus import held_by
from gpuaas.engine.admission.nodes import node_from_capacity
from gpuaas.model.billing import CapacityPool
from gpuaas.model.placement import PodPlacement
from gpuaas.service.usage import held_count, held_of, held_runs, stored_held

NODES = {n: node_from_capacity(n, {}, {"cpu": 64_000, "memory": 2**40}) for n in ("n1", "n2")}


@st.composite
def pods(draw: st.DrawFn) -> list[PodPlacement]:
    out: list[PodPlacement] = []
    for _ in range(draw(st.integers(0, 10))):
        pod_set = draw(st.sampled_from(["s", "s-1", "main"]))
        start = draw(st.integers(0, 4))
        node = draw(st.sampled_from(["n1", "n2", "gone"]))  # "gone": a node not known
        cpu = draw(st.sampled_from([0, 1, 500]))
        memory = draw(st.sampled_from([0, 2**30]))
        for k in range(start, start + draw(st.integers(1, 25))):
            if draw(st.integers(0, 9)) == 0:  # a gap, or a different pod, breaks a run
                k += 1
            out.append(PodPlacement(pod_set, k, len(out), node, cpu, memory))
    return out


@settings(max_examples=200, deadline=None)
@given(pods())
def test_runs_expand_to_exactly_what_each_pod_holds(typed: list[PodPlacement]) -> None:
    pool = CapacityPool.ON_DEMAND
    alone = Counter(
        h for pod in typed if pod.node in NODES for h in held_by(pod, NODES[pod.node], pool)
    )
    runs = held_runs(typed, NODES, pool)
    rows = [stored_held(item, count) for item, count in runs]
    assert Counter(h for row in rows for h in held_of(row)) == alone
    assert sum(held_count(row) for row in rows) == sum(alone.values())


def test_a_gang_of_identical_pods_is_a_row_per_resource() -> None:
    typed = [
        PodPlacement(f"s{i}", k, 625 * i + k, "n1", 1, 2**20) for i in range(2) for k in range(625)
    ]
    rows = [stored_held(h, n) for h, n in held_runs(typed, NODES, CapacityPool.ON_DEMAND)]
    assert [(row[0], row[1], row[-1]) for row in rows] == [
        ("s0-0", "cpu", 625), ("s0-0", "memory", 625),
        ("s1-0", "cpu", 625), ("s1-0", "memory", 625),
    ]  # fmt: skip
    # a row stored before runs (six fields) is one pod
    assert held_of(["p-3", "cpu", "n1", "cpu", 1, 2]) == [
        Held("p-3", "cpu", "n1", "cpu", Fraction(1, 2))
    ]
