"""The GPU catalogue: real memory sizes, GFD product labels, aliases, generic fallbacks."""

from __future__ import annotations

import pytest

from gpuaas.supply.catalogue import CATALOGUE, GpuModel, is_known, lookup


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("H100", "H100-80GB"),
        ("h100-sxm", "H100-80GB"),
        ("H100-80GB-SXM", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("H100-PCIe", "H100-80GB-PCIe"),
        ("H100-NVL", "H100-94GB-NVL"),
        ("A100", "A100-40GB"),
        ("A100-80GB", "A100-80GB"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"),
        ("V100M32", "V100-32GB"),
        ("V100M16", "V100-16GB"),
        ("V100-32GB", "V100-32GB"),
        ("Tesla-T4", "T4"),
        ("Tesla-T4-SHARED", "T4"),
        ("T4", "T4"),
        ("P100", "P100-16GB"),
        ("A10", "A10"),
        ("L40S", "L40S"),
        ("l4", "L4"),
        ("H200", "H200-141GB"),
        ("B200", "B200-180GB"),
    ],
)
def test_aliases(name: str, canonical: str) -> None:
    assert lookup(name).name == canonical
    assert is_known(name)


def test_required_models_are_catalogued_with_real_memory() -> None:
    expected_gb = {
        "A100-40GB": 40,
        "A100-80GB": 80,
        "H100-80GB": 80,
        "H100-80GB-PCIe": 80,
        "H200-141GB": 141,
        "B200-180GB": 180,
        "L40S": 48,
        "L4": 24,
        "A10": 24,
        "T4": 16,
        "V100-16GB": 16,
        "V100-32GB": 32,
        "P100-16GB": 16,
    }
    for name, gb in expected_gb.items():
        model = CATALOGUE[name]
        # nvidia-smi reports a little less than the marketing size (ECC, reserved memory).
        assert 0.9 * gb * 1000 <= model.memory_mib <= gb * 1024, name
        assert model.product and " " not in model.product
        assert not model.generic


def test_mig_only_where_nvidia_supports_it() -> None:
    mig = {name for name, model in CATALOGUE.items() if model.mig_profiles}
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H100-80GB-PCIe", "H200-141GB"} <= mig
    assert "B200-180GB" in mig
    for name in ("L40S", "L4", "A10", "T4", "V100-16GB", "V100-32GB", "P100-16GB"):
        assert not CATALOGUE[name].mig_capable, name
    a100 = CATALOGUE["A100-40GB"]
    assert a100.mig_profiles[0].name == "1g.5gb"
    assert a100.mig_profile("7g.40gb").memory_slices == 8
    h100 = CATALOGUE["H100-80GB"]
    assert h100.mig_profile("3g.40gb").placement_starts == (0, 4)


def test_products_and_families_follow_gfd() -> None:
    assert CATALOGUE["H100-80GB"].product == "NVIDIA-H100-80GB-HBM3"
    assert CATALOGUE["A100-80GB"].product == "NVIDIA-A100-SXM4-80GB"
    assert CATALOGUE["T4"].product == "Tesla-T4"
    assert CATALOGUE["H100-80GB"].family == "hopper"
    assert CATALOGUE["H100-80GB"].architecture == "Hopper"
    assert CATALOGUE["L40S"].family == "ada-lovelace"
    # Product labels are unique, so a label identifies the model.
    products = [m.product for m in CATALOGUE.values()]
    assert len(products) == len(set(products))
    for model in CATALOGUE.values():
        assert lookup(model.product) is model
        assert lookup(model.name.lower()) is model


@pytest.mark.parametrize("name", ["G1", "G2", "G3", "MysteryGPU 9000"])
def test_unknown_models_are_generic(name: str) -> None:
    model = lookup(name)
    assert isinstance(model, GpuModel)
    assert model.generic and model.memory_mib == 0 and model.mig_profiles == ()
    assert model.name == name
    assert lookup(name) is model
    assert not is_known(name)
