"""MIG geometry: profiles, named layouts, and placement by NVIDIA's rules.

A MIG-capable GPU has 8 memory slices and 7 compute (SM) slices (the A30: 4 and 4; a model's
``mig_memory_slices`` and ``mig_compute_slices`` say). A GPU instance of a profile
occupies ``placement_size`` consecutive memory slices from one of the profile's allowed starts
(``nvidia-smi mig -lgipp``) and ``compute_slices`` compute slices. Instances may not overlap in
memory, the compute slices must add up to at most 7, a profile has at most ``max_instances``
instances, and at most one ``+me`` (media extensions) instance exists per GPU. The facts come from
the package's ``data/mig_profiles.json``; nothing here guesses geometry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from gpuaas.model.devices import MigInstance
from gpuaas.model.errors import GpuaasError
from gpuaas.model.resources import mig_resource

if TYPE_CHECKING:
    from gpuaas.supply.catalogue import GpuModel

#: Slices of every MIG GPU but the A30 (whose 4 and 4 the data file gives per model).
MEMORY_SLICES = 8
COMPUTE_SLICES = 7

#: mig-parted's named configs that are not ``all-<profile>``.
ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"


class PartitionError(GpuaasError):
    """A partition request cannot be met; the message names the conflicting slices or profile."""


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model, as ``nvidia-smi mig -lgip/-lgipp`` lists it."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    placement_starts: tuple[int, ...]
    placement_size: int
    media_extensions: bool = False

    @property
    def resource(self) -> str:
        """Extended resource the GPU operator advertises for it (mixed strategy)."""
        return mig_resource(self.name)

    def instance(self, start: int) -> MigInstance:
        return MigInstance(
            start=start,
            size=self.placement_size,
            profile=self.name,
            compute_slices=self.compute_slices,
        )


@cache
def profile_table() -> dict[str, tuple[MigProfile, ...]]:
    """MIG profiles per GPU geometry key (``"A100-40GB"``, ...) from the package data file."""
    raw = json.loads(
        resources.files("gpuaas.supply").joinpath("data/mig_profiles.json").read_text("utf-8")
    )
    if raw.get("memory_slices_total") != MEMORY_SLICES:
        raise GpuaasError("mig_profiles.json: memory_slices_total must be 8")
    if raw.get("compute_slices_total") != COMPUTE_SLICES:
        raise GpuaasError("mig_profiles.json: compute_slices_total must be 7")
    table: dict[str, tuple[MigProfile, ...]] = {}
    for gpu, info in raw["gpus"].items():
        table[gpu] = tuple(
            MigProfile(
                name=p["name"],
                compute_slices=int(p["compute_slices"]),
                memory_slices=int(p["memory_slices"]),
                memory_mib=int(p["memory_mib"]),
                max_instances=int(p["max_instances"]),
                placement_starts=tuple(int(s) for s in p["placement_starts"]),
                placement_size=int(p["placement_size"]),
                media_extensions=bool(p["media_extensions"]),
            )
            for p in info["profiles"]
        )
    return table


@cache
def slice_totals() -> dict[str, tuple[int, int]]:
    """(memory slices, compute slices) per GPU geometry key; 8 and 7 unless the file says."""
    raw = json.loads(
        resources.files("gpuaas.supply").joinpath("data/mig_profiles.json").read_text("utf-8")
    )
    return {
        gpu: (
            int(info.get("memory_slices_total", MEMORY_SLICES)),
            int(info.get("compute_slices_total", COMPUTE_SLICES)),
        )
        for gpu, info in raw["gpus"].items()
    }


def _model(model: GpuModel | str) -> GpuModel:
    if isinstance(model, str):
        from gpuaas.supply.catalogue import lookup  # catalogue imports this module

        return lookup(model)
    return model


def _profiles(model: GpuModel) -> dict[str, MigProfile]:
    if not model.mig_profiles:
        raise PartitionError(f"{model.name} does not support MIG")
    return {p.name: p for p in model.mig_profiles}


def _slices(start: int, size: int) -> str:
    return str(start) if size == 1 else f"{start}-{start + size - 1}"


def _profile(model: GpuModel, name: str) -> MigProfile:
    profiles = _profiles(model)
    key = name.strip().lower()
    for prefix in ("nvidia.com/mig-", "mig-"):
        key = key.removeprefix(prefix)
    if key in profiles:
        return profiles[key]
    if key.endswith(".me") and key[:-3] + "+me" in profiles:  # mig-parted's "all-1g.10gb.me"
        return profiles[key[:-3] + "+me"]
    raise PartitionError(
        f"unknown profile {name.strip()} for {model.name}; valid: {', '.join(profiles)}"
    )


_ITEM = re.compile(r"^(?:(?P<n1>\d+)\s*[x*]\s*)?(?P<name>[^\s:=]+?)(?:\s*[:=]\s*(?P<n2>\d+))?$")


def parse_layout(layout: str | Mapping[str, Any], model: GpuModel | str) -> dict[str, int]:
    """Profile counts of a wanted layout, e.g. ``{"3g.40gb": 1, "1g.10gb": 2}``.

    Accepts mig-parted named configs (``all-disabled`` and ``all-enabled`` give no instances,
    ``all-<profile>`` the profile's maximum count, ``all-<profile>.me`` one ``+me`` instance,
    ``all-balanced`` two small 1g, one 2g and one 3g), a mapping of profile to count, or text such
    as ``"3g.40gb,2g.20gb,2x1g.10gb"`` (``1g.10gb:2`` also works). Profile names are checked
    against the model; zero counts are dropped.
    """
    gpu = _model(model)
    counts: dict[str, int] = {}

    def put(name: str, count: object) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PartitionError(f"{name}: count must be a whole number >= 0, got {count!r}")
        profile = _profile(gpu, name)
        if count:
            counts[profile.name] = counts.get(profile.name, 0) + count

    if isinstance(layout, Mapping):
        for name, count in layout.items():
            if not isinstance(name, str):
                raise PartitionError(f"profile name must be text, got {name!r}")
            put(name, count)
        return counts
    if not isinstance(layout, str):
        raise PartitionError(f"MIG layout must be text or a mapping, got {layout!r}")
    text = layout.strip()
    lowered = text.lower()
    if lowered in (ALL_DISABLED, ALL_ENABLED, ""):
        _profiles(gpu)  # still refuse MIG on a GPU without it
        return {}
    if lowered == ALL_BALANCED:
        return _balanced(gpu)
    if lowered.startswith("all-"):
        profile = _profile(gpu, lowered.removeprefix("all-"))
        return {profile.name: profile.max_instances}
    for item in text.split(","):
        item = item.strip()
        match = _ITEM.fullmatch(item)
        if not item or match is None or (match["n1"] and match["n2"]):
            raise PartitionError(
                f"cannot read MIG layout item {item!r} in {text!r} "
                "(write e.g. '3g.40gb,2g.20gb,2x1g.10gb')"
            )
        put(match["name"], int(match["n1"] or match["n2"] or 1))
    return counts


def _balanced(model: GpuModel) -> dict[str, int]:
    """mig-parted's ``all-balanced``: 2 x smallest 1g, 1 x 2g, 1 x 3g (the A30, with 4 compute
    slices: 2 x 1g and 1 x 2g)."""
    plain = [p for p in _profiles(model).values() if not p.media_extensions]

    def pick(compute: int) -> MigProfile:
        options = [p for p in plain if p.compute_slices == compute]
        if not options:
            raise PartitionError(f"all-balanced: {model.name} has no {compute}g profile")
        return min(options, key=lambda p: (p.memory_slices, p.name))

    if model.mig_compute_slices < 7:
        return {pick(1).name: 2, pick(2).name: 1}
    return {pick(1).name: 2, pick(2).name: 1, pick(3).name: 1}


def _precheck(model: GpuModel, counts: Mapping[str, int]) -> list[MigProfile]:
    """Count-level rules, so the common mistakes get a direct reason before any search."""
    wanted: list[MigProfile] = []
    for name, count in counts.items():
        profile = _profile(model, name)
        if count > profile.max_instances:
            raise PartitionError(
                f"{profile.name}: {count} instances, at most {profile.max_instances} "
                f"fit on {model.name}"
            )
        wanted.extend([profile] * count)
    media = sum(1 for p in wanted if p.media_extensions)
    if media > 1:
        raise PartitionError(f"at most one +me instance per GPU, layout has {media}")
    compute = sum(p.compute_slices for p in wanted)
    if compute > model.mig_compute_slices:
        raise PartitionError(
            f"compute slices: layout needs {compute} of {model.mig_compute_slices}"
        )
    memory = sum(p.placement_size for p in wanted)
    if memory > model.mig_memory_slices:
        raise PartitionError(f"memory slices: layout needs {memory} of {model.mig_memory_slices}")
    return wanted


def _blocker(instance: MigInstance, placed: Iterable[MigInstance]) -> MigInstance | None:
    used = set(instance.memory_slices)
    for other in placed:
        if used.intersection(other.memory_slices):
            return other
    return None


def _conflict(profile: MigProfile, placed: Sequence[MigInstance]) -> str:
    """Why ``profile`` fits at none of its starts next to ``placed``."""
    reasons = []
    for start in profile.placement_starts:
        candidate = profile.instance(start)
        other = _blocker(candidate, placed)
        if other is not None:
            reasons.append(
                f"{profile.name} needs memory slices "
                f"{_slices(start, profile.placement_size)} but {other.profile} already holds "
                f"{_slices(other.start, other.size)}"
            )
    return "; ".join(reasons)


def plan_layout(
    model: GpuModel | str,
    wanted: str | Mapping[str, Any],
    existing: Iterable[MigInstance] = (),
) -> tuple[MigInstance, ...]:
    """Place the wanted profile counts on one GPU, or raise :class:`PartitionError` saying why.

    ``existing`` instances stay where they are (e.g. ones in use) and the wanted ones are placed
    around them; the result holds both. Backtracking, largest profile first, each profile's
    instances at increasing starts (a few hundred search nodes at most). Sorted by start slice.
    """
    gpu = _model(model)
    counts = parse_layout(wanted, gpu)
    fixed = check_layout(gpu, existing)
    total = layout_counts(fixed)
    for name, count in counts.items():
        total[name] = total.get(name, 0) + count
    _precheck(gpu, total)
    profiles = [gpu.mig_profile(name) for name, count in counts.items() for _ in range(count)]
    profiles.sort(key=lambda p: (-p.placement_size, -p.compute_slices, p.name))
    placed: list[MigInstance] = list(fixed)
    deepest: tuple[int, MigProfile | None, tuple[MigInstance, ...]] = (-1, None, ())

    def search(i: int, used: int, min_start: int) -> bool:
        nonlocal deepest
        if i == len(profiles):
            return True
        profile = profiles[i]
        found_any = False
        for start in profile.placement_starts:
            if start < min_start:
                continue
            mask = ((1 << profile.placement_size) - 1) << start
            if used & mask:
                continue
            found_any = True
            placed.append(profile.instance(start))
            same_next = i + 1 < len(profiles) and profiles[i + 1] is profile
            if search(i + 1, used | mask, start + 1 if same_next else 0):
                return True
            placed.pop()
        if not found_any and i > deepest[0]:
            deepest = (i, profile, tuple(placed))
        return False

    used = 0
    for instance in fixed:
        used |= ((1 << instance.size) - 1) << instance.start
    if not search(0, used, 0):
        _, profile, partial = deepest
        assert profile is not None
        reason = _conflict(profile, partial) or f"{profile.name} has no free start"
        raise PartitionError(f"no valid MIG placement on {gpu.name}: {reason}")
    return tuple(sorted(placed))


def check_layout(
    model: GpuModel | str, instances: Iterable[MigInstance]
) -> tuple[MigInstance, ...]:
    """Validate placed instances against the model's table; return them sorted by start."""
    gpu = _model(model)
    ordered = tuple(sorted(instances))
    placed: list[MigInstance] = []
    counts: dict[str, int] = {}
    for instance in ordered:
        profile = _profile(gpu, instance.profile)
        if instance.start not in profile.placement_starts:
            starts = ", ".join(str(s) for s in profile.placement_starts)
            raise PartitionError(
                f"{profile.name} cannot start at memory slice {instance.start}; "
                f"allowed starts: {starts}"
            )
        if instance.size != profile.placement_size:
            raise PartitionError(
                f"{profile.name} occupies {profile.placement_size} memory slices, "
                f"not {instance.size}"
            )
        if instance.compute_slices != profile.compute_slices:
            raise PartitionError(
                f"{profile.name} uses {profile.compute_slices} compute slices, "
                f"not {instance.compute_slices}"
            )
        other = _blocker(instance, placed)
        if other is not None:
            raise PartitionError(
                f"{profile.name} needs memory slices {_slices(instance.start, instance.size)} "
                f"but {other.profile} already holds {_slices(other.start, other.size)}"
            )
        placed.append(instance)
        counts[profile.name] = counts.get(profile.name, 0) + 1
    _precheck(gpu, counts)
    return ordered


