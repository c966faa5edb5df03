"""The Alibaba GPU cluster trace's node list (``openb_node_list_*.csv``).

Columns ``sn, cpu_milli, memory_mib, gpu, model``: one row per node. GPUs are whole (the trace
shares them by ``gpu_milli`` at scheduling time, not by partitioning), get UUIDs derived from the
node name and index so that two loads agree, and take the catalogue's model; the trace's own name
(``V100M32``, undisclosed ``G1``-``G3``) is kept in the node label :data:`SOURCE_MODEL_LABEL`.
"""

from __future__ import annotations

import csv
from os import PathLike
from pathlib import Path

from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Fleet, Node
from gpuaas.supply.catalogue import GpuModel, lookup
from gpuaas.supply.loaders._common import (
    HOSTNAME_LABEL,
    MAX_GPUS_PER_NODE,
    SOURCE_MODEL_LABEL,
    gpu_uuid,
    read_text,
)
from gpuaas.supply.loaders.errors import FleetFileError

COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_MIB = 2**20


def looks_like_openb(header: list[str]) -> bool:
    """True when a CSV header names the trace's columns (any order)."""
    return set(COLUMNS) <= {name.strip() for name in header}


def load_openb_nodes(path: str | PathLike[str]) -> Fleet:
    """Read a node list CSV; a bad row raises FleetFileError naming its line, node and column."""
    path = Path(path)
    text = read_text(path)
    return parse_openb_nodes(text, path)


def parse_openb_nodes(text: str, path: str | PathLike[str]) -> Fleet:
    """Parse node-list text; ``path`` is only used in error messages and ``Fleet.source``."""
    rows = csv.reader(text.splitlines())
    header = next(rows, None)
    if header is None:
        raise FleetFileError(path, "empty file; expected a header " + ",".join(COLUMNS))
    names = [name.strip() for name in header]
    missing = [name for name in COLUMNS if name not in names]
    unknown = [name for name in names if name not in COLUMNS]
    if missing or unknown:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if unknown:
            parts.append("unknown " + ", ".join(repr(name) for name in unknown))
        raise FleetFileError(
            path,
            f"{'; '.join(parts)} (expected columns {', '.join(COLUMNS)})",
            entry="line 1",
            field="header",
        )
    position = {name: names.index(name) for name in COLUMNS}
    models: dict[str, GpuModel] = {}
    seen: dict[str, int] = {}
    nodes: list[Node] = []
    for line, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            raise FleetFileError(
                path,
                f"expected {len(names)} columns, got {len(row)}",
                entry=f"line {line}",
            )
        name = row[position["sn"]].strip()
        entry = f"line {line} ({name})" if name else f"line {line}"
        if not name:
            raise FleetFileError(path, "must not be empty", entry=entry, field="sn")
        if name in seen:
            raise FleetFileError(
                path, f"duplicate node name, first on line {seen[name]}", entry=entry, field="sn"
            )
        seen[name] = line
        cpu_milli = _count(row[position["cpu_milli"]], path, entry, "cpu_milli")
        memory_mib = _count(row[position["memory_mib"]], path, entry, "memory_mib")
        gpu_count = _count(row[position["gpu"]], path, entry, "gpu")
        if gpu_count > MAX_GPUS_PER_NODE:
            raise FleetFileError(
                path,
                f"{gpu_count} GPUs on one node is implausible (at most {MAX_GPUS_PER_NODE})",
                entry=entry,
                field="gpu",
            )
        source_model = row[position["model"]].strip()
        labels = {HOSTNAME_LABEL: name}
        gpus: list[GPU] = []
        if gpu_count:
            if not source_model:
                raise FleetFileError(
                    path,
                    f"must name the GPU model of the node's {gpu_count} GPU(s)",
                    entry=entry,
                    field="model",
                )
            model = models.get(source_model)
            if model is None:
                model = models[source_model] = lookup(source_model)
            labels[SOURCE_MODEL_LABEL] = source_model
            whole = Partition.whole()
            gpus = [
                GPU(
                    index=index,
                    uuid=gpu_uuid(name, index),
                    model=model.name,
                    memory_mib=model.memory_mib,
                    partition=whole,
                )
                for index in range(gpu_count)
            ]
        nodes.append(
            Node(
                name=name,
                cpu_milli=cpu_milli,
                memory_bytes=memory_mib * _MIB,
                gpus=gpus,
                labels=labels,
            )
        )
    return Fleet(nodes=nodes, source=str(path))


def _count(cell: str, path: str | PathLike[str], entry: str, column: str) -> int:
    text = cell.strip()
    if not (text.isascii() and text.isdigit()):
        raise FleetFileError(
            path, f"must be a non-negative integer, got {cell!r}", entry=entry, field=column
        )
    return int(text)
