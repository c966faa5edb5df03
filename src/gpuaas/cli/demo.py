"""``gpuaas demo`` (what ``make run`` calls): a tour of gpuaas on the demo fleet it ships.

The demo is a list of steps, each a function of a :class:`DemoContext`; later parts add theirs
with :func:`demo_step` (e.g. scheduling workloads onto the demo fleet) without touching the ones
here. Nothing starts a server, so it finishes in well under a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from gpuaas.cli.fleet import format_bytes, render_summary
from gpuaas.cli.main import app
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import DEFAULT_POLICY
from gpuaas.model.devices import Device
from gpuaas.model.node import Fleet
from gpuaas.model.workload import PodRequest
from gpuaas.sim.demo import schedule_demo
from gpuaas.supply.devices import publish_devices
from gpuaas.supply.loaders import DEMO_FLEET, load_demo_fleet
from gpuaas.supply.loaders.summary import summarize_fleet


@dataclass(slots=True)
class DemoContext:
    """What every step sees: where to print, the demo fleet, and a scratch space between steps."""

    console: Console
    fleet: Fleet
    state: dict[str, Any] = field(default_factory=dict)


DemoStep = Callable[[DemoContext], None]

#: The steps in order, as (title, function).
DEMO_STEPS: list[tuple[str, DemoStep]] = []


def demo_step(title: str) -> Callable[[DemoStep], DemoStep]:
    """Register a function as the next step of ``gpuaas demo``."""

    def register(step: DemoStep) -> DemoStep:
        DEMO_STEPS.append((title, step))
        return step

    return register


@demo_step("The demo fleet")
def show_fleet(context: DemoContext) -> None:
    context.console.print(
        f"A small GPU cloud zone, from the inventory shipped in [bold]gpuaas/supply/{DEMO_FLEET}"
        "[/bold] (its format: docs/inventory.md). `gpuaas fleet show FILE` prints the same "
        "for your own inventory, `kubectl get nodes -o yaml` output or an Alibaba trace CSV.\n"
    )
    render_summary(summarize_fleet(context.fleet), context.console)


@demo_step("Devices, as DRA ResourceSlices publish them")
def show_devices(context: DemoContext) -> None:
    devices = [device for node in context.fleet.nodes for device in publish_devices(node)]
    context.state["devices"] = devices
    context.console.print(
        f"{len(devices):,} devices on {len(context.fleet.nodes)} nodes: each whole GPU, MIG "
        "instance and time-sliced replica is one device with attributes and capacity under the "
        "gpu.nvidia.com driver. One example of each kind:\n"
    )
    context.console.print(device_examples(devices))


def device_examples(devices: list[Device]) -> Table:
    """The first device of each (kind, product, profile), with the attributes selectors use."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column("Node", no_wrap=True)
    table.add_column("Device", no_wrap=True)
    table.add_column("Product", no_wrap=True)
    table.add_column("Profile", no_wrap=True)
    table.add_column("Memory", justify="right", no_wrap=True)
    table.add_column("NVLink", no_wrap=True)
    seen: set[tuple[str, object, object]] = set()
    for device in devices:
        key = (device.kind, device.attributes.get("productName"), device.attributes.get("profile"))
        if key in seen:
            continue
        seen.add(key)
        memory = device.capacity.get("memory")
        profile = device.attributes.get("profile")
        if device.kind == "shared":
            profile = f"{device.attributes.get('replicas')} replicas"
        table.add_row(
            device.node,
            device.name,
            str(device.attributes.get("productName", "")),
            str(profile or ""),
            format_bytes(memory.value()) if memory is not None else "",
            str(device.attributes.get("nvlinkDomain", "")),
        )
    return table


@demo_step("Placing a batch of work")
def show_scheduling(context: DemoContext) -> None:
    context.console.print(
        "The placement engine places each workload whole or not at all, inside the topology it "
        f"asks for, with the [bold]{DEFAULT_POLICY}[/bold] policy. Pending work says why.\n"
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("Workload", no_wrap=True)
    table.add_column("Pods", justify="right")
    table.add_column("Asks")
    table.add_column("Outcome")
    for decision in schedule_demo(context.fleet.nodes):
        workload, result = decision.workload, decision.result
        pod_set = workload.pod_sets[0]
        if isinstance(result, Unschedulable):
            outcome = f"[yellow]pending[/yellow]: {result.reason}"
        else:
            nodes = sorted({p.placement.node_name for p in result})
            where = ", ".join(scope for _, scope in result.scopes)
            outcome = f"[green]placed[/green] on {_node_list(nodes)} ({where})"
        table.add_row(workload.name, str(workload.pod_count), _asks(pod_set.pod), outcome)
    context.console.print(table)


def _asks(pod: PodRequest) -> str:
    if pod.claims:
        return ", ".join(f"claim {c.count}x {c.device_class}" for c in pod.claims)
    if pod.mig:
        return ", ".join(f"{n}x mig {p}" for p, n in pod.mig)
    if pod.replicas:
        return f"{pod.replicas} time-sliced replica"
    if pod.gpus == 1 and 0 < pod.gpu_milli < 1000:
        return f"{pod.gpu_milli / 1000:g} of a GPU"
    return f"{pod.gpus} GPUs" if pod.gpus else "CPU only"


def _node_list(nodes: list[str]) -> str:
    return (
        ", ".join(nodes) if len(nodes) <= 3 else f"{nodes[0]} .. {nodes[-1]} ({len(nodes)} nodes)"
    )


def run_demo(console: Console | None = None) -> DemoContext:
    """Run every registered step on the demo fleet; returns the context for callers to inspect."""
    context = DemoContext(console=console or Console(), fleet=load_demo_fleet())
    for title, step in DEMO_STEPS:
        context.console.rule(f"[bold]{title}")
        step(context)
        context.console.print()
    return context


@app.command("demo")
def demo() -> None:
    """Show gpuaas on the demo fleet shipped with the package (no server needed)."""
    run_demo()
