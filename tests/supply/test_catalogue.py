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


@pytest.mark.parametrize(
    ("name", "canonical", "memory_mib", "mig"),
    [
        ("NVIDIA-A10G", "A10G", 23028, ()),
        ("NVIDIA-A30", "A30", 24576, ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb")),
        ("NVIDIA-H20", "H20", 97871, ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb",
                                      "4g.48gb", "7g.96gb")),
        ("NVIDIA-GH200-480GB", "GH200-96GB", 97871, ("1g.12gb", "1g.12gb+me", "1g.24gb",
                                                     "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")),
        ("GH200-144GB", "GH200-144GB", 147456, ("1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb",
                                                "3g.72gb", "4g.72gb", "7g.144gb")),
        ("NVIDIA-L4", "L4", 23034, ()),
        ("NVIDIA-L40", "L40", 46068, ()),
        ("NVIDIA-L40S", "L40S", 46068, ()),
        ("NVIDIA-GeForce-RTX-4090", "RTX-4090", 24564, ()),
        ("RTX 4090", "RTX-4090", 24564, ()),
        ("NVIDIA-RTX-6000-Ada-Generation", "RTX-6000-Ada", 49140, ()),
        ("NVIDIA-RTX-A6000", "RTX-A6000", 49140, ()),
        ("NVIDIA-B200", "B200-180GB", 183359, ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb",
                                               "3g.90gb", "4g.90gb", "7g.180gb")),
    ],
)  # fmt: skip
def test_gpus_clouds_rent_today(
    name: str, canonical: str, memory_mib: int, mig: tuple[str, ...]
) -> None:
    model = lookup(name)
    assert (model.name, model.memory_mib) == (canonical, memory_mib)
    assert tuple(p.name for p in model.mig_profiles) == mig


def test_a30_has_four_memory_and_four_compute_slices() -> None:
    from gpuaas.supply.mig import PartitionError, plan_layout

    a30 = CATALOGUE["A30"]
    assert (a30.mig_memory_slices, a30.mig_compute_slices) == (4, 4)
    assert a30.mig_profile("2g.12gb").placement_starts == (0, 2)
    assert len(plan_layout(a30, "all-1g.6gb")) == 4
    assert [i.profile for i in plan_layout(a30, "all-balanced")] == ["2g.12gb", "1g.6gb", "1g.6gb"]
    with pytest.raises(PartitionError, match="compute slices: layout needs 5 of 4"):
        plan_layout(a30, "4g.24gb,1g.6gb")


def test_gfd_suffixes_and_vendor_prefix_leave_an_unknown_models_name() -> None:
    for label in ("NVIDIA-RTX-PRO-6000", "NVIDIA-RTX-PRO-6000-SHARED", "NVIDIA RTX PRO 6000"):
        assert lookup(label).generic
    assert lookup("NVIDIA-RTX-PRO-6000-SHARED").name == "RTX-PRO-6000"
    assert lookup("NVIDIA-RTX-PRO-6000").name == "RTX-PRO-6000"
