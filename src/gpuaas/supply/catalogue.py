"""The GPU model catalogue: memory, product label, architecture and MIG geometry per model.

Names seen in the wild differ: ``H100``, ``NVIDIA-H100-80GB-HBM3`` (the ``nvidia.com/gpu.product``
label GPU feature discovery prints), the Alibaba trace's ``V100M32``. :func:`lookup` maps them all
to one :class:`GpuModel`. A name it does not know (the trace's undisclosed ``G1``-``G3``) becomes a
generic model with unknown memory and no MIG, so a fleet with such GPUs still loads and schedules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuaas.supply.mig import MigProfile, profile_table


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model. ``memory_mib`` is what ``nvidia-smi`` and GFD's ``gpu.memory`` report."""

    name: str
    memory_mib: int
    product: str
    family: str  # GFD's nvidia.com/gpu.family: pascal, volta, turing, ampere, hopper, ...
    compute_capability: tuple[int, int] = (0, 0)
    mig_profiles: tuple[MigProfile, ...] = ()
    generic: bool = False
    form_factor: str = ""  # SXM, PCIe, NVL

    @property
    def architecture(self) -> str:
        """Architecture as NVIDIA's DRA driver prints it (``Hopper``)."""
        return self.family.replace("-", " ").title()

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile:
        """The profile called ``name`` (raises :class:`~gpuaas.supply.mig.PartitionError`)."""
        from gpuaas.supply.mig import _profile

        return _profile(self, name)


def _model(
    name: str,
    memory_mib: int,
    product: str,
    family: str,
    cc: tuple[int, int],
    form: str,
    mig: str = "",
) -> GpuModel:
    return GpuModel(
        name=name,
        memory_mib=memory_mib,
        product=product,
        family=family,
        compute_capability=cc,
        mig_profiles=profile_table()[mig] if mig else (),
        form_factor=form,
    )


# Memory: total MiB as nvidia-smi reports it for each part; products: NVML names with spaces
# replaced by dashes, as GFD labels them. MIG only where NVIDIA supports it.
_MODELS: tuple[GpuModel, ...] = (
    _model("A100-40GB", 40960, "NVIDIA-A100-SXM4-40GB", "ampere", (8, 0), "SXM", "A100-40GB"),
    _model("A100-40GB-PCIe", 40960, "NVIDIA-A100-PCIE-40GB", "ampere", (8, 0), "PCIe", "A100-40GB"),
    _model("A100-80GB", 81920, "NVIDIA-A100-SXM4-80GB", "ampere", (8, 0), "SXM", "A100-80GB"),
    _model("A100-80GB-PCIe", 81920, "NVIDIA-A100-80GB-PCIe", "ampere", (8, 0), "PCIe", "A100-80GB"),
    _model("H100-80GB", 81559, "NVIDIA-H100-80GB-HBM3", "hopper", (9, 0), "SXM", "H100-80GB"),
    _model("H100-80GB-PCIe", 81559, "NVIDIA-H100-PCIe", "hopper", (9, 0), "PCIe", "H100-80GB"),
    _model("H100-94GB-NVL", 95830, "NVIDIA-H100-NVL", "hopper", (9, 0), "NVL", "H100-94GB-NVL"),
    _model("H200-141GB", 143771, "NVIDIA-H200", "hopper", (9, 0), "SXM", "H200-141GB"),
    _model("B200-180GB", 183359, "NVIDIA-B200", "blackwell", (10, 0), "SXM", "B200-180GB"),
    _model("L40S", 46068, "NVIDIA-L40S", "ada-lovelace", (8, 9), "PCIe"),
    _model("L4", 23034, "NVIDIA-L4", "ada-lovelace", (8, 9), "PCIe"),
    _model("A10", 23028, "NVIDIA-A10", "ampere", (8, 6), "PCIe"),
    _model("T4", 15360, "Tesla-T4", "turing", (7, 5), "PCIe"),
    _model("V100-16GB", 16160, "Tesla-V100-SXM2-16GB", "volta", (7, 0), "SXM"),
    _model("V100-32GB", 32510, "Tesla-V100-SXM2-32GB", "volta", (7, 0), "SXM"),
    _model("P100-16GB", 16280, "Tesla-P100-PCIE-16GB", "pascal", (6, 0), "PCIe"),
)