def layout_counts(instances: Iterable[MigInstance]) -> dict[str, int]:
    """Profile -> number of instances."""
    counts: dict[str, int] = {}
    for instance in instances:
        counts[instance.profile] = counts.get(instance.profile, 0) + 1
    return counts


def valid_full_layouts(model: GpuModel | str) -> list[tuple[MigInstance, ...]]:
    """Every maximal valid placement (nothing more can be added), each sorted by start."""
    gpu = _model(model)
    profiles = _profiles(gpu)
    candidates = [p.instance(s) for p in profiles.values() for s in p.placement_starts]
    candidates.sort(key=lambda c: (c.start, c.size, c.profile))
    max_of = {p.name: p.max_instances for p in profiles.values()}
    media = {p.name for p in profiles.values() if p.media_extensions}

    def fits(c: MigInstance, used: int, compute: int, counts: dict[str, int], me: int) -> bool:
        mask = ((1 << c.size) - 1) << c.start
        return (
            not used & mask
            and compute + c.compute_slices <= gpu.mig_compute_slices
            and counts.get(c.profile, 0) < max_of[c.profile]
            and not (c.profile in media and me)
        )

    out: list[tuple[MigInstance, ...]] = []
    chosen: list[MigInstance] = []

    def walk(i: int, used: int, compute: int, counts: dict[str, int], me: int) -> None:
        if i == len(candidates):
            if chosen and not any(fits(c, used, compute, counts, me) for c in candidates):
                out.append(tuple(chosen))
            return
        c = candidates[i]
        if fits(c, used, compute, counts, me):
            chosen.append(c)
            counts[c.profile] = counts.get(c.profile, 0) + 1
            mask = ((1 << c.size) - 1) << c.start
            walk(i + 1, used | mask, compute + c.compute_slices, counts, me + (c.profile in media))
            counts[c.profile] -= 1
            chosen.pop()
        walk(i + 1, used, compute, counts, me)

    walk(0, 0, 0, {}, 0)
    return out
