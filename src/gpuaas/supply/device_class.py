"""DeviceClasses: select devices with CEL expressions, in Kubernetes DRA's form.

A selector sees one variable, ``device``, with ``driver``, ``attributes[<domain>]`` and
``capacity[<domain>]`` exactly as a DRA DeviceClass or ResourceClaim selector does::

    device.driver == "gpu.nvidia.com"
    device.attributes["gpu.nvidia.com"].productName == "H100-80GB"
    device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0
    "profile" in device.attributes["gpu.nvidia.com"]

Expressions are evaluated by the ``cel-python`` library (``celpy``), with Kubernetes' quantity
library registered (``quantity()``, ``isQuantity()``, ``compareTo``, ``isGreaterThan``,
``isLessThan``, ``add``, ``sub``, ``asInteger``, ``asApproximateFloat``, ``isInteger``, ``sign``)
over :class:`gpuaas.model.quantity.Quantity`. Each expression is compiled once and cached; it is
also tried on sample devices at compile time so that type errors and non-boolean results are
reported when the class is defined, not when a job is scheduled.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache, lru_cache
from typing import Any

import celpy
from celpy import celtypes

from gpuaas.model.devices import Device
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import GPU_DRIVER
from gpuaas.supply.devices import ATTRIBUTE_NAMES, CAPACITY_NAMES
from gpuaas.supply.nics import NIC_ATTRIBUTE_NAMES, NIC_CAPACITY_NAMES, NIC_DRIVER

#: Attribute / capacity names known per domain, for compile-time checks.
KNOWN_ATTRIBUTES: dict[str, frozenset[str]] = {
    GPU_DRIVER: ATTRIBUTE_NAMES,
    NIC_DRIVER: NIC_ATTRIBUTE_NAMES,
    # Kubernetes' own standard attributes (KEP-4381), which drivers may publish too.
    "resource.kubernetes.io": frozenset({"pcieRoot"}),
}
KNOWN_CAPACITY: dict[str, frozenset[str]] = {
    GPU_DRIVER: CAPACITY_NAMES,
    NIC_DRIVER: NIC_CAPACITY_NAMES,
}


class DeviceClassError(GpuaasError):
    """A selector is malformed, names an unknown attribute, or does not yield a bool."""


class _CelFailure(Exception):
    """A quantity function was misused; carried out of CEL as an evaluation error."""


def _q(value: Any) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise TypeError(f"expected a quantity, got bool {value}")
    if isinstance(value, int):
        return Quantity(Fraction(int(value)))
    raise TypeError(f"expected a quantity, got {type(value).__name__}")


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, got {type(text).__name__}")
    try:
        return Quantity.parse(str(text), "quantity()")
    except InvalidValue as error:
        raise _CelFailure(str(error)) from None


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        Quantity.parse(str(text))
    except InvalidValue:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_q(a).compare_to(_q(b)))


def _greater(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a).compare_to(_q(b)) > 0)


def _less(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a).compare_to(_q(b)) < 0)


def _add(a: Any, b: Any) -> Quantity:
    return _q(a) + _q(b)


def _sub(a: Any, b: Any) -> Quantity:
    return _q(a) - _q(b)


def _as_integer(a: Any) -> celtypes.IntType:
    amount = _q(a).amount
    if amount.denominator != 1:
        raise _CelFailure(f"asInteger: {_q(a)} is not a whole number")
    return celtypes.IntType(amount.numerator)


def _as_float(a: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_q(a).amount))


def _is_integer(a: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a).amount.denominator == 1)


def _sign(a: Any) -> celtypes.IntType:
    amount = _q(a).amount
    return celtypes.IntType((amount > 0) - (amount < 0))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "add": _add,
    "sub": _sub,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "isInteger": _is_integer,
    "sign": _sign,
}


@functools.cache
def _environment() -> celpy.Environment:
    """The CEL environment; built on first use because building its parser takes ~0.3 s."""
    return celpy.Environment()


#: Distinct read patterns remembered per selector (selectors on UUIDs would never repeat).
_MEMO_SIZE = 64
# device.attributes["domain"].name, device.attributes["domain"]["name"] (same for capacity).
_ACCESS = re.compile(
    r"\b(?P<kind>attributes|capacity)\s*\[\s*(?P<q>[\"'])(?P<domain>[^\"']*)(?P=q)\s*\]"
    r"\s*(?:\.\s*(?P<dot>[A-Za-z_][A-Za-z0-9_]*)(?!\s*\()|\[\s*[\"'](?P<idx>[^\"']*)[\"']\s*\])?"
)


def _cel_value(value: str | int | bool | Quantity) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, Quantity):
        return value
    return celtypes.StringType(str(value))


def _raw_by_domain(
    values: Mapping[str, Any], driver: str, known: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """Group ``name`` / ``domain/name`` keys by domain; bare names belong to the driver. Every
    ``known`` domain is there, maybe empty, so that a GPU selector read on a NIC (or the other
    way round) finds the attribute missing, and the device does not match."""
    domains: dict[str, dict[str, Any]] = {domain: {} for domain in known}
    for key, value in values.items():
        domain, _, name = key.rpartition("/")
        domains.setdefault(domain or driver, {})[name] = value
    return domains


def _raw(device: Device) -> dict[str, Any]:
    """The activation as plain Python data (what :func:`device_activation` wraps for CEL)."""
    return {
        "device": {
            "driver": device.driver,
            "attributes": _raw_by_domain(device.attributes, device.driver, KNOWN_ATTRIBUTES),
            "capacity": _raw_by_domain(device.capacity, device.driver, KNOWN_CAPACITY),
        }
    }


_KINDS = ("attributes", "capacity")
_MISSING = ("missing",)
_MAP = ("map",)


def _tag(value: Any) -> Any:
    """What an observation of ``value`` saw, comparable between CEL and plain values."""
    if isinstance(value, Mapping):
        return _MAP
    if isinstance(value, bool | celtypes.BoolType):
        return ("bool", bool(value))
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, Quantity):
        return ("quantity", value)
    return ("string", str(value))


class _Tracked(celtypes.MapType):
    """A CEL map that logs every read, so that a result can be reused for a device that would
    give the same reads (evaluation is deterministic in what it reads)."""

    def __init__(self, items: Mapping[Any, Any], path: tuple[str, ...], log: list[Any]) -> None:
        super().__init__(items)
        self._path = path
        self._log = log

    def __getitem__(self, key: Any) -> Any:
        try:
            value = super().__getitem__(key)
        except KeyError:
            self._log.append(("get", self._path, str(key), _MISSING))
            raise
        self._log.append(("get", self._path, str(key), _tag(value)))
        return value

    def __contains__(self, key: object) -> bool:
        self._log.append(("keys", self._path, frozenset(str(k) for k in dict.keys(self))))
        return dict.__contains__(self, key)

    def __iter__(self) -> Any:
        self._log.append(("keys", self._path, frozenset(str(k) for k in dict.keys(self))))
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._log.append(("keys", self._path, frozenset(str(k) for k in dict.keys(self))))
        return dict.__len__(self)

    def _opaque(self) -> None:
        self._log.append(("opaque",))

    def keys(self) -> Any:  # type: ignore[override]
        self._opaque()
        return dict.keys(self)

    def values(self) -> Any:  # type: ignore[override]
        self._opaque()
        return dict.values(self)

    def items(self) -> Any:  # type: ignore[override]
        self._opaque()
        return dict.items(self)

    def get(self, key: Any, default: Any = None) -> Any:
        self._opaque()
        return dict.get(self, key, default)

    def __eq__(self, other: Any) -> bool:
        self._opaque()
        return super().__eq__(other)

    def __ne__(self, other: Any) -> bool:
        self._opaque()
        return super().__ne__(other)

    __hash__ = None  # type: ignore[assignment]


def _tracked(value: Any, path: tuple[str, ...], log: list[Any]) -> Any:
    if isinstance(value, Mapping):
        return _Tracked(
            {celtypes.StringType(k): _tracked(v, (*path, str(k)), log) for k, v in value.items()},
            path,
            log,
        )
    return _cel_value(value)


def _replays(log: tuple[Any, ...], raw: Mapping[str, Any]) -> bool:
    """Would ``raw`` give every observation in ``log``?"""
    for entry in log:
        node: Any = raw
        for key in entry[1]:
            node = node[key]
        if entry[0] == "get":
            seen = _tag(node[entry[2]]) if entry[2] in node else _MISSING
            if seen != entry[3]:
                return False
        elif frozenset(node) != entry[2]:
            return False
    return True


def device_activation(device: Device) -> dict[str, Any]:
    """The CEL variables a selector sees for ``device`` (for evaluating CEL elsewhere)."""
    return {"device": _tracked(_raw(device)["device"], ("device",), [])}


def _is_missing(error: BaseException) -> bool:
    """A lookup of an attribute this particular device lacks (not a typo: those fail earlier)."""
    args = getattr(error, "args", ())
    return (
        len(args) >= 2
        and args[1] is KeyError
        and isinstance(args[0], str)
        and (args[0].startswith("no such member") or args[0].startswith("no such key"))
    )


def _describe(error: BaseException) -> str:
    args = getattr(error, "args", ())
    message = str(args[0]) if args else str(error)
    if message.startswith("undeclared reference"):
        name = re.search(r"undeclared reference to '?([^' ]+)'?", message)
        return f"unknown name {name[1] if name else '?'} (only 'device' is defined)"
    cause = args[2] if len(args) >= 3 else None
    if message == "return error for overflow" and cause:
        return str(cause[0]) if isinstance(cause, tuple) and cause else str(cause)
    if message == "no such overload" and cause:
        detail = cause[0] if isinstance(cause, tuple) and cause else cause
        return f"no such overload ({detail})"
    operands = re.search(
        r"no matching overload for .*?'(\w+)'\) applied to '\(<class '[\w.]*?(\w+)'>, "
        r"<class '[\w.]*?(\w+)'>\)'",
        message,
    )
    if operands:
        op = _OPERATORS.get(operands[1], operands[1])
        left, right = (_type_name(operands[2]), _type_name(operands[3]))
        message = f"cannot apply {op} to {left} and {right}"
    where = ""
    if getattr(error, "line", None) is not None:
        where = f" at line {error.line}, column {error.column}"  # type: ignore[attr-defined]
    return message + where


_OPERATORS = {
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
}


def _type_name(cls_name: str) -> str:
    return "quantity" if cls_name == "Quantity" else cls_name.removesuffix("Type").lower()


@dataclass(frozen=True)
class CompiledSelector:
    """One compiled CEL selector; call :meth:`matches` per device."""

    expression: str
    program: Any
    #: the attribute / capacity domains the expression reads: a device publishing nothing in
    #: any of them (a NIC for a GPU selector) does not match, whatever the expression says
    domains: frozenset[str] = frozenset()
    #: (reads, result) pairs: a device that reads the same gets the same result.
    memo: list[tuple[tuple[Any, ...], bool]] = field(default_factory=list, compare=False)

    def evaluate(self, device: Device) -> bool:
        """True/False for ``device``; a device lacking a looked-up attribute does not match."""
        raw = _raw(device)
        if self.domains and not any(
            raw["device"][kind].get(domain) for domain in self.domains for kind in _KINDS
        ):
            return False
        for reads, known in self.memo:
            if _replays(reads, raw):
                return known
        log: list[Any] = []
        result = self._run(device, {"device": _tracked(raw["device"], ("device",), log)})
        if ("opaque",) not in log and len(self.memo) < _MEMO_SIZE:
            self.memo.append((tuple(dict.fromkeys(log)), result))
        return result

    def _run(self, device: Device, activation: dict[str, Any]) -> bool:
        try:
            result = self.program.evaluate(activation)
        except celpy.CELEvalError as error:
            if _is_missing(error):
                return False
            raise DeviceClassError(
                f"selector {self.expression!r} failed on device {device.name}: {_describe(error)}"
            ) from None
        except _CelFailure as error:
            raise DeviceClassError(
                f"selector {self.expression!r} failed on device {device.name}: {error}"
            ) from None
        if isinstance(result, celpy.CELEvalError):
            if _is_missing(result):
                return False
            raise DeviceClassError(
                f"selector {self.expression!r} failed on device {device.name}: {_describe(result)}"
            )
        if not isinstance(result, celtypes.BoolType | bool):
            raise DeviceClassError(
                f"selector {self.expression!r} must evaluate to a bool, "
                f"got {_cel_type(result)} ({result})"
            )
        return bool(result)

    matches = evaluate


def _cel_type(value: Any) -> str:
    if isinstance(value, Quantity):
        return "quantity"
    name = type(value).__name__
    return name.removesuffix("Type").lower() or name


def _check_names(expression: str) -> None:
    for match in _ACCESS.finditer(expression):
        kind, domain = match["kind"], match["domain"]
        table = KNOWN_ATTRIBUTES if kind == "attributes" else KNOWN_CAPACITY
        known = table.get(domain)
        if known is None:
            raise DeviceClassError(
                f"selector {expression!r}: unknown {kind} domain {domain!r} "
                f"(known: {', '.join(sorted(table))})"
            )
        name = match["dot"] or match["idx"]
        if name and name not in known:
            raise DeviceClassError(
                f"selector {expression!r}: unknown {kind[:-1] if kind == 'attributes' else kind} "
                f"{domain}/{name} at column {match.start('dot' if match['dot'] else 'idx') + 1}; "
                f"known: {', '.join(sorted(known))}"
            )


@cache
def _samples() -> tuple[Device, ...]:
    """One device of each kind carrying every attribute, for compile-time dry runs."""
    from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
    from gpuaas.model.network import Nic
    from gpuaas.model.node import Node
    from gpuaas.model.topology import Topology
    from gpuaas.supply.devices import publish_devices
    from gpuaas.supply.nics import nic_devices

    mig = Partition(
        mode=PartitionMode.MIG,
        instances=(MigInstance(start=0, size=1, profile="1g.10gb", compute_slices=1),),
        config="custom",
    )
    node = Node(
        name="sample",
        cpu_milli=1000,
        memory_bytes=2**30,
        gpus=[
            GPU(0, "GPU-sample-0", "H100-80GB", 81559, pcie_root="pci0000:15"),
            GPU(1, "GPU-sample-1", "H100-80GB", 81559, partition=mig),
            GPU(2, "GPU-sample-2", "H100-80GB", 81559, partition=Partition.time_sliced(2)),
        ],
        topology=Topology(nvlink_domain="sample"),
        labels={"gpuaas.io/driver-version": "550.0"},
        nics=[
            Nic(
                "mlx5_0",
                "nvidia.com/rdma_ib",
                speed_gbps=400,
                vfs=8,
                pcie_root="pci0000:15",
                numa_node=0,
                rail="rail-0",
                fabric="ib-a",
                pci_address="0000:17:00.0",
            )
        ],
    )
    return (*publish_devices(node)[:3], *nic_devices(node))


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile (once; cached) and check a CEL selector.

    Raises :class:`DeviceClassError` for a syntax error (with line and column), an unknown
    attribute or capacity name, an unknown variable, a type error, or a non-bool result.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise DeviceClassError("selector must be a non-empty CEL expression")
    try:
        ast = _environment().compile(expression)
    except celpy.CELParseError as error:
        detail = str(error.args[0]) if error.args else str(error)
        raise DeviceClassError(
            f"selector {expression!r}: syntax error at line {error.line}, column {error.column}"
            f"\n{detail}"
        ) from None
    _check_names(expression)
    domains = frozenset(match["domain"] for match in _ACCESS.finditer(expression))
    program = _environment().program(ast, functions=FUNCTIONS)
    compiled = CompiledSelector(expression, program, domains=domains)
    for sample in _samples():
        try:
            compiled.evaluate(sample)
        except DeviceClassError as error:
            message = str(error).replace(f" on device {sample.name}", "")
            raise DeviceClassError(message) from None
    return compiled


@dataclass(frozen=True)
class DeviceClass:
    """A named set of CEL selectors; a device belongs when all of them are true."""

    name: str
    selectors: tuple[str, ...] = ()
    driver: str = ""  # optional shortcut for device.driver == driver

    def __post_init__(self) -> None:
        if isinstance(self.selectors, str):
            object.__setattr__(self, "selectors", (self.selectors,))
        for expression in self.selectors:
            try:
                compile_selector(expression)
            except DeviceClassError as error:
                raise DeviceClassError(f"DeviceClass {self.name}: {error}") from None

    def matches(self, device: Device) -> bool:
        if self.driver and device.driver != self.driver:
            return False
        try:
            return all(compile_selector(e).matches(device) for e in self.selectors)
        except DeviceClassError as error:
            raise DeviceClassError(f"DeviceClass {self.name}: {error}") from None

    def select(self, devices: Iterable[Device]) -> list[Device]:
        return [d for d in devices if self.matches(d)]

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> DeviceClass:
        """A ``resource.k8s.io/v1`` DeviceClass object (``spec.selectors[].cel.expression``)."""
        name = str((manifest.get("metadata") or {}).get("name", ""))
        if not name:
            raise DeviceClassError("DeviceClass: metadata.name is required")
        selectors = []
        for i, entry in enumerate((manifest.get("spec") or {}).get("selectors") or []):
            expression = (
                (entry.get("cel") or {}).get("expression") if isinstance(entry, Mapping) else None
            )
            if not isinstance(expression, str):
                raise DeviceClassError(
                    f"DeviceClass {name}: spec.selectors[{i}].cel.expression is required"
                )
            selectors.append(expression)
        return cls(name=name, selectors=tuple(selectors))

    def manifest(self) -> dict[str, Any]:
        """This class as a ``resource.k8s.io/v1`` DeviceClass object."""
        selectors = list(self.selectors)
        if self.driver:
            selectors.insert(0, f'device.driver == "{self.driver}"')
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": self.name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]},
        }
