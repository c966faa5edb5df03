"""The gpuaas YAML inventory (``apiVersion: gpuaas.io/v1``, ``kind: Fleet``).

The format is documented in ``docs/inventory.md``. In short: ``defaults`` apply to every node,
each entry of ``nodes`` is one node or, with ``count``, a group of identical nodes whose names and
topology come from patterns (``h100-{i:03}``, ``rack-{i/8}``), so that 64 H100 servers take a few
lines. Every key is checked: an unknown key is rejected by name, never dropped, and every error
names the file, the entry and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuaas.model.devices import GPU, Partition
from gpuaas.model.document import integer, mapping, sequence, shown
from gpuaas.model.document import text as document_text
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.network import Nic
from gpuaas.model.node import Fleet, Node, Taint, TaintEffect
from gpuaas.model.resources import CPU, MEMORY, MIG_PREFIX, NVIDIA_GPU, canonical_amount
from gpuaas.model.topology import Level, Topology
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.loaders._common import (
    HOSTNAME_LABEL,
    MAX_GPUS_PER_NODE,
    MAX_REPLICAS,
    SOURCE_MODEL_LABEL,
    gpu_uuid,
    label_key_problem,
    label_value_problem,
    node_name_problem,
    read_text,
)
from gpuaas.supply.loaders._yaml import parse_json, parse_yaml
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.nics import MAX_NICS_PER_NODE, NIC_KEYS, check_nics, read_nic
from gpuaas.supply.partition import partition_gpu

API_VERSION = "gpuaas.io/v1"
KIND = "Fleet"

_TOP_KEYS = ("apiVersion", "kind", "metadata", "defaults", "nodes")
_METADATA_KEYS = ("name", "description")
_SPEC_KEYS = (
    "cpu", "memory", "gpus", "topology", "labels", "taints", "resources", "nics", "telemetry",
)  # fmt: skip
_TELEMETRY_KEYS = ("dcgmExporter",)
_NODE_KEYS = ("name", "count", "start", *_SPEC_KEYS)
_GPU_KEYS = ("model", "count", "memory", "partitioning", "perGpu", "numaNodes", "pcieRoots")
#: A NIC entry: one NIC, or with ``count`` a run of NICs whose text fields may use ``{k}``.
_NIC_ENTRY_KEYS = (*NIC_KEYS, "count")
#: NIC fields that may hold ``{i}`` (node) and ``{k}`` (NIC) placeholders.
_NIC_PATTERN_KEYS = ("name", "pcieRoot", "numaNode", "rail", "fabric", "pciAddress")
_PER_GPU_KEYS = ("indices", "partitioning")
_TAINT_KEYS = ("key", "value", "effect")
#: Inventory topology key -> Topology field.
_TOPOLOGY_KEYS = {"zone": "zone", "block": "block", "rack": "rack", "nvlinkDomain": "nvlink_domain"}
_TOPOLOGY_LABELS = {
    "zone": Level.ZONE.value,
    "block": Level.BLOCK.value,
    "rack": Level.RACK.value,
    "nvlinkDomain": Level.NVLINK.value,
}
_MAX_NODES = 100_000
_MIB = 2**20

_TOPOLOGY_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.:]{0,61}[A-Za-z0-9])?$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PLACEHOLDER_BODY = re.compile(r"^(?P<var>[a-z])(?:/(?P<div>[1-9]\d*))?(?::(?P<pad>0?[1-9]\d?))?$")


def looks_like_inventory(document: object) -> bool:
    """True when a parsed document declares itself a gpuaas inventory."""
    return isinstance(document, Mapping) and (
        document.get("kind") == KIND or str(document.get("apiVersion", "")).startswith("gpuaas.io/")
    )


def load_inventory(path: str | PathLike[str]) -> Fleet:
    """Read a YAML (or JSON) inventory file into a Fleet; errors name file, entry and field."""
    path = Path(path)
    text = read_text(path)
    document = parse_json(text, path) if path.suffix.lower() == ".json" else parse_yaml(text, path)
    return inventory_from_document(document, path)


def inventory_from_document(document: object, path: str | PathLike[str]) -> Fleet:
    """Build a Fleet from an already parsed inventory; ``path`` names it in errors."""
    return _Reader(str(path)).read(document)


# --- name and label patterns --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pattern:
    """Text with ``{i}``, ``{i:03}``, ``{i/8}`` or ``{i/8:02}`` placeholders.

    For the k-th node of a group (k from 0) that starts at ``start``, ``{i}`` is ``start + k`` and
    ``{i/N}`` is ``start + k // N``: the number of the run of N nodes it falls in, counted the same
    way as the nodes. ``:0W`` pads with zeros to W digits.
    """

    text: str
    parts: tuple[str | tuple[str, int, int], ...]

    @property
    def has_index(self) -> bool:
        return any(not isinstance(part, str) and part[0] == "i" for part in self.parts)

    def expand(self, position: int, start: int, **others: int) -> str:
        """The text for the node at ``position`` of a group from ``start``; ``others`` give
        the other variables (``k``: a NIC's index, ``g``: a GPU's), counted from 0."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                variable, divisor, width = part
                value = start + position // divisor if variable == "i" else 0
                if variable != "i":
                    value = others[variable] // divisor
                out.append(str(value).zfill(width))
        return "".join(out)


