"""A Slurm cluster's nodes as gpuaas inventory entries (``gpuaas nodes import --from slurm``).

Input: Slurm's node listing as slurmrestd's ``GET /slurm/v0.0.38/nodes`` or ``sinfo --json``
prints it (the same shape). Each node becomes one inventory entry (docs/inventory.md): its CPUs,
its memory (``real_memory``, MiB), its GPUs from the typed gres (``gpu:h100:8``,
``gpu:nvidia_h100_80gb_hbm3:4(S:0-1)``) with the raw type mapped to the catalogue's model
(:func:`gpuaas.supply.catalogue.lookup`: ``nvidia_h100_80gb_hbm3`` is ``H100-80GB``), and
labels: ``gpuaas.io/backend=slurm`` (the backend that runs its jobs),
``slurm.schedmd.com/partition=<first partition>`` plus ``slurm.schedmd.com/partition-<p>=true``
for every partition it is in, and ``slurm.schedmd.com/gres-type=<raw type>``. GPU UUIDs are the
inventory's own, derived from node name and index, so the same node gets the same UUIDs on
every import. A node with GPUs of two types, or untyped GPUs without a model to assume, is
refused with the node named: gpuaas models one GPU model per node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaas.backends.slurm.script import SlurmNode
from gpuaas.model.errors import InvalidValue
from gpuaas.supply.catalogue import lookup

#: the node label naming a node's backend (the same as gpuaas.service.backends.BACKEND_LABEL)
BACKEND_LABEL = "gpuaas.io/backend"
PARTITION_LABEL = "slurm.schedmd.com/partition"
GRES_TYPE_LABEL = "slurm.schedmd.com/gres-type"
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_GRES = re.compile(r"^gpu(?::([^:(]+))?:(\d+)")


def gpu_gres(gres: str) -> list[tuple[str | None, int]]:
    """``gpu:h100:8(S:0-1),shard:4`` -> [("h100", 8)]: the node's GPUs by type (None: untyped)."""
    found: list[tuple[str | None, int]] = []
    for item in _split(gres):
        match = _GRES.match(item.strip())
        if match and int(match.group(2)) > 0:
            found.append((match.group(1), int(match.group(2))))
    return found


def other_gres(gres: str) -> tuple[tuple[str, int], ...]:
    """``gpu:h100:8,nic:4,nic:ib:2(S:0)`` -> (("nic", 6),): the gres other than GPUs, by
    name, summed over types."""
    found: dict[str, int] = {}
    for item in _split(gres):
        parts = item.strip().split("(", 1)[0].split(":")
        if len(parts) < 2 or parts[0] == "gpu" or not parts[-1].isdigit():
            continue
        found[parts[0]] = found.get(parts[0], 0) + int(parts[-1])
    return tuple(sorted((name, n) for name, n in found.items() if n))


def _split(gres: str) -> list[str]:
    """Split on commas outside parentheses (``gpu:h100:8(S:0-1),gpu:a100:2``)."""
    items, depth, current = [], 0, ""
    for char in gres or "":
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [*items, current] if current else items


def _gpu_type(node: Mapping[str, Any], default_type: str | None) -> tuple[str | None, int]:
    gres = gpu_gres(str(node.get("gres") or ""))
    if not gres:
        return None, 0
    types = {t for t, _ in gres}
    if len(types) > 1:
        shown = ", ".join(f"{t or 'untyped'}:{n}" for t, n in gres)
        raise InvalidValue(f"nodes[{node.get('name')}].gres", f"GPUs of several types ({shown})")
    return types.pop() or default_type, sum(n for _, n in gres)


def slurm_nodes(listing: Mapping[str, Any]) -> dict[str, SlurmNode]:
    """What the backend needs of each node (address, partitions, GPU type and count)."""
    found: dict[str, SlurmNode] = {}
    for node in listing.get("nodes") or []:
        gres = gpu_gres(str(node.get("gres") or ""))
        name = str(node["name"])
        found[name] = SlurmNode(
            name=name,
            address=str(node.get("address") or node.get("hostname") or name),
            partitions=tuple(node.get("partitions") or ()),
            gres_type=gres[0][0] if gres else None,
            gpus=sum(n for _, n in gres),
            gres=other_gres(str(node.get("gres") or "")),
        )
    return found


def inventory_entries(
    listing: Mapping[str, Any],
    partitions: Iterable[str] | None = None,
    default_type: str | None = None,
) -> list[dict[str, Any]]:
    """One inventory entry per node of ``listing`` (only those in ``partitions`` when given);
    ``default_type`` names the model of untyped GPUs (``gpu:8``)."""
    wanted = set(partitions) if partitions else None
    entries: list[dict[str, Any]] = []
    for node in listing.get("nodes") or []:
        name = str(node.get("name") or "")
        node_partitions = [str(p) for p in node.get("partitions") or []]
        if wanted is not None and not wanted & set(node_partitions):
            continue
        gres_type, count = _gpu_type(node, default_type)
        labels = {BACKEND_LABEL: "slurm"}
        if node_partitions:
            labels[PARTITION_LABEL] = node_partitions[0]
        for partition in node_partitions:
            if _LABEL_NAME.fullmatch(f"partition-{partition}") and len(partition) <= 53:
                labels[f"{PARTITION_LABEL}-{partition}"] = "true"
        entry: dict[str, Any] = {
            "name": name,
            "cpu": str(int(node.get("cpus") or 0)),
            "memory": f"{int(node.get('real_memory') or 0)}Mi",
            "labels": labels,
        }
        if count:
            if gres_type is None:
                raise InvalidValue(
                    f"nodes[{name}].gres",
                    f"untyped GPUs ({node.get('gres')}): give the model with --gpu-model",
                )
            entry["gpus"] = {"model": lookup(gres_type).name, "count": count}
            if _LABEL_NAME.fullmatch(gres_type) and len(gres_type) <= 63:
                labels[GRES_TYPE_LABEL] = gres_type
        entries.append(entry)
    return entries


def fleet_document(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The inventory the API registers (``POST /v1/nodes``), all or nothing."""
    return {
        "apiVersion": "gpuaas.io/v1",
        "kind": "Fleet",
        "metadata": {"name": "slurm", "description": "imported from Slurm"},
        "nodes": entries,
    }
