"""Fleet loaders: a YAML inventory, the Alibaba trace's node list, or Kubernetes Node objects.

:func:`load_fleet` picks the loader from the file's extension and content, so every command takes
any of the three; :func:`fleet_from_text` does the same for text received over the API, and
:func:`entries_from_text` gives the inventory entries the service stores (the server parses what
``gpuaas nodes register`` and the SDK send, so they accept exactly what ``fleet show`` reads).
Every problem is a :class:`FleetFileError` naming the file, entry and field.
"""

from __future__ import annotations

import csv
from os import PathLike
from pathlib import Path
from typing import Any

from gpuaas.model.node import Fleet
from gpuaas.supply.loaders._common import SOURCE_MODEL_LABEL, gpu_uuid, read_text
from gpuaas.supply.loaders._yaml import parse_json, parse_yaml
from gpuaas.supply.loaders.entries import fleet_entries, nodes_entries
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.loaders.inventory import (
    inventory_from_document,
    load_inventory,
    looks_like_inventory,
)
from gpuaas.supply.loaders.kubernetes import (
    load_kubernetes_nodes,
    looks_like_kubernetes,
    nodes_from_document,
)
from gpuaas.supply.loaders.openb import COLUMNS, load_openb_nodes, parse_openb_nodes

__all__ = [
    "SOURCE_MODEL_LABEL",
    "FleetFileError",
    "entries_from_text",
    "fleet_from_text",
    "gpu_uuid",
    "load_demo_fleet",
    "load_fleet",
    "load_inventory",
    "load_kubernetes_nodes",
    "load_openb_nodes",
    "parse_fleet_text",
]


def load_fleet(path: str | PathLike[str]) -> Fleet:
    """Load any supported fleet file.

    ``.csv`` is the trace's node list; ``.yaml``/``.yml``/``.json`` (or no known extension) is read
    and recognised by content: ``kind: Fleet`` (``apiVersion: gpuaas.io/v1``) is an inventory,
    ``kind: Node``/``NodeList``/``List`` is ``kubectl get nodes`` output.
    """
    path = Path(path)
    return fleet_from_text(read_text(path), path)


def parse_fleet_text(text: str, source: str | PathLike[str]) -> object:
    """The CSV node list as a Fleet, else the parsed YAML/JSON document (by ``source``'s suffix
    and the content), not yet checked as a fleet."""
    suffix = Path(source).suffix.lower()
    if suffix == ".csv":
        return parse_openb_nodes(text, source)
    if suffix not in (".yaml", ".yml", ".json"):
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        header = next(csv.reader([first]), [])
        if "sn" in (cell.strip() for cell in header) and "," in first:
            return parse_openb_nodes(text, source)
    return parse_json(text, source) if suffix == ".json" else parse_yaml(text, source)


def entries_from_text(
    text: str, source: str | PathLike[str]
) -> tuple[list[Any], dict[str, Any] | None]:
    """(inventory entries, defaults) of a fleet file's text; ``source`` (its name) picks the
    format by extension as :func:`load_fleet` does, and names it in errors."""
    document = parse_fleet_text(text, source)
    if isinstance(document, Fleet):
        return nodes_entries(document.nodes, source), None
    return fleet_entries(document, source)


def fleet_from_text(text: str, source: str | PathLike[str]) -> Fleet:
    """A fleet file's text as a Fleet (see :func:`load_fleet`); ``source`` is its name."""
    path = source
    document = parse_fleet_text(text, source)
    if isinstance(document, Fleet):
        return document
    if looks_like_inventory(document):
        return inventory_from_document(document, path)
    if looks_like_kubernetes(document):
        return nodes_from_document(document, path)
    kind = document.get("kind") if isinstance(document, dict) else None
    raise FleetFileError(
        path,
        "not a fleet file: expected a gpuaas inventory (apiVersion: gpuaas.io/v1, kind: Fleet), "
        "kubectl get nodes output (kind: Node, NodeList or List), or a CSV node list with "
        f"columns {', '.join(COLUMNS)}" + (f"; got kind {kind!r}" if kind else ""),
    )


DEMO_FLEET = "data/demo-fleet.yaml"


def load_demo_fleet() -> Fleet:
    """The demo fleet shipped with the package (H100 training racks, A100 MIG, L40S shared)."""
    from importlib import resources

    source = resources.files("gpuaas.supply").joinpath(DEMO_FLEET)
    with resources.as_file(source) as path:
        fleet = load_fleet(path)
    fleet.source = "gpuaas/supply/" + DEMO_FLEET
    return fleet
