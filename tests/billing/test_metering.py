"""The pure side of metering: cutting held time into records (exact, within an hour and a
period), pricing (half-even nano-units, the entry in force), and SKUs of held devices."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.billing.metering import (
    HOUR_US,
    US,
    Held,
    cost,
    cut,
    in_force,
    money,
    nano,
    period_bounds,
    period_of,
    pieces,
    to_us,
)
from gpuaas.billing.skus import held_by, parse_sku
from gpuaas.model.billing import CapacityPool, PriceEntry, Shape, Sku
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.supply.devices import mig_device_name
from gpuaas.supply.loaders import fleet_from_text

# 2026-10-31T22:00Z .. a few days into November: month boundaries inside the range
T_MONTH = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
times = st.integers(
    min_value=to_us(T_MONTH) - 50 * HOUR_US, max_value=to_us(T_MONTH) + 50 * HOUR_US
)


@given(times, st.integers(min_value=0, max_value=30 * HOUR_US))
def test_pieces_cover_the_interval_exactly_each_within_one_hour_and_one_period(
    start: int, length: int
) -> None:
    end = start + length
    cut_ = list(pieces(start, end))
    assert sum(b - a for a, b in cut_) == length  # exact: not a microsecond more or less
    if length:
        assert cut_[0][0] == start and cut_[-1][1] == end
    for (_, b), (c, _) in itertools.pairwise(cut_):
        assert b == c  # contiguous
    for a, b in cut_:
        assert a < b and a // HOUR_US == (b - 1) // HOUR_US  # within one UTC hour
        assert period_of(a / US) == period_of((b - 1) / US)  # within one billing period


def test_a_month_boundary_cuts_a_record() -> None:
    start, end = to_us(T_MONTH - 1800), to_us(T_MONTH + 1800)
    assert list(pieces(start, end)) == [(start, to_us(T_MONTH)), (to_us(T_MONTH), end)]
    assert period_of(T_MONTH - 1) == "2026-10" and period_of(T_MONTH) == "2026-11"
    assert period_bounds("2026-11") == (T_MONTH, datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    assert period_bounds("2026-12")[1] == datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    for bad in ("2026-13", "26-11", "2026/11", "november"):
        with pytest.raises(ValueError):
            period_bounds(bad)


@given(
    times,
    st.integers(min_value=1, max_value=10 * HOUR_US),
    st.sampled_from([Fraction(1), Fraction(1, 4), Fraction(1, 3), Fraction(3, 2)]),
)
def test_cut_keys_are_unique_and_quantities_are_the_held_fraction(
    start: int, length: int, fraction: Fraction
) -> None:
    held = [Held("main-0", "gpu-0", "n1", "H100-80GB/whole@on-demand", fraction),
            Held("main-0", "cpu", "n1", "cpu/cpu@on-demand", Fraction(2))]  # fmt: skip
    out = cut(7, 1, held, start, start + length)
    assert len({p.key for p in out}) == len(out)
    gpu = [p for p in out if p.held.device == "gpu-0"]
    assert abs(sum(p.quantity for p in gpu) - length * fraction) <= len(gpu)  # rounding per piece
    if fraction == 1:
        assert sum(p.quantity for p in gpu) == length
    again = cut(7, 1, held, start, start + length)
    assert [p.key for p in again] == [p.key for p in out]  # a replay has the same keys


def test_cost_is_quantity_times_price_per_hour_rounded_half_even_to_nano() -> None:
    hour = 3600 * US
    assert cost(hour, nano(Decimal("2.49"))) == nano(Decimal("2.49"))
    assert cost(hour // 4, nano(Decimal("2.49"))) == nano(Decimal("0.6225"))
    assert cost(1, 1) == 0  # 1/3.6e9 of a nano-unit
    assert money(cost(90 * 60 * US, nano(Decimal("4")))) == Decimal("6")
    with pytest.raises(ValueError):
        nano(Decimal("0.0000000001"))


def entry(i: int, start: float, until: float | None = None) -> PriceEntry:
    return PriceEntry(i, "provider", "s", Decimal(i), Decimal(i), "USD", start, until)


def test_the_entry_in_force_is_the_latest_started_until_it_ends() -> None:
    book = [entry(1, 0), entry(2, 100), entry(3, 200, 300)]
    assert in_force(book, -1) is None
    assert in_force(book, 0).id == 1  # type: ignore[union-attr]
    assert in_force(book, 99.9).id == 1  # type: ignore[union-attr]
    assert in_force(book, 100).id == 2  # type: ignore[union-attr]
    assert in_force(book, 250).id == 3  # type: ignore[union-attr]
    assert in_force(book, 300) is None  # 3 ended, and 2 yielded to 3


@given(
    st.sampled_from(["H100-80GB", "A100-80GB", "L40S", "cpu"]),
    st.sampled_from(list(Shape)),
    st.sampled_from(list(CapacityPool)),
    st.sampled_from(["", "1g.10gb", "4"]),
)
def test_a_sku_id_reads_back_as_the_same_sku(
    resource: str, shape: Shape, pool: CapacityPool, profile: str
) -> None:
    sku = Sku(resource, shape, pool, profile)
    assert parse_sku(sku.id) == sku
    assert parse_sku("nonsense") is None and parse_sku("H100/bogus@on-demand") is None


FLEET = """\
apiVersion: gpuaas.io/v1
kind: Fleet
nodes:
  - name: mig-1
    cpu: "64"
    memory: 512Gi
    gpus: {model: A100-80GB, count: 1, partitioning: all-1g.10gb}
  - name: ts-1
    cpu: "64"
    memory: 512Gi
    gpus: {model: L40S, count: 1, partitioning: {timeSlicing: {replicas: 4}}}
"""


def test_a_mig_slice_is_a_unit_of_its_profile_and_a_quarter_share_a_quarter_gpu() -> None:
    nodes = {n.name: n for n in fleet_from_text(FLEET, "fleet.yaml").nodes}
    mig = nodes["mig-1"]
    instance = mig.gpus[0].partition.instances[2]
    name = mig_device_name(0, instance)
    pod = PodPlacement("main", 0, 0, "mig-1", 2000, 4 << 30,
                       (DeviceRef(name, "MIG-x", 0, DeviceKind.MIG, 0),))  # fmt: skip
    held = held_by(pod, mig, CapacityPool.ON_DEMAND)
    assert [(h.device, h.sku, h.fraction) for h in held] == [
        (name, "A100-80GB/mig/1g.10gb@on-demand", 1),
        ("cpu", "cpu/cpu@on-demand", 2),
        ("memory", "memory/memory@on-demand", 4),
    ]
    pod = PodPlacement("main", 1, 0, "ts-1", 0, 0,
                       (DeviceRef("gpu-0-ts-3", "GPU-x", 0, DeviceKind.REPLICA, 0),))  # fmt: skip
    (share,) = held_by(pod, nodes["ts-1"], CapacityPool.SPOT)
    assert (share.pod, share.sku, share.fraction) == (
        "main-1", "L40S/timeslice/4@idle-pool", Fraction(1, 4))  # fmt: skip
