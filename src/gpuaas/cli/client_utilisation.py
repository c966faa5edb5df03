"""``gpuaas utilization node|job|cluster``: GPU utilisation over the rolling window
(docs/telemetry.md), one row per device or node, ``unknown`` where the telemetry is stale."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer

from gpuaas.cli.client import (
    Column,
    JsonOption,
    TenantOption,
    connect,
    field,
    group,
    handles_errors,
    print_json,
    resolve_tenant,
    show_table,
)

utilization_app = group(
    "utilization", "GPU utilisation over the rolling window: of a node, a job, a cluster."
)


def percent(window: Any) -> str:
    """``73.2%``, ``unknown`` (stale telemetry: not idle), ``-`` (no telemetry)."""
    if not isinstance(window, Mapping):
        return "-"
    if not window.get("known"):
        return "unknown"
    return f"{window['utilization']:.1f}%"


def _peak(window: Any) -> str:
    return f"{window['peak']:.1f}%" if isinstance(window, Mapping) and window.get("known") else "-"


def _memory(item: Mapping[str, Any]) -> str:
    window = item.get("window")
    used = window.get("memoryUsedBytes") if isinstance(window, Mapping) else None
    total = item.get("memoryTotalBytes")
    if used is None:
        return "-"
    gib = used / 2**30
    return f"{gib:.1f}/{total / 2**30:.0f} GiB" if total else f"{gib:.1f} GiB"


def _source(name: Any) -> str:
    """The field a reading came from, short: ``GR_ENGINE_ACTIVE``, ``GPU_UTIL``, ``synthetic``."""
    return str(name or "-").removeprefix("DCGM_FI_PROF_").removeprefix("DCGM_FI_DEV_")


DEVICE_COLUMNS: list[Column] = [
    ("DEVICE", field("device")),
    ("UTIL", lambda d: percent(d.get("window"))),
    ("PEAK", lambda d: _peak(d.get("window"))),
    ("MEMORY", _memory),
    ("SAMPLES", lambda d: str((d.get("window") or {}).get("samples", "-"))),
]


def _headline(what: str, body: Mapping[str, Any]) -> None:
    window = body.get("window")
    seconds = body.get("windowSeconds")
    typer.echo(f"{what}: {percent(window)} over the last {seconds:g}s"
               + (f" (peak {_peak(window)})" if isinstance(window, Mapping)
                  and window.get("known") else ""))  # fmt: skip


@utilization_app.command("node")
@handles_errors
def utilization_node(name: str, as_json: JsonOption = False) -> None:
    """A node's devices, the jobs on each, and why its telemetry is missing (platform)."""
    with connect() as client:
        body = client.node_utilization(name)
    if as_json:
        print_json(body)
        return
    _headline(f"node {name}", body)
    if body.get("dcgmExporter"):
        typer.echo(f"dcgm-exporter: {body['dcgmExporter']}")
    condition = body.get("condition")
    if condition:
        typer.echo(f"telemetry: {condition['reason']['code']}: {condition['reason']['message']}")
    jobs: list[Column] = [("JOBS", lambda d: ",".join(str(j) for j in d.get("jobs") or []))]
    source: Column = ("SOURCE", lambda d: _source(d.get("source")))
    show_table(body.get("devices") or [], [*DEVICE_COLUMNS, source, *jobs])


@utilization_app.command("job")
@handles_errors
def utilization_job(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """A job's devices (nothing while it holds none)."""
    with connect() as client:
        body = client.job_utilization(resolve_tenant(client, tenant), job_id)
    if as_json:
        print_json(body)
        return
    _headline(f"job {job_id}", body)
    show_table(body.get("devices") or [], [("NODE", field("node")), *DEVICE_COLUMNS])


@utilization_app.command("cluster")
@handles_errors
def utilization_cluster(
    name: str, tenant: TenantOption = None, as_json: JsonOption = False
) -> None:
    """A tenant cluster's nodes, idle devices included."""
    with connect() as client:
        body = client.cluster_utilization(resolve_tenant(client, tenant), name)
    if as_json:
        print_json(body)
        return
    _headline(f"cluster {name}", body)
    show_table(body.get("nodes") or [], [
        ("NODE", field("node")),
        ("UTIL", lambda n: percent(n.get("window"))),
        ("PEAK", lambda n: _peak(n.get("window"))),
        ("SAMPLES", lambda n: str((n.get("window") or {}).get("samples", "-"))),
    ])  # fmt: skip
