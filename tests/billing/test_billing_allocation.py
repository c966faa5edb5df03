"""The allocation view: for every window and SKU, allocated + idle = capacity (0.01 %)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.billing.allocation import IDLE, Aggregate, DeviceCapacity, allocate
from gpuaas.model.billing import UsageRecord

PRICES = {"H100-80GB/whole": Decimal("3.20"), "A100-40GB/mig/1g.5gb": Decimal("0.61")}
T0 = 1_793_491_200.0


@st.composite
def fleets(draw):
    """Devices with non-overlapping usage pieces (some from the idle pool, some shares)."""
    devices = []
    recs = []
    n = draw(st.integers(1, 6))
    for i in range(n):
        sku = draw(st.sampled_from(sorted(PRICES)))
        devices.append(DeviceCapacity("n1", f"gpu-{i}", sku, Decimal(4 * 3600), PRICES[sku]))
        at = T0
        for j in range(draw(st.integers(0, 6))):
            at += draw(st.integers(0, 1800))
            length = draw(st.integers(1, 1800))
            if at + length > T0 + 4 * 3600:
                break
            fraction = draw(st.sampled_from([Decimal(1), Decimal("0.5")]))
            pool = draw(st.sampled_from(["on-demand", "on-demand", "idle-pool"]))
            seconds = Decimal(length) * fraction
            recs.append(
                UsageRecord(
                    f"{i}-{j}",
                    draw(st.sampled_from(["a", "b"])),
                    "u",
                    "q",
                    "",
                    j,
                    0,
                    "p-0",
                    f"gpu-{i}",
                    "n1",
                    f"{sku}@{pool}",
                    at,
                    at + length,
                    seconds,
                    1,
                    seconds,
                    seconds * Decimal("0.001"),
                )
            )
            at += length
    return devices, recs


@settings(max_examples=150, deadline=None)
@given(
    fleets(),
    st.integers(0, 3 * 3600),
    st.integers(1, 4 * 3600),
    st.sampled_from(list(Aggregate)),
    st.booleans(),
)
def test_allocated_plus_idle_is_capacity_for_every_window_and_sku(fleet, offset, width, by, share):
    devices, recs = fleet
    start = T0 + offset
    end = start + width
    # the capacity of the window: each device's seconds within it
    inside = Decimal(min(end, T0 + 4 * 3600) - max(start, T0))
    window = [
        DeviceCapacity(d.node, d.device, d.sku, max(inside, Decimal(0)), d.per_hour)
        for d in devices
    ]
    view = allocate(window, recs, start, end, by=by, share_idle=share)
    for sku, capacity in view.capacity.items():
        expected = sum((d.seconds * d.per_hour / 3600 for d in window if d.sku == sku), Decimal(0))
        assert abs(capacity - expected) <= expected * Decimal("1e-4") + Decimal("1e-12")
        total = view.allocated[sku] + view.idle[sku]
        assert abs(total - capacity) <= capacity * Decimal("1e-4") + Decimal("1e-12")
        rows = sum((r.total for r in view.rows if r.sku == sku), Decimal(0))
        spot = sum((r.cost for r in view.spot if r.sku == sku), Decimal(0))
        assert abs(rows + spot - capacity) <= capacity * Decimal("1e-4") + Decimal("1e-12")
    assert all(r.seconds >= 0 and r.cost >= 0 for r in view.rows)


def test_shares_allocate_their_fraction_and_spot_is_listed_apart():
    dev = DeviceCapacity("n1", "gpu-0", "H100-80GB/whole", Decimal(3600), Decimal("3.6"))
    half = UsageRecord("k", "a", "u", "q", "", 1, 0, "p-0", "gpu-0", "n1",
                       "H100-80GB/whole@on-demand", T0, T0 + 1000, Decimal(500), 1,
                       Decimal("0.5"), Decimal("0.5"))  # fmt: skip
    spot = UsageRecord("s", "b", "u", "q", "", 2, 0, "p-0", "gpu-0", "n1",
                       "H100-80GB/whole@idle-pool", T0 + 2000, T0 + 2600, Decimal(600), 4,
                       Decimal("0.25"), Decimal("0.25"))  # fmt: skip
    view = allocate([dev], [half, spot], T0, T0 + 3600)
    (idle, row) = view.rows
    assert (row.name, row.cost) == ("a", Decimal("0.5"))
    assert idle.name == IDLE and idle.cost == Decimal("3.6") - Decimal("0.5") - Decimal("0.6")
    (sold,) = view.spot
    assert (sold.name, sold.cost, sold.billed) == ("b", Decimal("0.6"), Decimal("0.25"))
    shared = allocate([dev], [half, spot], T0, T0 + 3600, share_idle=True)
    assert [r.name for r in shared.rows] == ["a"]
    assert shared.rows[0].total + shared.spot[0].cost == Decimal("3.6")
