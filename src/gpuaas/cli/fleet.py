"""``gpuaas fleet show|validate FILE``: look at a fleet file before gpuaas schedules on it.

FILE is a gpuaas YAML inventory, ``kubectl get nodes -o yaml|json`` output, or the Alibaba trace's
node-list CSV. A bad file prints one line naming the file, entry and field, and exits 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Fleet
from gpuaas.model.resources import format_amount
from gpuaas.supply.loaders import load_fleet
from gpuaas.supply.loaders.summary import summarize_fleet

fleet_app = typer.Typer(
    name="fleet",
    help="Inspect and validate fleet files (YAML inventory, kubectl nodes, trace CSV).",
    no_args_is_help=True,
)
app.add_typer(fleet_app, name="fleet")

#: Rows shown per topology level before "... N more" (``--json`` lists them all).
TOPOLOGY_ROWS = 12

_FILE_HELP = (
    "Fleet file: gpuaas inventory (.yaml), `kubectl get nodes -o yaml|json` output, "
    "or an openb_node_list_*.csv"
)


def load_or_exit(path: Path) -> Fleet:
    """Load a fleet, or print the error (no traceback) and exit 1."""
    try:
        return load_fleet(path)
    except GpuaasError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@fleet_app.command("show")
def show(
    file: Path = typer.Argument(..., help=_FILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Nodes, GPUs by model, partitions, topology, advertised resources and devices."""
    fleet = load_or_exit(file)
    summary = summarize_fleet(fleet)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    render_summary(summary, Console())


@fleet_app.command("validate")
def validate(file: Path = typer.Argument(..., help=_FILE_HELP)) -> None:
    """Check a fleet file; print 'ok: N nodes, M GPUs' or the first error (exit 1)."""
    fleet = load_or_exit(file)
    typer.echo(f"ok: {len(fleet.nodes)} nodes, {fleet.gpu_count} GPUs")


# --- rendering (shared with `gpuaas demo`) -------------------------------------------------


def format_bytes(amount: int) -> str:
    """Memory for people: binary units with one decimal where needed."""
    value = float(amount)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:,.0f} {unit}" if value == int(value) else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cores(milli: int) -> str:
    return f"{milli // 1000:,}" if milli % 1000 == 0 else f"{milli / 1000:,.2f}"


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print the tables of :func:`summarize_fleet`'s output."""
    for table in summary_tables(summary):
        console.print(table)


def summary_tables(summary: dict[str, Any]) -> list[Table]:
    """The rich tables for a fleet summary, in display order (empty sections left out)."""
    tables = [_overview(summary), _models(summary), _partitions(summary)]
    topology = _topology(summary)
    if topology is not None:
        tables.append(topology)
    tables.append(_resources(summary))
    if summary.get("devices"):
        tables.append(_devices(summary))
    return [table for table in tables if table.row_count]


def _overview(summary: dict[str, Any]) -> Table:
    table = Table(title=f"Fleet {summary['source']}", show_header=False, title_justify="left")
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    table.add_row("Nodes", f"{summary['nodes']:,} ({summary['gpu_nodes']:,} with GPUs)")
    table.add_row("GPUs", f"{summary['gpus']:,}")
    per_node = ", ".join(
        f"{count:,} x " + (f"{gpus}-GPU" if gpus != "0" else "CPU-only")
        for gpus, count in reversed(summary["nodes_by_gpu_count"].items())
    )
    table.add_row("Nodes by GPU count", per_node or "-")
    table.add_row("CPU cores", _cores(summary["cpu_milli"]))
    table.add_row("Memory", format_bytes(summary["memory_bytes"]))
    if summary.get("taints"):
        table.add_row(
            "Taints", "\n".join(f"{taint} ({n:,})" for taint, n in summary["taints"].items())
        )
    return table


