"""A provider's own GPU models: a catalogue file that extends the built-in catalogue.

A GPU the built-in table lacks still loads from its GFD labels (memory, count), but without MIG
geometry and under a name taken from its product label. A provider that rents such GPUs writes
them down once (format in ``docs/inventory.md``)::

    apiVersion: gpuaas.io/v1
    kind: GpuCatalogue
    models:
      - name: RTX-PRO-6000
        product: NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition
        memory: 97887Mi
        family: blackwell
        computeCapability: "12.0"
        aliases: [RTX-PRO-6000-96GB]
        mig:
          memorySlices: 4
          computeSlices: 4
          profiles:
            - {name: 1g.24gb, computeSlices: 1, memorySlices: 1, memory: 24Gi,
               maxInstances: 4, placements: [0, 1, 2, 3]}

``mig`` may instead be ``migLike: H100-80GB`` (the same geometry as a catalogued model). Every key
is checked; errors name the file, the model and the field. ``gpuaas --catalogue FILE`` (or
``GPUAAS_CATALOGUE``) loads it for every command, ``gpuaas serve`` included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from gpuaas.model.document import integer, mapping, text
from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import MEMORY, canonical_amount
from gpuaas.supply import catalogue
from gpuaas.supply.catalogue import GpuModel
from gpuaas.supply.loaders._common import read_text
from gpuaas.supply.loaders._yaml import parse_json, parse_yaml
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.mig import COMPUTE_SLICES, MEMORY_SLICES, MigProfile

API_VERSION = "gpuaas.io/v1"
KIND = "GpuCatalogue"
ENV = "GPUAAS_CATALOGUE"

_TOP = ("apiVersion", "kind", "models")
_MODEL = (
    "name",
    "product",
    "memory",
    "family",
    "computeCapability",
    "formFactor",
    "aliases",
    "mig",
    "migLike",
)
_MIG = ("memorySlices", "computeSlices", "profiles")
_PROFILE = (
    "name",
    "computeSlices",
    "memorySlices",
    "memory",
    "maxInstances",
    "placements",
    "mediaExtensions",
)
_PROFILE_NAME = re.compile(r"^(?P<compute>\d+)g\.\d+gb(\+me)?$")
_CC = re.compile(r"^(\d+)\.(\d+)$")
_MIB = 2**20


class CatalogueFileError(FleetFileError):
    """A catalogue file is missing, unreadable or wrong (``FILE: ENTRY: FIELD: PROBLEM``)."""


def _keys(value: object, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    return mapping(value, where, allowed, optional=False)


def _text(raw: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
    value = raw.get(key)
    return "" if value is None and not required else text(value, f"{where}{key}")


def _int(raw: Mapping[str, Any], key: str, where: str, low: int, high: int, default: int) -> int:
    return integer(raw.get(key, default), f"{where}{key}", low, high)


def _mib(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidValue(where, f"expected a quantity such as '80Gi' or '81559Mi', got {value!r}")
    mib = canonical_amount(MEMORY, value, where) // _MIB
    if mib <= 0:
        raise InvalidValue(where, f"must be at least 1Mi, got {value!r}")
    return mib


def _profiles(raw: object, where: str) -> tuple[tuple[MigProfile, ...], int, int]:
    mig = _keys(raw, where.rstrip("."), _MIG)
    memory_slices = _int(mig, "memorySlices", where, 1, MEMORY_SLICES, MEMORY_SLICES)
    compute_slices = _int(mig, "computeSlices", where, 1, COMPUTE_SLICES, COMPUTE_SLICES)
    items = mig.get("profiles")
    if not isinstance(items, list) or not items:
        raise InvalidValue(f"{where}profiles", "is required (a non-empty list)")
    profiles: list[MigProfile] = []
    for number, item in enumerate(items):
        at = f"{where}profiles[{number}]."
        p = _keys(item, at.rstrip("."), _PROFILE)
        name = _text(p, "name", at).lower()
        match = _PROFILE_NAME.fullmatch(name)
        if match is None:
            raise InvalidValue(f"{at}name", f"{name!r} is not a MIG profile name such as 1g.10gb")
        if any(q.name == name for q in profiles):
            raise InvalidValue(f"{at}name", f"{name!r} is listed twice")
        compute = _int(p, "computeSlices", at, 1, compute_slices, int(match["compute"]))
        if compute != int(match["compute"]):
            raise InvalidValue(
                f"{at}computeSlices",
                f"{name} names {match['compute']} compute slices, not {compute}",
            )
        size = _int(p, "memorySlices", at, 1, memory_slices, 0)
        starts = p.get("placements")
        if (
            not isinstance(starts, list)
            or not starts
            or any(isinstance(s, bool) or not isinstance(s, int) for s in starts)
        ):
            raise InvalidValue(f"{at}placements", "is required: the start memory slices")
        for start in starts:
            if start < 0 or start + size > memory_slices:
                raise InvalidValue(
                    f"{at}placements",
                    f"start {start} with {size} memory slices leaves the GPU's {memory_slices}",
                )
        if "memory" not in p:
            raise InvalidValue(f"{at}memory", "is required (e.g. 24Gi)")
        media = p.get("mediaExtensions", name.endswith("+me"))
        if not isinstance(media, bool):
            raise InvalidValue(f"{at}mediaExtensions", f"must be true or false, got {media!r}")
        profiles.append(
            MigProfile(
                name=name,
                compute_slices=compute,
                memory_slices=size,
                memory_mib=_mib(p["memory"], f"{at}memory"),
                max_instances=_int(p, "maxInstances", at, 1, compute_slices, 0),
                placement_starts=tuple(sorted(set(starts))),
                placement_size=size,
                media_extensions=media,
            )
        )
    return tuple(profiles), memory_slices, compute_slices


def _model(raw: object, where: str) -> tuple[GpuModel, list[str]]:
    m = _keys(raw, "", _MODEL)
    name = _text(m, "name", "")
    if not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]*", name):
        raise InvalidValue("name", f"{name!r}: use letters, digits, '-', '_' and '.'")
    cc = (0, 0)
    if "computeCapability" in m:
        match = _CC.fullmatch(str(m["computeCapability"]).strip())
        if match is None:
            raise InvalidValue(
                "computeCapability", f"expected e.g. '9.0', got {m['computeCapability']!r}"
            )
        cc = (int(match[1]), int(match[2]))
    if "memory" not in m:
        raise InvalidValue("memory", "is required (e.g. 97887Mi, as nvidia-smi reports it)")
    if "mig" in m and "migLike" in m:
        raise InvalidValue("mig", "give mig or migLike, not both")
    profiles: tuple[MigProfile, ...] = ()
    slices = (MEMORY_SLICES, COMPUTE_SLICES)
    if "mig" in m:
        profiles, *totals = _profiles(m["mig"], "mig.")
        slices = (totals[0], totals[1])
    elif "migLike" in m:
        like = catalogue.CATALOGUE.get(str(m["migLike"]))
        if like is None or not like.mig_capable:
            capable = sorted(n for n, x in catalogue.CATALOGUE.items() if x.mig_capable)
            raise InvalidValue(
                "migLike",
                f"{m['migLike']!r} is no MIG-capable model (one of: {', '.join(capable)})",
            )
        profiles, slices = like.mig_profiles, (like.mig_memory_slices, like.mig_compute_slices)
    aliases = m.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise InvalidValue("aliases", "expected a list of names")
    model = GpuModel(
        name=name,
        memory_mib=_mib(m["memory"], "memory"),
        product=_text(m, "product", "", required=False) or f"NVIDIA-{name}",
        family=(_text(m, "family", "", required=False) or "unknown").lower(),
        compute_capability=cc,
        mig_profiles=profiles,
        form_factor=_text(m, "formFactor", "", required=False),
        mig_memory_slices=slices[0],
        mig_compute_slices=slices[1],
    )
    return model, [a.strip() for a in aliases]


def read_catalogue(path: str | PathLike[str]) -> tuple[list[GpuModel], dict[str, str]]:
    """The models and aliases of a catalogue file, validated (not yet added)."""
    path = Path(path)
    text = read_text(path)
    document = parse_json(text, path) if path.suffix.lower() == ".json" else parse_yaml(text, path)
    try:
        top = _keys(document, "", _TOP)
    except InvalidValue as exc:
        raise CatalogueFileError(path, exc.problem, field=exc.field) from None
    if top.get("apiVersion") != API_VERSION or top.get("kind") != KIND:
        raise CatalogueFileError(
            path,
            f"must be apiVersion {API_VERSION}, kind {KIND}; got "
            f"{top.get('apiVersion')!r}, {top.get('kind')!r}",
        )
    items = top.get("models")
    if not isinstance(items, list) or not items:
        raise CatalogueFileError(path, "expected a non-empty list of models", field="models")
    models: list[GpuModel] = []
    aliases: dict[str, str] = {}
    for number, item in enumerate(items):
        label = f"models[{number}]"
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            label = f"{label} ({item['name']})"
        try:
            model, names = _model(item, label)
        except InvalidValue as exc:
            raise CatalogueFileError(path, exc.problem, entry=label, field=exc.field) from None
        if any(m.name == model.name for m in models):
            raise CatalogueFileError(path, "listed twice", entry=label, field="name")
        models.append(model)
        aliases.update((alias, model.name) for alias in names)
    return models, aliases


def use_catalogue(path: str | PathLike[str]) -> list[GpuModel]:
    """Read the catalogue file and add its models; loading the same unchanged file again is a
    no-op. Raises :class:`CatalogueFileError` naming the file, model and field."""
    path = Path(path)
    models, aliases = read_catalogue(path)
    try:
        catalogue.extend(models, aliases)
    except ValueError as exc:
        raise CatalogueFileError(path, str(exc)) from None
    return models