def _pattern(text: str, variables: str = "i") -> _Pattern:
    """Parse ``text``'s placeholders; ``variables``: the letters it may use (``i`` the node)."""
    parts: list[str | tuple[str, int, int]] = []
    last = 0
    for match in _PLACEHOLDER.finditer(text):
        body = _PLACEHOLDER_BODY.fullmatch(match.group(1).replace(" ", ""))
        if body is None or body["var"] not in variables:
            forms = ", ".join(f"{{{v}}}, {{{v}:03}}, {{{v}/8}}" for v in variables)
            raise InvalidValue(
                "",
                f"unknown placeholder {match.group(0)!r} in {text!r} (use {forms} or {{i/8:02}})",
            )
        parts.append(text[last : match.start()])
        parts.append((body["var"], int(body["div"] or 1), int(body["pad"] or 0)))
        last = match.end()
    rest = text[last:]
    if "{" in rest or "}" in rest:
        raise InvalidValue("", f"unbalanced '{{' or '}}' in {text!r}")
    parts.append(rest)
    return _Pattern(text, tuple(part for part in parts if part != ""))


# --- parsed (not yet expanded) node specs -------------------------------------------------


@dataclass(slots=True)
class _GpuSpec:
    none: bool = False  # ``gpus: none``: no GPUs, whatever the defaults say
    model: str | None = None
    count: int | None = None
    memory_mib: int | None = None
    partitioning: Any = None
    has_partitioning: bool = False
    per_gpu: list[tuple[str, tuple[int, ...], Any]] | None = None
    numa_nodes: int | None = None
    pcie_roots: _Pattern | list[str] | None = None

    def merged(self, over: _GpuSpec) -> _GpuSpec:
        if over.none or self.none:
            return over
        return _GpuSpec(
            model=over.model if over.model is not None else self.model,
            count=over.count if over.count is not None else self.count,
            memory_mib=over.memory_mib if over.memory_mib is not None else self.memory_mib,
            partitioning=over.partitioning if over.has_partitioning else self.partitioning,
            has_partitioning=over.has_partitioning or self.has_partitioning,
            per_gpu=over.per_gpu if over.per_gpu is not None else self.per_gpu,
            numa_nodes=over.numa_nodes if over.numa_nodes is not None else self.numa_nodes,
            pcie_roots=over.pcie_roots if over.pcie_roots is not None else self.pcie_roots,
        )