#: Canonical name -> model.
CATALOGUE: dict[str, GpuModel] = {m.name: m for m in _MODELS}

_ALIASES: dict[str, str] = {
    "A100": "A100-40GB",
    "A100-SXM": "A100-40GB",
    "A100-SXM4": "A100-40GB",
    "A100-40GB-SXM": "A100-40GB",
    "A100-SXM4-40GB": "A100-40GB",
    "A100-PCIE": "A100-40GB-PCIe",
    "A100-PCIE-40GB": "A100-40GB-PCIe",
    "A100-80GB-SXM": "A100-80GB",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-80GB-PCIE": "A100-80GB-PCIe",
    "H100": "H100-80GB",
    "H100-SXM": "H100-80GB",
    "H100-SXM5": "H100-80GB",
    "H100-80GB-SXM": "H100-80GB",
    "H100-80GB-HBM3": "H100-80GB",
    "H100-SXM5-80GB": "H100-80GB",
    "H100-PCIE": "H100-80GB-PCIe",
    "H100-PCIE-80GB": "H100-80GB-PCIe",
    "H100-NVL": "H100-94GB-NVL",
    "H100-NVL-94GB": "H100-94GB-NVL",
    "H100-94GB": "H100-94GB-NVL",
    "H200": "H200-141GB",
    "H200-SXM": "H200-141GB",
    "H200-141GB-HBM3E": "H200-141GB",
    "B200": "B200-180GB",
    "B200-SXM": "B200-180GB",
    "L40S-48GB": "L40S",
    "L4-24GB": "L4",
    "A10-24GB": "A10",
    "T4-16GB": "T4",
    "TESLA-T4": "T4",
    "V100": "V100-16GB",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "V100-SXM2-16GB": "V100-16GB",
    "V100-SXM2-32GB": "V100-32GB",
    "V100-PCIE-16GB": "V100-16GB",
    "V100-PCIE-32GB": "V100-32GB",
    "P100": "P100-16GB",
    "P100-PCIE-16GB": "P100-16GB",
    "P100-SXM2-16GB": "P100-16GB",
}

_INDEX: dict[str, GpuModel] = {}
for _m in _MODELS:
    _INDEX[_m.name.upper()] = _m
    _INDEX[_m.product.upper()] = _m
for _alias, _canonical in _ALIASES.items():
    _INDEX[_alias.upper()] = CATALOGUE[_canonical]

_GENERIC: dict[str, GpuModel] = {}
# GFD rewrites the product label under sharing: "-SHARED" (time-slicing) and "-MIG-<profile>"
# (single strategy). Strip those before looking up.
_SUFFIX = re.compile(r"(-SHARED|-MIG-\d+G\.\d+GB(\+ME)?)+$")


def _key(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip()).upper()
    return _SUFFIX.sub("", key)


def lookup(name: str) -> GpuModel:
    """The model called ``name`` (canonical, alias or product label; any case).

    Unknown names give a generic model (memory 0, no MIG) named as written, never an error,
    because traces use internal codes for GPUs they do not disclose.
    """
    key = _key(name)
    for candidate in (key, key.removeprefix("NVIDIA-"), key.removeprefix("TESLA-")):
        if candidate in _INDEX:
            return _INDEX[candidate]
    generic_name = name.strip() or "unknown"
    model = _GENERIC.get(generic_name)
    if model is None:
        model = GpuModel(
            name=generic_name,
            memory_mib=0,
            product=re.sub(r"\s+", "-", generic_name),
            family="unknown",
            generic=True,
        )
        _GENERIC[generic_name] = model
    return model


def is_known(name: str) -> bool:
    """True when ``name`` is a catalogued model (not a generic stand-in)."""
    return not lookup(name).generic
