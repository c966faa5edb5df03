"""Kubernetes quantities: exact parsing, canonical text, and errors that name the field."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model.errors import InvalidValue
from gpuaas.model.quantity import Quantity, format_quantity, parse_bytes, parse_milli
from gpuaas.model.resources import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    add,
    canonical_amount,
    fits,
    format_amount,
    mig_resource,
    parse_resource_list,
)


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("500m", Fraction(1, 2)),
        ("64Gi", 64 * 2**30),
        ("1.5", Fraction(3, 2)),
        ("2", 2),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1E", 10**18),
        ("12e+2", 1200),
        ("1e-3", Fraction(1, 1000)),
        (".5", Fraction(1, 2)),
        ("1.5Gi", 3 * 2**29),
        ("100Mi", 100 * 2**20),
        ("250u", Fraction(1, 4000)),
        ("-1", -1),
        ("+7k", 7000),
    ],
)
def test_parse_is_exact(text: str, amount: Fraction | int) -> None:
    assert Quantity.parse(text).amount == amount


def test_integers_in_the_units_the_scheduler_compares() -> None:
    assert parse_milli("500m") == 500
    assert parse_milli("2") == 2000
    assert parse_milli("1.5") == 1500
    assert parse_bytes("64Gi") == 68719476736
    assert parse_bytes("1e3") == 1000
    assert parse_milli("0.0001") == 1  # Kubernetes rounds up to the next milli-unit
    assert parse_bytes("1.5") == 2
    assert parse_milli("-0.0001") == -1  # away from zero, as Kubernetes' inf.RoundUp
    # No float drift: 0.1 + 0.2 is exactly 0.3.
    assert Quantity.parse("0.1") + Quantity.parse("0.2") == Quantity.parse("0.3")
    assert Quantity.parse(0.1) + Quantity.parse(0.2) == Quantity.parse("300m")


def test_numbers_are_accepted() -> None:
    np = pytest.importorskip("numpy")
    assert Quantity.parse(np.int64(3)).amount == 3
    assert Quantity.parse(np.float64(0.25)).amount == Fraction(1, 4)
    assert Quantity.parse(4).amount == 4


@pytest.mark.parametrize(
    "bad", ["", " ", "abc", "1.2.3", "1 Gi", "Gi", "1e", "1ee3", "--1", "1K", "1gi", "nan", "1e31"]
)
def test_bad_text_names_the_field(bad: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        Quantity.parse(bad, "spec.containers[0].resources.cpu")
    assert str(caught.value).startswith("spec.containers[0].resources.cpu: ")
    assert caught.value.field == "spec.containers[0].resources.cpu"


@pytest.mark.parametrize("bad", [True, None, [1], float("inf"), float("nan")])
def test_bad_types_name_the_field(bad: object) -> None:
    with pytest.raises(InvalidValue, match=r"^memory: "):
        Quantity.parse(bad, "memory")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("64Gi", "64Gi"),
        ("1000", "1k"),
        ("1024", "1Ki"),
        ("1E", "1E"),
        ("1.5Gi", "1536Mi"),
        ("0.5", "500m"),
        ("12345", "12345"),
        ("0", "0"),
        ("-2Ki", "-2Ki"),
        ("1e-9", "1n"),
        ("1e-10", "1n"),  # finer than nano rounds up, as in Kubernetes
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    assert format_quantity(Quantity.parse(text)) == canonical


_SUFFIXES = ["", "m", "u", "n", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"]


@given(
    st.integers(-(10**12), 10**12),
    st.integers(0, 6),
    st.sampled_from(_SUFFIXES),
)
def test_round_trip(mantissa: int, decimals: int, suffix: str) -> None:
    digits = str(abs(mantissa)).rjust(decimals + 1, "0")
    number = digits if decimals == 0 else f"{digits[:-decimals]}.{digits[-decimals:]}"
    text = ("-" if mantissa < 0 else "") + number + suffix
    quantity = Quantity.parse(text)
    again = Quantity.parse(str(quantity))
    # Exact unless finer than 1n; those round away from zero, as Kubernetes' inf.Dec RoundUp does.
    if (quantity.amount * 10**9).denominator == 1:
        assert again == quantity
    else:
        assert abs(again.amount) > abs(quantity.amount)
        assert abs(again.amount - quantity.amount) < Fraction(1, 10**9)


@given(st.integers(0, 10**15), st.integers(0, 10**15))
def test_ordering_matches_amounts(a: int, b: int) -> None:
    qa, qb = Quantity.from_milli(a), Quantity.from_milli(b)
    assert (qa < qb) == (a < b)
    assert qa.compare_to(qb) == (a > b) - (a < b)
    assert (qa + qb).milli() == a + b
    assert (qa - qb).milli() == a - b


def test_resource_lists() -> None:
    parsed = parse_resource_list(
        {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": "2"}
    )
    assert parsed == {
        "cpu": 500,
        "memory": 4 * 2**30,
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 2,
    }
    assert canonical_amount(CPU, "1.5") == 1500
    assert canonical_amount(MEMORY, "1.5") == 2
    assert format_amount(CPU, 1500) == "1500m"
    assert format_amount(MEMORY, 64 * 2**30) == "64Gi"
    assert add({"cpu": 1}, {"cpu": 2, "memory": 3}) == {"cpu": 3, "memory": 3}
    assert fits({"cpu": 3}, {"cpu": 3, "memory": 1})
    assert not fits({"nvidia.com/gpu": 1}, {"cpu": 3})


def test_resource_list_errors_name_the_field() -> None:
    with pytest.raises(InvalidValue, match=r"^pod\.resources\.nvidia\.com/gpu: .*whole number"):
        parse_resource_list({NVIDIA_GPU: "0.5"}, "pod.resources")
    with pytest.raises(InvalidValue, match=r"^pod\.resources\.cpu: must not be negative"):
        parse_resource_list({CPU: "-1"}, "pod.resources")
    with pytest.raises(InvalidValue, match=r"^pod\.resources\.memory: 'lots' is not a quantity"):
        parse_resource_list({MEMORY: "lots"}, "pod.resources")
    with pytest.raises(InvalidValue, match=r"^pod\.resources: expected a mapping"):
        parse_resource_list(["cpu"], "pod.resources")  # type: ignore[arg-type]


def test_mig_resource_names_follow_the_device_plugin() -> None:
    assert mig_resource("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