@dataclass(slots=True)
class _Spec:
    cpu_milli: int | None = None
    memory_bytes: int | None = None
    gpus: _GpuSpec | None = None
    topology: dict[str, _Pattern] = field(default_factory=dict)
    labels: dict[str, _Pattern] = field(default_factory=dict)
    taints: list[Taint] | None = None
    resources: dict[str, int] = field(default_factory=dict)
    #: (where, raw NIC entry, patterns of its text fields), or None when not said
    nics: list[tuple[str, Mapping[str, Any], dict[str, _Pattern]]] | None = None
    #: telemetry.dcgmExporter: the node's dcgm-exporter URL (``{i}`` placeholders allowed)
    dcgm_exporter: _Pattern | None = None

    def merged(self, over: _Spec) -> _Spec:
        gpus = self.gpus
        if over.gpus is not None:
            gpus = over.gpus if gpus is None else gpus.merged(over.gpus)
        return _Spec(
            cpu_milli=over.cpu_milli if over.cpu_milli is not None else self.cpu_milli,
            memory_bytes=over.memory_bytes if over.memory_bytes is not None else self.memory_bytes,
            gpus=gpus,
            topology={**self.topology, **over.topology},
            labels={**self.labels, **over.labels},
            taints=over.taints if over.taints is not None else self.taints,
            resources={**self.resources, **over.resources},
            nics=over.nics if over.nics is not None else self.nics,
            dcgm_exporter=over.dcgm_exporter or self.dcgm_exporter,
        )


