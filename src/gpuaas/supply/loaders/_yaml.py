"""YAML and JSON reading that turns every parse problem into a FleetFileError with a line number.

PyYAML silently keeps the last of two equal keys; an inventory that says ``count`` twice is a
mistake, so duplicate keys are rejected here.
"""

from __future__ import annotations

import json
from os import PathLike
from typing import Any

import yaml

from gpuaas.supply.loaders.errors import FleetFileError

_Base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Base):  # type: ignore[misc, valid-type]
    """Safe loader that refuses duplicate mapping keys."""


def _construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, path: str | PathLike[str]) -> Any:
    """Parse one YAML document; errors name the file and the line."""
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise FleetFileError(path, f"not valid YAML: {problem}", entry=where) from None
    except yaml.YAMLError as exc:
        raise FleetFileError(path, f"not valid YAML: {exc}") from None
    if not documents:
        raise FleetFileError(path, "empty file: no YAML document")
    if len(documents) > 1:
        raise FleetFileError(
            path, f"holds {len(documents)} YAML documents; a fleet file holds exactly one"
        )
    return documents[0]


def parse_json(text: str, path: str | PathLike[str]) -> Any:
    """Parse JSON; errors name the file and the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FleetFileError(
            path, f"not valid JSON: {exc.msg}", entry=f"line {exc.lineno}, column {exc.colno}"
        ) from None
