"""The GPU model catalogue: memory, product label, architecture and MIG geometry per model.

Names seen in the wild differ: ``H100``, ``NVIDIA-H100-80GB-HBM3`` (the ``nvidia.com/gpu.product``
label GPU feature discovery prints), the Alibaba trace's ``V100M32``. :func:`lookup` maps them all
to one :class:`GpuModel`. A name it does not know (the trace's undisclosed ``G1``-``G3``, a GPU
newer than this table) becomes a generic model with unknown memory and no MIG, named as written
without GFD's ``NVIDIA-`` prefix and sharing suffixes, so a fleet with such GPUs still loads and
schedules; the loaders take its memory from the source (GFD's ``nvidia.com/gpu.memory``, an
inventory's ``gpus.memory``). A provider adds models, MIG geometry included, with a catalogue file
(:mod:`gpuaas.supply.catalogue_file`) that :func:`extend` takes in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuaas.supply.mig import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    MigProfile,
    profile_table,
    slice_totals,
)


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
    #: MIG geometry: memory and compute (SM) slices of the whole GPU (the A30 has 4 and 4).
    mig_memory_slices: int = MEMORY_SLICES
    mig_compute_slices: int = COMPUTE_SLICES

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
    memory_slices, compute_slices = slice_totals()[mig] if mig else (8, 7)
    return GpuModel(
        name=name,
        memory_mib=memory_mib,
        product=product,
        family=family,
        compute_capability=cc,
        mig_profiles=profile_table()[mig] if mig else (),
        form_factor=form,
        mig_memory_slices=memory_slices,
        mig_compute_slices=compute_slices,
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
    # Added for what GPU clouds rent today. Memory as nvidia-smi / GFD report it; MIG geometry
    # from NVIDIA's MIG user guide and mig-parted's profiles (see data/mig_profiles.json).
    _model("H20", 97871, "NVIDIA-H20", "hopper", (9, 0), "SXM", "H100-96GB"),
    _model("GH200-96GB", 97871, "NVIDIA-GH200-480GB", "hopper", (9, 0), "SXM", "H100-96GB"),
    _model(
        "GH200-144GB", 147456, "NVIDIA-GH200-144G-HBM3e", "hopper", (9, 0), "SXM", "GH200-144GB"
    ),
    _model("A30", 24576, "NVIDIA-A30", "ampere", (8, 0), "PCIe", "A30-24GB"),
    _model("A10G", 23028, "NVIDIA-A10G", "ampere", (8, 6), "PCIe"),
    _model("L40", 46068, "NVIDIA-L40", "ada-lovelace", (8, 9), "PCIe"),
    _model("RTX-4090", 24564, "NVIDIA-GeForce-RTX-4090", "ada-lovelace", (8, 9), "PCIe"),
    _model("RTX-6000-Ada", 49140, "NVIDIA-RTX-6000-Ada-Generation", "ada-lovelace", (8, 9), "PCIe"),
    _model("RTX-A6000", 49140, "NVIDIA-RTX-A6000", "ampere", (8, 6), "PCIe"),
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
    "L40-48GB": "L40",
    "H20-96GB": "H20",
    "GH200": "GH200-96GB",
    "GH200-480GB": "GH200-96GB",
    "GH200-144GB-HBM3E": "GH200-144GB",
    "GH200-144G-HBM3E": "GH200-144GB",
    "A30-24GB": "A30",
    "A30-PCIE-24GB": "A30",
    "A10G-24GB": "A10G",
    "RTX4090": "RTX-4090",
    "GEFORCE-RTX-4090": "RTX-4090",
    "RTX-4090-24GB": "RTX-4090",
    "RTX-6000-ADA-GENERATION": "RTX-6000-Ada",
    "RTX6000-ADA": "RTX-6000-Ada",
    "RTX-A6000-48GB": "RTX-A6000",
    "H200-NVL": "H200-141GB",
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


_VENDOR = re.compile(r"^NVIDIA[-\s_]+", re.IGNORECASE)
_SHARING_SUFFIX = re.compile(r"(-SHARED|-MIG-\d+G\.\d+GB(\+ME)?)+$", re.IGNORECASE)


def model_name(name: str) -> str:
    """The name an uncatalogued GPU gets: as written, without GFD's ``NVIDIA-`` prefix and the
    ``-SHARED`` / ``-MIG-<profile>`` suffixes GFD adds under sharing (``NVIDIA-RTX-PRO-6000-SHARED``
    is ``RTX-PRO-6000``), so every node with that GPU names the same model."""
    text = _SHARING_SUFFIX.sub("", name.strip())
    return _VENDOR.sub("", text) or text or "unknown"


def lookup(name: str) -> GpuModel:
    """The model called ``name`` (canonical, alias or product label; any case).

    Unknown names give a generic model (memory 0, no MIG) named by :func:`model_name`, never an
    error, because traces use internal codes for GPUs they do not disclose.
    """
    key = _key(name)
    for candidate in (key, key.removeprefix("NVIDIA-"), key.removeprefix("TESLA-")):
        if candidate in _INDEX:
            return _INDEX[candidate]
    generic_name = model_name(name) if name.strip() else "unknown"
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


def extend(models: list[GpuModel], aliases: dict[str, str] | None = None) -> None:
    """Add a provider's models (and aliases: alias -> model name) to the catalogue.

    A name, product or alias that already means a different model is refused: the built-in table
    and the placement tests rely on what its names mean. Adding the same model again (a server
    restarted in one process, a test) is a no-op.
    """
    aliases = aliases or {}
    for model in models:
        for key in (model.name, model.product):
            known = _INDEX.get(_key(key))
            if known is not None and known != model:
                raise ValueError(f"{key!r} already names the catalogued model {known.name}")
    for alias, target in aliases.items():
        known = _INDEX.get(_key(alias))
        wanted = next((m for m in models if m.name == target), CATALOGUE.get(target))
        if wanted is None:
            raise ValueError(f"alias {alias!r} names {target!r}, which is no model")
        if known is not None and known != wanted:
            raise ValueError(f"alias {alias!r} already names the catalogued model {known.name}")
    for model in models:
        CATALOGUE[model.name] = model
        _INDEX[_key(model.name)] = model
        _INDEX[_key(model.product)] = model
        for generic in (model.name, model_name(model.product)):
            _GENERIC.pop(generic, None)
    for alias, target in aliases.items():
        model = CATALOGUE[target]
        _INDEX[_key(alias)] = model
        _GENERIC.pop(model_name(alias), None)