def _mapping(value: object, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    return mapping(value, where, allowed, optional=False)


def _text(value: object, where: str) -> str:
    """A string a person wrote; a YAML number is read as its text (``model: 4090``)."""
    return document_text(value, where, numbers=True)


def _positive_quantity(name: str, value: object, where: str) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidValue(
            where, f"expected a quantity such as '64' or '512Gi', got {shown(value)}"
        )
    amount = canonical_amount(name, value, where)
    if amount <= 0:
        raise InvalidValue(where, f"must be greater than zero, got {value!r}")
    return amount


def _with_pattern(value: object, where: str) -> _Pattern:
    try:
        return _pattern(_text(value, where))
    except InvalidValue as exc:
        raise InvalidValue(where, exc.problem) from None


def _partitioning(value: object, where: str) -> Any:
    """Normalise the inventory's partitioning forms to what ``partition_gpu`` takes."""
    if value is None or value == "whole":
        return None
    if isinstance(value, str):
        # Short forms: "all-1g.10gb", "mig:3g.40gb,2x2g.20gb", "time-slicing:4".
        return value.strip()
    if not isinstance(value, Mapping):
        raise InvalidValue(
            where,
            "expected 'whole', a MIG layout such as 'all-1g.10gb', {mig: LAYOUT}, "
            f"{{timeSlicing: {{replicas: N}}}} or {{mps: {{replicas: N}}}}, got {shown(value)}",
        )
    spec = _mapping(value, where, ("mig", "timeSlicing", "time-slicing", "mps"))
    if len(spec) != 1:
        raise InvalidValue(where, "give exactly one of mig, timeSlicing or mps")
    ((mode, body),) = spec.items()
    if mode == "mig":
        if isinstance(body, str):
            return {"mig": body.strip()}
        if not isinstance(body, Mapping) or not body:
            raise InvalidValue(
                f"{where}.mig",
                "expected a named layout such as 'all-1g.10gb' or a mapping of profile to count, "
                f"got {shown(body)}",
            )
        counts: dict[str, int] = {}
        for profile, count in body.items():
            counts[str(profile)] = integer(count, f"{where}.mig.{profile}", 0, 7)
        return {"mig": counts}
    body = _mapping(body, f"{where}.{mode}", ("replicas",))
    if "replicas" not in body:
        raise InvalidValue(f"{where}.{mode}.replicas", "is required")
    replicas = integer(body["replicas"], f"{where}.{mode}.replicas", 1, MAX_REPLICAS)
    return {"mps" if mode == "mps" else "time-slicing": {"replicas": replicas}}


def _indices(value: object, where: str) -> tuple[int, ...]:
    """``3``, ``[0, 1, 2]``, ``"0-3"`` or ``"0-1,6"`` to a tuple of GPU indices."""
    items: list[object] = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            if item < 0:
                raise InvalidValue(where, f"GPU index must not be negative, got {item}")
            if item >= MAX_GPUS_PER_NODE:
                raise InvalidValue(where, f"GPU index {item} is out of range")
            out.append(item)
            continue
        if not isinstance(item, str):
            raise InvalidValue(
                where, f"expected GPU indices such as 3, [0, 1] or '0-3', got {item!r}"
            )
        for chunk in item.split(","):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", chunk)
            if match is None:
                raise InvalidValue(
                    where, f"expected GPU indices such as '0-3' or '0,2', got {item!r}"
                )
            low, high = int(match[1]), int(match[2] or match[1])
            if high >= MAX_GPUS_PER_NODE:
                raise InvalidValue(where, f"GPU index {high} is out of range")
            if high < low:
                raise InvalidValue(where, f"range {chunk.strip()!r} runs backwards")
            out.extend(range(low, high + 1))
    if not out:
        raise InvalidValue(where, "must list at least one GPU index")
    return tuple(out)


def _gpus(value: object, where: str) -> _GpuSpec:
    if value is None or value == "none":
        return _GpuSpec(none=True)
    raw = _mapping(value, where, _GPU_KEYS)
    spec = _GpuSpec()
    if "model" in raw:
        spec.model = _text(raw["model"], f"{where}.model")
    if "count" in raw:
        spec.count = integer(raw["count"], f"{where}.count", 1, MAX_GPUS_PER_NODE)
    if "memory" in raw:
        spec.memory_mib = _positive_quantity(MEMORY, raw["memory"], f"{where}.memory") // _MIB
    if "partitioning" in raw:
        spec.partitioning = _partitioning(raw["partitioning"], f"{where}.partitioning")
        spec.has_partitioning = True
    if "numaNodes" in raw:
        spec.numa_nodes = integer(raw["numaNodes"], f"{where}.numaNodes", 1, MAX_GPUS_PER_NODE)
    if "pcieRoots" in raw:
        spec.pcie_roots = _pcie_roots(raw["pcieRoots"], f"{where}.pcieRoots")
    if "perGpu" in raw:
        items = sequence(raw["perGpu"], f"{where}.perGpu", optional=False)
        spec.per_gpu = []
        for number, item in enumerate(items):
            at = f"{where}.perGpu[{number}]"
            entry = _mapping(item, at, _PER_GPU_KEYS)
            for key in _PER_GPU_KEYS:
                if key not in entry:
                    raise InvalidValue(f"{at}.{key}", "is required")
            indices = _indices(entry["indices"], f"{at}.indices")
            spec.per_gpu.append(
                (at, indices, _partitioning(entry["partitioning"], f"{at}.partitioning"))
            )
    return spec


def _pcie_roots(value: object, where: str) -> _Pattern | list[str]:
    """The PCIe root of each GPU: a list by GPU index, or one pattern over ``{g}`` (the GPU's
    index from 0), e.g. ``pci-{g/2}`` for two GPUs per PCIe switch."""
    if isinstance(value, list):
        return [
            "" if item in ("", None) else _text(item, f"{where}[{n}]")  # "": not known
            for n, item in enumerate(value)
        ]
    try:
        return _pattern(_text(value, where), "g")
    except InvalidValue as exc:
        raise InvalidValue(where, exc.problem) from None


def _nics(value: object, where: str) -> list[tuple[str, Mapping[str, Any], dict[str, _Pattern]]]:
    """The node's NIC entries, their text fields' placeholders checked (expanded per node)."""
    if value is None or value == "none":
        return []
    out = []
    for number, item in enumerate(sequence(value, where, optional=False)):
        at_ = f"{where}[{number}]"
        entry = _mapping(item, at_, _NIC_ENTRY_KEYS)
        variables = "ik" if "count" in entry else "i"
        patterns = {}
        for key in _NIC_PATTERN_KEYS:
            if key in entry and isinstance(entry[key], str):
                try:
                    patterns[key] = _pattern(entry[key], variables)
                except InvalidValue as exc:
                    raise InvalidValue(f"{at_}.{key}", exc.problem) from None
        if "count" in entry:
            integer(entry["count"], f"{at_}.count", 1, MAX_NICS_PER_NODE)
            name = patterns.get("name")
            if name is None or not any(not isinstance(p, str) and p[0] == "k" for p in name.parts):
                raise InvalidValue(
                    f"{at_}.name", "a run of NICs (count) needs {k} in its name, e.g. mlx5_{k}"
                )
        out.append((at_, entry, patterns))
    return out


def _expand_nics(
    spec: list[tuple[str, Mapping[str, Any], dict[str, _Pattern]]], position: int, start: int
) -> list[Nic]:
    nics: list[Nic] = []
    for at_, entry, patterns in spec:
        for k in range(int(entry.get("count", 1))):
            raw = {key: value for key, value in entry.items() if key != "count"}
            for key, pattern in patterns.items():
                text = pattern.expand(position, start, k=k)
                raw[key] = int(text) if key == "numaNode" and text.isdigit() else text
            where = f"{at_}[{k}]" if "count" in entry else at_
            nics.append(read_nic(raw, where))
    check_nics(nics, "nics")
    return nics


def parse_taint(value: object, where: str) -> Taint:
    """A taint as a mapping (key, value, effect) or in kubectl's `key[=value]:Effect` form."""
    if isinstance(value, str):
        # kubectl's form: key[=value]:Effect
        head, colon, effect = value.rpartition(":")
        if not colon:
            raise InvalidValue(where, f"expected 'key=value:Effect', got {value!r}")
        key, _, text = head.partition("=")
        raw: Mapping[str, Any] = {"key": key, "value": text, "effect": effect}
    else:
        raw = _mapping(value, where, _TAINT_KEYS)
    if "key" not in raw:
        raise InvalidValue(f"{where}.key", "is required")
    key = _text(raw["key"], f"{where}.key")
    problem = label_key_problem(key)
    if problem:
        raise InvalidValue(f"{where}.key", problem)
    text = "" if raw.get("value") in (None, "") else _text(raw.get("value"), f"{where}.value")
    problem = label_value_problem(text)
    if problem:
        raise InvalidValue(f"{where}.value", problem)
    effect = raw.get("effect", TaintEffect.NO_SCHEDULE.value)
    try:
        return Taint(key=key, value=text, effect=TaintEffect(effect))
    except ValueError:
        raise InvalidValue(
            f"{where}.effect",
            f"must be one of {', '.join(e.value for e in TaintEffect)}, got {effect!r}",
        ) from None


def _spec(raw: Mapping[str, Any]) -> _Spec:
    spec = _Spec()
    if "cpu" in raw:
        spec.cpu_milli = _positive_quantity(CPU, raw["cpu"], "cpu")
    if "memory" in raw:
        spec.memory_bytes = _positive_quantity(MEMORY, raw["memory"], "memory")
    if "gpus" in raw:
        spec.gpus = _gpus(raw["gpus"], "gpus")
    if "topology" in raw:
        topology = _mapping(raw["topology"], "topology", tuple(_TOPOLOGY_KEYS))
        spec.topology = {
            key: _with_pattern(value, f"topology.{key}") for key, value in topology.items()
        }
    if "labels" in raw:
        for key, value in mapping(raw["labels"], "labels", optional=False).items():
            problem = label_key_problem(str(key)) if isinstance(key, str) else "must be a string"
            if problem:
                raise InvalidValue(f"labels.{key}", problem)
            if isinstance(value, Mapping | list) or value is None:
                raise InvalidValue(f"labels.{key}", f"expected a string, got {shown(value)}")
            text = str(value).lower() if isinstance(value, bool) else str(value)
            try:
                spec.labels[key] = _pattern(text)
            except InvalidValue as exc:
                raise InvalidValue(f"labels.{key}", exc.problem) from None
    if "taints" in raw:
        taints = sequence(raw["taints"], "taints", optional=False)
        spec.taints = [parse_taint(taint, f"taints[{n}]") for n, taint in enumerate(taints)]
    if "nics" in raw:
        spec.nics = _nics(raw["nics"], "nics")
    if "telemetry" in raw:
        telemetry = _mapping(raw["telemetry"], "telemetry", _TELEMETRY_KEYS)
        if telemetry.get("dcgmExporter") not in (None, ""):
            where = "telemetry.dcgmExporter"
            try:
                spec.dcgm_exporter = _pattern(_text(telemetry["dcgmExporter"], where))
            except InvalidValue as exc:
                raise InvalidValue(where, exc.problem) from None
    if "resources" in raw:
        for name, value in mapping(raw["resources"], "resources", optional=False).items():
            at = f"resources.{name}"
            if name in (CPU, MEMORY) or name == NVIDIA_GPU or str(name).startswith(MIG_PREFIX):
                raise InvalidValue(
                    at, f"{name} comes from cpu, memory and gpus; do not list it here"
                )
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise InvalidValue(at, f"expected a quantity, got {shown(value)}")
            spec.resources[str(name)] = canonical_amount(str(name), value, at)
    return spec


# --- the reader ---------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self._partitions: dict[tuple[str, str], Partition] = {}

    def fail(self, problem: str, entry: str = "", field: str = "") -> FleetFileError:
        return FleetFileError(self.path, problem, entry=entry, field=field)

    def guarded(self, entry: str, action: Callable[[], Any]) -> Any:
        """Run ``action``; turn the InvalidValue it raises into a FleetFileError for ``entry``."""
        try:
            return action()
        except FleetFileError:
            raise
        except InvalidValue as exc:
            raise self.fail(exc.problem, entry, exc.field) from None

    def read(self, document: object) -> Fleet:
        top = self.guarded("", lambda: _mapping(document, "", _TOP_KEYS))
        if top.get("apiVersion") != API_VERSION:
            raise self.fail(
                f"must be {API_VERSION!r}, got {top.get('apiVersion')!r}", field="apiVersion"
            )
        if top.get("kind") != KIND:
            raise self.fail(f"must be {KIND!r}, got {top.get('kind')!r}", field="kind")
        if "metadata" in top:
            metadata = self.guarded(
                "", lambda: _mapping(top["metadata"], "metadata", _METADATA_KEYS)
            )
            for key, value in metadata.items():
                self.guarded("", lambda k=key, v=value: _text(v, f"metadata.{k}"))
        defaults = _Spec()
        if "defaults" in top:
            raw = self.guarded("defaults", lambda: _mapping(top["defaults"], "", _SPEC_KEYS))
            defaults = self.guarded("defaults", lambda: _spec(raw))
        entries = top.get("nodes")
        if not isinstance(entries, list) or not entries:
            raise self.fail(
                f"expected a non-empty list of nodes, got {shown(entries)}", field="nodes"
            )
        nodes: list[Node] = []
        first_seen: dict[str, str] = {}
        for number, entry in enumerate(entries):
            for node in self.entry(number, entry, defaults):
                if node.name in first_seen:
                    raise self.fail(
                        f"duplicate node name, already defined by {first_seen[node.name]}",
                        f"nodes[{number}] ({node.name})",
                        "name",
                    )
                first_seen[node.name] = f"nodes[{number}]"
                nodes.append(node)
        return Fleet(nodes=nodes, source=self.path)

    def entry(self, number: int, raw_entry: object, defaults: _Spec) -> list[Node]:
        label = f"nodes[{number}]"
        if isinstance(raw_entry, Mapping) and isinstance(raw_entry.get("name"), str):
            label = f"nodes[{number}] ({raw_entry['name']})"
        raw = self.guarded(label, lambda: _mapping(raw_entry, "", _NODE_KEYS))
        if "name" not in raw:
            raise self.fail("is required", label, "name")
        name = self.guarded(label, lambda: _with_pattern(raw["name"], "name"))
        count = 1
        if "count" in raw:
            count = self.guarded(label, lambda: integer(raw["count"], "count", 1, _MAX_NODES))
        start = 1
        if "start" in raw:
            start = self.guarded(label, lambda: integer(raw["start"], "start", 0, 10**9))
        if count > 1 and not name.has_index:
            raise self.fail(
                f"a group of {count} nodes needs an index placeholder in its name, e.g. "
                f"'{name.text}-{{i:03}}'",
                label,
                "name",
            )
        if "count" not in raw and name.has_index:
            raise self.fail(
                f"{name.text!r} has an index placeholder; add count: N to make it a group",
                label,
                "name",
            )
        spec = defaults.merged(self.guarded(label, lambda: _spec(raw)))
        if spec.cpu_milli is None:
            raise self.fail("is required (here or in defaults)", label, "cpu")
        if spec.memory_bytes is None:
            raise self.fail("is required (here or in defaults)", label, "memory")
        gpus_template = self.guarded(label, lambda: self.gpus(spec.gpus))
        nodes = []
        for position in range(count):
            node_name = name.expand(position, start)
            entry = f"nodes[{number}] ({node_name})"
            problem = node_name_problem(node_name)
            if problem:
                raise self.fail(problem, entry, "name")
            nodes.append(
                self.guarded(
                    entry,
                    lambda n=node_name, p=position: self.node(n, p, start, spec, gpus_template),
                )
            )
        return nodes

    def gpus(self, spec: _GpuSpec | None) -> list[GPU]:
        """The GPUs of every node of an entry, with placeholder UUIDs (set per node)."""
        if spec is None or spec.none or (spec.count is None and spec.model is None):
            if spec is not None and spec.pcie_roots is not None and not spec.none:
                raise InvalidValue("gpus.pcieRoots", "given but no GPUs (add model and count)")
            if spec is not None and (spec.has_partitioning or spec.per_gpu):
                raise InvalidValue("gpus", "partitioning given but no GPUs (add model and count)")
            return []
        if spec.model is None:
            raise InvalidValue("gpus.model", "is required when the node has GPUs")
        if spec.count is None:
            raise InvalidValue("gpus.count", "is required when the node has GPUs")
        model = lookup(spec.model)
        memory_mib = spec.memory_mib if spec.memory_mib is not None else model.memory_mib
        numa_nodes = spec.numa_nodes or 1
        if numa_nodes > spec.count:
            raise InvalidValue(
                "gpus.numaNodes", f"must be at most the GPU count {spec.count}, got {numa_nodes}"
            )
        partitions = [self.partition(model.name, spec.partitioning, "gpus.partitioning")]
        partitions *= spec.count
        claimed: dict[int, str] = {}
        for at, indices, wanted in spec.per_gpu or []:
            for index in indices:
                if index >= spec.count:
                    raise InvalidValue(
                        f"{at}.indices",
                        f"GPU index {index} is out of range: the node has {spec.count} GPUs "
                        f"(indices 0-{spec.count - 1})",
                    )
                if index in claimed:
                    raise InvalidValue(
                        f"{at}.indices", f"GPU {index} is already partitioned by {claimed[index]}"
                    )
                claimed[index] = at
                partitions[index] = self.partition(model.name, wanted, f"{at}.partitioning")
        roots = [""] * spec.count
        if isinstance(spec.pcie_roots, list):
            if len(spec.pcie_roots) != spec.count:
                raise InvalidValue(
                    "gpus.pcieRoots",
                    f"lists {len(spec.pcie_roots)} PCIe roots for {spec.count} GPUs",
                )
            roots = list(spec.pcie_roots)
        elif spec.pcie_roots is not None:
            roots = [spec.pcie_roots.expand(0, 0, g=g) for g in range(spec.count)]
        for index, root in enumerate(roots):
            if root and not _TOPOLOGY_VALUE.fullmatch(root):
                raise InvalidValue(
                    f"gpus.pcieRoots[{index}]",
                    f"{root!r} is invalid (1-63 letters, digits, '-', '_', '.' or ':')",
                )
        return [
            GPU(
                index=index,
                uuid="",
                model=model.name,
                memory_mib=memory_mib,
                partition=partition,
                numa_node=index * numa_nodes // spec.count,
                pcie_root=roots[index],
            )
            for index, partition in enumerate(partitions)
        ]

    def partition(self, model: str, spec: Any, where: str) -> Partition:
        key = (model, json.dumps(spec, sort_keys=True))
        cached = self._partitions.get(key)
        if cached is None:
            try:
                cached = partition_gpu(model, spec)
            except GpuaasError as exc:
                problem = exc.problem if isinstance(exc, InvalidValue) else str(exc)
                raise InvalidValue(where, problem) from None
            self._partitions[key] = cached
        return cached

    def node(self, name: str, position: int, start: int, spec: _Spec, gpus: list[GPU]) -> Node:
        topology_values: dict[str, str] = {}
        labels: dict[str, str] = {}
        for key, pattern in spec.topology.items():
            value = pattern.expand(position, start)
            problem = label_value_problem(value)
            if problem:
                raise InvalidValue(f"topology.{key}", problem)
            topology_values[key] = value
        for key, pattern in spec.labels.items():
            value = pattern.expand(position, start)
            problem = label_value_problem(value)
            if problem:
                raise InvalidValue(f"labels.{key}", problem)
            labels[key] = value
        for key, value in topology_values.items():
            label = _TOPOLOGY_LABELS[key]
            if labels.get(label, value) != value:
                raise InvalidValue(
                    f"labels.{label}",
                    f"{labels[label]!r} contradicts topology.{key} {value!r}; set it in one place",
                )
            labels[label] = value
        if labels.get(HOSTNAME_LABEL, name) != name:
            raise InvalidValue(
                f"labels.{HOSTNAME_LABEL}",
                f"must be the node name {name!r}, got {labels[HOSTNAME_LABEL]!r}",
            )
        labels[HOSTNAME_LABEL] = name
        if gpus and spec.gpus is not None and spec.gpus.model is not None:
            labels.setdefault(SOURCE_MODEL_LABEL, _label_safe(spec.gpus.model))
        topology = Topology(**{_TOPOLOGY_KEYS[k]: v for k, v in topology_values.items()})
        nics = _expand_nics(spec.nics or [], position, start)
        for pool in dict.fromkeys(nic.pool for nic in nics):
            if pool in spec.resources:
                raise InvalidValue(
                    f"resources.{pool}", f"{pool} comes from nics; do not list it here"
                )
        exporter = "" if spec.dcgm_exporter is None else spec.dcgm_exporter.expand(position, start)
        problem = exporter_url_problem(exporter) if exporter else None
        if problem:
            raise InvalidValue("telemetry.dcgmExporter", problem)
        return Node(
            name=name,
            cpu_milli=spec.cpu_milli or 0,
            memory_bytes=spec.memory_bytes or 0,
            gpus=[replace(gpu, uuid=gpu_uuid(name, gpu.index)) for gpu in gpus],
            topology=topology,
            labels=labels,
            taints=list(spec.taints or []),
            extra=dict(spec.resources),
            nics=nics,
            dcgm_exporter=exporter,
        )


def exporter_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a dcgm-exporter's metrics URL (None: it can)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {url!r}"
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return f"has a bad port: {url!r}"
    return None


def _label_safe(text: str) -> str:
    """``text`` made into a label value (spaces and other characters become '-')."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:63].strip("-_.")
    return value
