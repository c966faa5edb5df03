"""How amounts are shown: GPUs as GPUs, MIG slices and shares as what they are, CPU and memory
in their Kubernetes forms; device counts in API quantities are plain numbers."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import (
    GPU_MILLI,
    NVIDIA_GPU,
    SHARED_GPU,
    canonical_amount,
    describe_amount,
    format_amount,
)

MIG = "nvidia.com/mig-1g.10gb"


@pytest.mark.parametrize(
    ("name", "amount", "text"),
    [
        (NVIDIA_GPU, 1, "1 GPU"),
        (NVIDIA_GPU, 3, "3 GPUs"),
        (NVIDIA_GPU, 0, "0 GPUs"),
        (NVIDIA_GPU, 1024, "1024 GPUs"),
        (NVIDIA_GPU, 2**63, "9223372036854775808 GPUs"),
        (NVIDIA_GPU, -4, "-4 GPUs"),
        (GPU_MILLI, 1500, "1.5 GPUs"),
        (GPU_MILLI, 250, "0.25 GPUs"),
        (GPU_MILLI, 1000, "1 GPU"),
        (GPU_MILLI, 8000, "8 GPUs"),
        (GPU_MILLI, 142, "0.142 GPUs"),
        (MIG, 2, "2 x nvidia.com/mig-1g.10gb"),
        (SHARED_GPU, 1, "1 GPU share"),
        (SHARED_GPU, 4, "4 GPU shares"),
        ("cpu", 1500, "1500m"),
        ("cpu", 64000, "64"),
        ("memory", 64 * 2**30, "64Gi"),
        ("example.com/fpga", 2048, "2048"),
    ],
)
def test_describe_amount(name: str, amount: int, text: str) -> None:
    assert describe_amount(name, amount) == text


@pytest.mark.parametrize(
    ("name", "amount", "text"),
    [
        (NVIDIA_GPU, 1024, "1024"),
        (NVIDIA_GPU, 1000, "1000"),
        (NVIDIA_GPU, 2**63, "9223372036854775808"),
        (MIG, 7, "7"),
        ("cpu", 1500, "1500m"),
        ("memory", 2**40, "1Ti"),
        ("hugepages-2Mi", 2**21, "2Mi"),
    ],
)
def test_format_amount_writes_counts_plainly(name: str, amount: int, text: str) -> None:
    assert format_amount(name, amount) == text


_SUFFIX = re.compile(r"\d(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPE])\b")
_DEVICES = st.sampled_from([NVIDIA_GPU, GPU_MILLI, MIG, SHARED_GPU, "example.com/nic"])


@given(_DEVICES, st.integers(min_value=0, max_value=10**30))
def test_counted_resources_never_carry_a_suffix_and_read_back(name: str, amount: int) -> None:
    """Any count, shown or written, has no unit suffix; the written form parses back exactly,
    and the number a sentence shows is the amount (in GPUs for milli-GPU)."""
    shown = describe_amount(name, amount)
    assert not _SUFFIX.search(shown), shown
    written = format_amount(name, amount)
    assert canonical_amount(name, written) == amount
    number = Fraction(shown.split(" ")[0])
    assert number == (Fraction(amount, 1000) if name == GPU_MILLI else amount)


@given(st.integers(min_value=0, max_value=2**70))
def test_memory_keeps_its_kubernetes_form(amount: int) -> None:
    assert describe_amount("memory", amount) == str(Quantity.parse(amount))
