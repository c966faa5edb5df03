"""Reading a strict document: the mappings, lists and scalars of a YAML or JSON file.

Every loader of a document a person writes (a fleet inventory, Kubernetes Node objects, Kueue
objects, a GPU catalogue, an admission scenario, a synthetic trace, a spec file given to the
command line) reads its shape through these functions, so a wrong document is refused the same
way wherever it comes from: an :class:`~gpuaas.model.errors.InvalidValue` whose ``field`` is the
path to the value (``nodes[1].gpus.count``, built with :func:`at`) and whose problem says what
was expected and what was found (``expected a mapping, got a list``, ``unknown key 'cnt'
(allowed: model, count)``, ``must be at most 7, got 9``). A found value is shown by
its kind when it is a mapping or a list and as written (``repr``) otherwise, never by a Python
type name. A key given with no value (YAML's ``key:``, i.e. ``None``) reads as empty where the
field may be left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from gpuaas.model.errors import InvalidValue

#: How :func:`only` refuses a key by default.
UNKNOWN_KEY = "unknown key {key!r}"


def at(where: str, key: str | int) -> str:
    """The path of ``key`` inside ``where``: ``at("nodes", 1) == "nodes[1]"``,
    ``at("spec", "taints") == "spec.taints"``, ``at("", "kind") == "kind"``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def shown(value: object) -> str:
    """``value`` as an error message shows what was found."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _fail(where: str, problem: str) -> NoReturn:
    raise InvalidValue(where, problem)


def mapping(
    value: object,
    where: str,
    allowed: Iterable[str] | None = None,
    *,
    optional: bool = True,
    unknown: str = UNKNOWN_KEY,
) -> Mapping[str, Any]:
    """``value`` as a mapping (``None`` is empty when ``optional``), with no key outside
    ``allowed`` when that is given (see :func:`only`)."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        _fail(where, f"expected a mapping, got {shown(value)}")
    if allowed is not None:
        only(value, allowed, where, unknown=unknown)
    return value  # type: ignore[return-value]


def only(
    obj: Mapping[str, Any], allowed: Iterable[str], where: str, *, unknown: str = UNKNOWN_KEY
) -> None:
    """Refuse the first key of ``obj`` outside ``allowed``, at its own path, saying which keys
    are allowed; ``unknown`` words the refusal, ``{key!r}`` standing for the key (a Kueue field
    gpuaas does not support is not a typo)."""
    allowed = tuple(sorted(allowed) if isinstance(allowed, set | frozenset) else allowed)
    for key in obj:
        if key not in allowed:
            listed = ", ".join(allowed)
            _fail(at(where, str(key)), f"{unknown.format(key=str(key))} (allowed: {listed})")


def sequence(value: object, where: str, *, optional: bool = True) -> list[Any]:
    """``value`` as a list (``None`` is empty when ``optional``)."""
    if value is None and optional:
        return []
    if not isinstance(value, list):
        _fail(where, f"expected a list, got {shown(value)}")
    return value  # type: ignore[return-value]


def text(value: object, where: str, *, numbers: bool = False, strip: bool = True) -> str:
    """A non-empty string (``strip``: of more than white space, and returned stripped);
    ``numbers``: a YAML number is read as its text (``model: 4090``). Left out, it is required."""
    if value is None:
        _fail(where, "is required (a non-empty string)")
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not (value.strip() if strip else value):
        _fail(where, f"expected a non-empty string, got {shown(value)}")
    return value.strip() if strip else value


def _integers(low: int | None) -> str:
    if low is None:
        return "an integer"
    if low == 0:
        return "a non-negative integer"
    if low == 1:
        return "a positive integer"
    return f"an integer of at least {low}"


def integer(value: object, where: str, low: int | None = None, high: int | None = None) -> int:
    """An integer (never a bool or a float such as ``2.5``) of at least ``low`` and at most
    ``high`` (each bound its own message: ``must be a positive integer, got 0``, ``must be at
    most 128, got 200``)."""
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        _fail(where, f"must be {_integers(low)}, got {shown(value)}")
    if high is not None and value > high:
        _fail(where, f"must be at most {high}, got {value}")
    return value


def number(
    value: object, where: str, *, what: str = "a number", minimum: float | None = None
) -> float:
    """A finite number (an integer or a float, never a bool) of at least ``minimum``; ``what``
    names it in the message (``a number of seconds``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(where, f"expected {what}, got {shown(value)}")
    if minimum is not None and value < minimum:  # type: ignore[operator]
        _fail(where, f"must be at least {minimum:g}, got {shown(value)}")
    return float(value)  # type: ignore[arg-type]


def labels(value: object, where: str) -> dict[str, str]:
    """``{key: value}`` as text (``None`` is empty); a value may not be a mapping or a list."""
    out: dict[str, str] = {}
    for key, item in mapping(value, where).items():
        if isinstance(item, Mapping | list):
            _fail(at(where, str(key)), f"expected a string, got {shown(item)}")
        out[str(key)] = "" if item is None else str(item)
    return out