def _models(summary: dict[str, Any]) -> Table:
    table = Table(title="GPUs by model", title_justify="left")
    table.add_column("Model (as given)")
    table.add_column("Catalogue model")
    table.add_column("Memory", justify="right")
    table.add_column("MIG")
    table.add_column("Nodes", justify="right")
    table.add_column("GPUs", justify="right")
    for model in summary["models"]:
        table.add_row(
            model["name"],
            model["catalogue_name"] + (" (generic)" if model["generic"] else ""),
            format_bytes(model["memory_mib"] * 2**20) if model["memory_mib"] else "unknown",
            "yes" if model["mig_capable"] else "no",
            f"{model['nodes']:,}",
            f"{model['gpus']:,}",
        )
    return table


def _partitions(summary: dict[str, Any]) -> Table:
    partitions = summary["partitions"]
    table = Table(title="Partitions", title_justify="left")
    table.add_column("Mode")
    table.add_column("Layout")
    table.add_column("GPUs", justify="right")
    table.add_column("Devices", justify="right")
    if partitions["whole"]:
        table.add_row("whole", "", f"{partitions['whole']:,}", f"{partitions['whole']:,}")
    mig = partitions["mig"]
    for layout, gpus in mig["layouts"].items():
        table.add_row("MIG", layout, f"{gpus:,}", "")
    if mig["gpus"]:
        instances = ", ".join(f"{n:,} x {profile}" for profile, n in mig["instances"].items())
        table.add_row(
            "MIG total", instances, f"{mig['gpus']:,}", f"{sum(mig['instances'].values()):,}"
        )
    shared = partitions["time_sliced"]
    for replicas, gpus in shared["gpus_by_replicas"].items():
        table.add_row(
            "time-sliced", f"{replicas} replicas", f"{gpus:,}", f"{gpus * int(replicas):,}"
        )
    for replicas, gpus in partitions.get("mps", {}).get("gpus_by_replicas", {}).items():
        table.add_row("MPS", f"{replicas} clients", f"{gpus:,}", f"{gpus * int(replicas):,}")
    return table


_LEVEL_TITLES = {
    "zones": "zone",
    "blocks": "block",
    "racks": "rack",
    "nvlink_domains": "NVLink domain",
}


def _topology(summary: dict[str, Any]) -> Table | None:
    topology = summary["topology"]
    if not any(topology.values()):
        return None
    table = Table(title="Topology", title_justify="left")
    table.add_column("Level")
    table.add_column("Domain")
    table.add_column("Nodes", justify="right")
    table.add_column("GPUs", justify="right")
    for key, title in _LEVEL_TITLES.items():
        domains = topology.get(key, {})
        for number, (name, counts) in enumerate(domains.items()):
            if number == TOPOLOGY_ROWS:
                rest = list(domains.values())[TOPOLOGY_ROWS:]
                table.add_row(
                    title,
                    f"... {len(rest)} more",
                    f"{sum(d['nodes'] for d in rest):,}",
                    f"{sum(d['gpus'] for d in rest):,}",
                )
                break
            table.add_row(title, name, f"{counts['nodes']:,}", f"{counts['gpus']:,}")
        if domains:
            table.add_section()
    return table


def _resources(summary: dict[str, Any]) -> Table:
    table = Table(title="Advertised resources", title_justify="left")
    table.add_column("Resource")
    table.add_column("Total", justify="right")
    for name, amount in summary["resources"].items():
        if name == "cpu":
            text = _cores(amount)
        elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
            text = format_bytes(amount)
        elif "/" in name or name == "pods":
            text = f"{amount:,}"
        else:
            text = format_amount(name, amount)
        table.add_row(name, text)
    return table


def _devices(summary: dict[str, Any]) -> Table:
    devices = summary["devices"]
    table = Table(
        title=f"Devices (DRA, gpu.nvidia.com): {devices['total']:,}", title_justify="left"
    )
    table.add_column("Kind")
    table.add_column("Product")
    table.add_column("Profile")
    table.add_column("Devices", justify="right")
    for row in devices["by_type"]:
        table.add_row(row["kind"], row["product"], row["profile"], f"{row['devices']:,}")
    return table
