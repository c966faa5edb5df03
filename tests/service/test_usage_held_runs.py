"""usage.held_rows stores a run of identical pods' items as one row with a count; expanding the
rows (usage.held_of) gives back exactly the items, so the records written are one per pod and
device as before, and budget_watch's per-hour rate counts every pod of a run."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.billing.metering import Held
from gpuaas.service.usage import held_count, held_of, held_rows


@st.composite
def items(draw: st.DrawFn) -> list[Held]:
    out: list[Held] = []
    for _ in range(draw(st.integers(0, 12))):
        pod_set = draw(st.sampled_from(["s", "s-1", "main", "x-y-z"]))
        start = draw(st.integers(0, 5))
        count = draw(st.integers(1, 30))
        node = draw(st.sampled_from(["n1", "n2"]))
        fraction = Fraction(draw(st.sampled_from([1, 3, 1000])), draw(st.sampled_from([1, 1000])))
        devices = draw(st.sampled_from([("cpu", "memory"), ("cpu",), ("GPU-n1-0",)]))
        for k in range(start, start + count):
            pod = draw(st.sampled_from([f"{pod_set}-{k}", f"{pod_set}-{k}", "odd", "a-b"]))
            for device in devices:
                out.append(Held(pod, device, node, f"sku-{device}", fraction))
    return out


@settings(max_examples=200, deadline=None)
@given(items())
def test_runs_expand_to_exactly_the_items(held: list[Held]) -> None:
    rows = held_rows(held)
    assert Counter(h for row in rows for h in held_of(row)) == Counter(held)
    assert sum(held_count(row) for row in rows) == len(held)
    assert all(len(row) == 6 or row[6] >= 2 for row in rows)


def test_a_gang_of_identical_pods_is_a_row_per_device() -> None:
    held = [
        Held(f"s{i}-{k}", device, "n1", device, Fraction(1, 1000))
        for i in range(2)
        for k in range(625)
        for device in ("cpu", "memory")
    ]
    rows = held_rows(held)
    assert [(row[0], row[1], row[6]) for row in rows] == [
        ("s0-0", "cpu", 625), ("s0-0", "memory", 625),
        ("s1-0", "cpu", 625), ("s1-0", "memory", 625),
    ]  # fmt: skip
    # a row stored before runs (six fields) is one pod
    assert held_of(["p-3", "cpu", "n1", "cpu", 1, 2]) == [
        Held("p-3", "cpu", "n1", "cpu", Fraction(1, 2))
    ]
