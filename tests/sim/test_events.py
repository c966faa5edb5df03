"""The event heap and the virtual clock: order is (time, kind, insertion), time never goes back."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model.errors import GpuaasError
from gpuaas.sim.events import Clock, Event, EventKind, EventQueue


def test_same_instant_frees_capacity_before_arrivals_and_failures() -> None:
    q = EventQueue()
    q.push(Event(5.0, EventKind.FAIL, 1))
    q.push(Event(5.0, EventKind.ARRIVAL, 2))
    q.push(Event(5.0, EventKind.FINISH, 3))
    q.push(Event(1.0, EventKind.SCALE_DOWN, 4))
    q.push(Event(5.0, EventKind.REPAIR, 5))
    assert q.peek_time() == 1.0
    assert q.pop().payload == 4
    batch = q.pop_batch()
    assert [e.kind for e in batch] == [
        EventKind.FINISH,
        EventKind.REPAIR,
        EventKind.ARRIVAL,
        EventKind.FAIL,
    ]
    assert not q and q.peek_time() is None and q.pop_batch() == []


def test_ties_keep_insertion_order() -> None:
    q = EventQueue()
    for k in range(5):
        q.push(Event(2.0, EventKind.FINISH, k))
    assert [e.payload for e in q.pop_batch()] == [0, 1, 2, 3, 4]


def test_clock_refuses_to_go_back() -> None:
    clock = Clock(10.0)
    clock.advance(10.0)
    clock.advance(11.5)
    assert clock.now == 11.5
    with pytest.raises(GpuaasError, match="time went back"):
        clock.advance(3.0)


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e6, allow_nan=False),
            st.sampled_from(list(EventKind)),
        ),
        max_size=60,
    )
)
def test_pops_come_out_sorted(items: list[tuple[float, EventKind]]) -> None:
    q = EventQueue()
    for k, (t, kind) in enumerate(items):
        q.push(Event(t, kind, k))
    out = []
    while q:
        out.append(q.pop())
    keys = [(e.time, int(e.kind)) for e in out]
    assert keys == sorted(keys)
    assert len(out) == len(items)
    # equal (time, kind): insertion order
    for a, b in itertools.pairwise(out):
        if (a.time, a.kind) == (b.time, b.kind):
            assert a.payload < b.payload  # type: ignore[operator]
