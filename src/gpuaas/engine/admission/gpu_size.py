"""What a GPU request really takes of a GPU in milli-GPU: how MIG slices and shares are charged.

Kueue charges a MIG instance (``nvidia.com/mig-1g.10gb``) as an opaque device and a GPU share as
whatever the user's resource transformation says, so a ClusterQueue cannot say "one GPU's worth"
and seven 1g pods cost seven GPUs (Kueue #10108). gpuaas derives :data:`GPU_MILLI`
(``gpuaas.io/gpu-milli``) for every pod, built in, no transformation to write:

- ``nvidia.com/gpu: n`` is ``1000 * n``;
- ``nvidia.com/mig-<profile>: n`` is ``n * floor(1000 * compute_slices / 7)``. Compute slices,
  not memory slices, because they are the same for a profile name on every GPU model (``1g.10gb``
  takes 1 of 8 memory slices on an A100-80GB but 2 on an A100-40GB, and 1 of 7 compute slices on
  both) and because compute is what the instances of one GPU divide among themselves (7 x 1g,
  3g + 4g). Rounding down keeps a GPU's full set of instances within one GPU of quota
  (7 x 142 = 994, 3g + 4g = 428 + 571 = 999); the error is under 1 milli per instance. The A30
  has 4 compute slices, so its profiles (``1g.6gb``, ``2g.12gb``, ``4g.24gb``, names no other
  model uses) are charged in quarters: ``floor(1000 * compute_slices / 4)``;
- ``gpuaas.io/gpu-milli: m`` (a share of one GPU, or whole GPUs in thousands) is ``m``.

A ClusterQueue opts in by covering ``gpuaas.io/gpu-milli`` in a resource group. There every GPU
form is charged in milli-GPU, and ``nvidia.com/gpu`` / ``nvidia.com/mig-*`` are charged as well
only if the ClusterQueue also covers them (so it can cap both, e.g. at most 4 GPUs' worth and at
most 14 1g instances). A ClusterQueue that does not cover it keeps Kueue's behaviour exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import GPU_MILLI as GPU_MILLI  # defined with the other names
from gpuaas.model.resources import MIG_PREFIX, NVIDIA_GPU
from gpuaas.supply.mig import COMPUTE_SLICES, profile_table, slice_totals

MILLI = 1000
_NAME = re.compile(r"^(\d+)g\.")


@cache
def _compute_slices() -> dict[str, int]:
    """Compute slices per profile name (``1g.10gb+me`` and ``1g.10gb.me`` alike) from the
    catalogue's MIG geometry; a name is the same size on every model that has it."""
    out: dict[str, int] = {}
    for profiles in profile_table().values():
        for p in profiles:
            for name in (p.name, p.name.replace("+", ".")):
                previous = out.setdefault(name, p.compute_slices)
                if previous != p.compute_slices:  # pragma: no cover - a data file error
                    raise InvalidValue(
                        f"mig_profiles.json: {p.name}",
                        f"compute slices differ between models ({previous} and {p.compute_slices})",
                    )
    return out


@cache
def _compute_totals() -> dict[str, int]:
    """Compute slices of the whole GPU per profile name, where it is not 7 (the A30's)."""
    totals = slice_totals()
    return {
        name: totals[gpu][1]
        for gpu, profiles in profile_table().items()
        if totals[gpu][1] != COMPUTE_SLICES
        for p in profiles
        for name in (p.name, p.name.replace("+", "."))
    }


def mig_milli(resource: str, where: str = "") -> int:
    """Milli-GPU one instance of the MIG resource or profile takes (see the module docstring)."""
    slices = mig_compute_slices(resource, where)
    total = _compute_totals().get(resource.removeprefix(MIG_PREFIX), COMPUTE_SLICES)
    return MILLI * slices // total


def mig_compute_slices(resource: str, where: str = "") -> int:
    """Compute slices (of 7) of the MIG resource or profile; InvalidValue naming ``where``
    when the profile is unknown."""
    profile = resource.removeprefix(MIG_PREFIX)
    slices = _compute_slices().get(profile)
    if slices is None:
        match = _NAME.match(profile)  # NVIDIA names every profile "<compute slices>g.<memory>"
        if match is None or not 1 <= int(match.group(1)) <= COMPUTE_SLICES:
            raise InvalidValue(
                where or resource,
                f"unknown MIG profile {profile!r}: cannot tell what part of a GPU it takes",
            )
        slices = int(match.group(1))
    return slices


def gpu_milli(requests: Mapping[str, int], where: str = "") -> int:
    """Milli-GPU one pod with ``requests`` takes: whole GPUs, MIG instances and shares."""
    total = requests.get(NVIDIA_GPU, 0) * MILLI + requests.get(GPU_MILLI, 0)
    for resource, amount in requests.items():
        if amount and resource.startswith(MIG_PREFIX):
            total += amount * mig_milli(resource, f"{where}.{resource}" if where else "")
    return total


def is_gpu_device(resource: str) -> bool:
    """Whether ``resource`` is a GPU form that :data:`GPU_MILLI` charges by its size."""
    return resource == NVIDIA_GPU or resource.startswith(MIG_PREFIX)
