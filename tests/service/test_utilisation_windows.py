"""The rolling windows: a mean inside the samples' range, a ring that never grows, a stale
window that reads unknown (not idle), and aggregates per node, job and cluster."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.telemetry import DeviceSample
from gpuaas.service.utilisation import DeviceWindow, Holding, Utilisation, combine

T0 = 1_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sample(device: str, at: float, util: float, node: str = "n1", mem: int = 0) -> DeviceSample:
    return DeviceSample(node, device, at, util, mem, 80 << 30)


readings = st.lists(
    st.tuples(st.floats(0, 299.9), st.floats(0, 1, allow_nan=False)), min_size=1, max_size=400
)


@given(readings)
@settings(max_examples=200, deadline=None)
def test_the_mean_lies_between_the_lowest_and_highest_sample(
    points: list[tuple[float, float]],
) -> None:
    ring = DeviceWindow(300.0, 60)
    for offset, util in points:
        ring.add(T0 + offset, util)
    newest = T0 + max(o for o, _ in points)
    s = ring.summary(newest, stale_after=1e9)
    # the window ends at the newest sample and covers 300 s: every sample falls in it
    assert s.samples == len(points)
    lo, hi = min(u for _, u in points), max(u for _, u in points)
    assert lo - 1e-9 <= s.mean <= hi + 1e-9
    assert s.peak == hi
    assert s.span <= 300.0


@given(st.integers(1, 5000), st.floats(0.01, 20))
@settings(max_examples=50, deadline=None)
def test_the_ring_never_grows_whatever_the_rate(count: int, step: float) -> None:
    ring = DeviceWindow(300.0, 60)
    for i in range(count):
        ring.add(T0 + i * step, 0.5)
    assert ring.size == 60
    assert all(len(a) == 60 for a in (ring.epochs, ring.sums, ring.counts, ring.peaks))
    s = ring.summary(T0 + (count - 1) * step, stale_after=1e9)
    # only the last window's samples count (a slot wide at the edge)
    assert s.samples <= 300.0 / step + 300.0 / 60 / step + 1


def test_old_samples_leave_the_window() -> None:
    ring = DeviceWindow(300.0, 60)
    for t in range(0, 300, 5):
        ring.add(T0 + t, 1.0)  # busy for five minutes
    for t in range(300, 600, 5):
        ring.add(T0 + t, 0.0)  # then idle for five
    s = ring.summary(T0 + 599, stale_after=60)
    assert s.known and s.mean == 0.0 and s.peak == 0.0


def test_a_window_whose_newest_sample_is_stale_is_unknown_not_idle() -> None:
    clock = Clock()
    u = Utilisation(window=300, stale_after=60, clock=clock)
    u.record([sample("gpu-0", T0 - 10, 0.0)])
    now = u.device("n1", "gpu-0")
    assert now is not None and now.known and now.mean == 0.0  # idle, and known to be
    clock.now = T0 + 61  # the exporter went quiet: 71 s since the last reading
    later = u.device("n1", "gpu-0")
    assert later is not None and not later.known and later.samples == 0
    assert later.until == T0 - 10  # when it was last heard of
    # a node, a job or a cluster with one stale device is unknown too
    u.set_fleet({"n1": (["gpu-0", "gpu-1"], "acme.c1")})
    u.record([sample("gpu-1", T0 + 60, 0.0)])
    u.set_holdings({7: Holding("acme", (("n1", "gpu-0"), ("n1", "gpu-1")), "acme.c1")})
    for s in (u.node("n1"), u.job(7), u.cluster("acme.c1")):
        assert s is not None and not s.known


def test_nothing_heard_of_is_none() -> None:
    u = Utilisation(clock=Clock())
    assert u.device("n1", "gpu-0") is None
    assert u.node("n1") is None and u.job(1) is None and u.cluster("acme.c1") is None
    u.set_fleet({"n1": (["gpu-0"], "")})
    u.set_holdings({1: Holding("acme", (("n1", "gpu-0"),))})
    assert u.node("n1") is None and u.job(1) is None


def test_aggregates_weigh_each_device_the_same() -> None:
    clock = Clock()
    u = Utilisation(clock=clock)
    u.set_fleet({"n1": (["gpu-0", "gpu-1"], "acme.c1"), "n2": (["gpu-0"], "acme.c1"),
                 "n3": (["gpu-0"], "")})  # fmt: skip
    for t in range(0, 60, 5):
        u.record(
            [
                sample("gpu-0", T0 - t, 0.9, mem=10),
                sample("gpu-1", T0 - t, 0.1, mem=20),
                sample("gpu-0", T0 - t, 0.0, node="n2"),
                sample("gpu-0", T0 - t, 1.0, node="n3"),
            ]
        )
    u.set_holdings({5: Holding("acme", (("n1", "gpu-0"),), "acme.c1")})
    node = u.node("n1")
    assert node is not None and node.mean == pytest.approx(0.5) and node.peak == 0.9
    assert node.memory_used_bytes == 30 and node.samples == 24
    job = u.job(5)
    assert job is not None and job.mean == pytest.approx(0.9)
    cluster = u.cluster("acme.c1")  # n1's two devices and n2's idle one: idle ones count
    assert cluster is not None and cluster.mean == pytest.approx((0.9 + 0.1 + 0.0) / 3)
    assert u.cluster("acme.other") is None


def test_devices_that_leave_the_fleet_are_forgotten() -> None:
    u = Utilisation(clock=Clock())
    u.record([sample("gpu-0", T0, 0.5), sample("gpu-0", T0, 0.5, node="n2")])
    u.set_fleet({"n1": (["gpu-0"], "")})
    assert u.device("n2", "gpu-0") is None and u.device("n1", "gpu-0") is not None
    # once the fleet is known, readings of devices it does not have are not kept
    assert u.record([sample("gpu-9", T0, 0.5)]) == 0


def test_combine_of_summaries_stays_within_the_devices_range() -> None:
    u = Utilisation(clock=Clock())
    u.record([sample("gpu-0", T0, 0.2), sample("gpu-1", T0, 0.6)])
    parts = [u.device("n1", "gpu-0"), u.device("n1", "gpu-1"), None]
    both = combine(parts)
    assert both is not None and 0.2 <= both.mean <= 0.6 and both.samples == 2


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        Utilisation(window=0)
    with pytest.raises(ValueError, match="stale_after"):
        Utilisation(stale_after=-1)
