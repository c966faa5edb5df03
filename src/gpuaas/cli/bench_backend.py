"""``gpuaas bench backend``: how fast a backend starts jobs and reports their ends.

The backend is built by name through :data:`gpuaas.service.backends.FACTORIES` from the same
settings ``gpuaas serve`` reads (``GPUAAS_SLURM_*`` for Slurm), so ``--backend sim|local|slurm``
measure exactly what the server would drive. ``--jobs`` one-pod jobs are launched at once, each
on its own (node, GPU) slot, and the backend is polled every ``--interval`` seconds as the
reconciler does. Each job runs ``sleep <duration>; date +%s.%N``: the last line of its stdout is
when it really ended.

Measured: submit -> Running (launch call to the poll that reports the start) and the state
change latency (the job's own end time to the poll that reports it finished), p50/p95/p99;
polls and the backend's calls to what it drives (``calls`` where the backend counts them, such
as the Slurm backend's listings), so "one batched query per poll" is checked, not assumed.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.backends.base import BackendJob, EventKind
from gpuaas.backends.logs import LogLayout
from gpuaas.cli.bench import bench_app
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.supply.loaders._common import gpu_uuid

#: Job ids start here so a bench never reuses a real job's records in a shared state dir.
FIRST_ID = 900_000_000


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _slots(backend: Any, nodes: list[str], gpus: int, jobs: int) -> list[tuple[str, int]]:
    """(node, GPU index) for each job, spread over the nodes; Slurm's nodes when not given."""
    if not nodes and hasattr(backend, "nodes"):
        known = backend.nodes()
        nodes = sorted(known)
        gpus = min(n.gpus for n in known.values()) if known else gpus
    nodes = nodes or [f"bench-{i}" for i in range(math.ceil(jobs / max(gpus, 1)))]
    if jobs > len(nodes) * max(gpus, 1):
        raise typer.BadParameter(
            f"--jobs {jobs}: only {len(nodes)} nodes x {gpus} GPUs to place them on"
        )
    return [(nodes[i % len(nodes)], (i // len(nodes)) % max(gpus, 1)) for i in range(jobs)]


def _ended_at(layout: LogLayout, job_id: int) -> float | None:
    try:
        lines = layout.stdout(job_id, 0, 0).read_text().split()
        return float(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


@bench_app.command("backend")
def bench_backend(
    backend_name: Annotated[str, typer.Option("--backend", help="sim, local or slurm.")] = "sim",
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=5000)] = 200,
    duration: Annotated[float, typer.Option("--duration", help="Seconds each job runs.")] = 5.0,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls.")] = 0.5,
    nodes: Annotated[
        str, typer.Option("--nodes", help="Comma-separated node names (default: Slurm's).")
    ] = "",
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node")] = 8,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Logs and state (default: a temp dir).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Submit -> Running and state-change latency of one backend under --jobs concurrent jobs."""
    from gpuaas.model.errors import InvalidValue
    from gpuaas.service.backends import FACTORIES, check_backend_name
    from gpuaas.service.settings import Settings

    try:
        check_backend_name(backend_name, "--backend")
    except InvalidValue as exc:
        raise typer.BadParameter(str(exc)) from None
    root = data_dir or Path(tempfile.mkdtemp(prefix="gpuaas-bench-backend-"))
    settings = Settings(data_dir=root, backend=backend_name)
    backend = FACTORIES[backend_name](settings)
    layout = LogLayout(root / "logs")
    slots = _slots(backend, [n for n in nodes.split(",") if n], gpus_per_node, jobs)
    command = ["bash", "-c", f"sleep {duration:g}; date +%s.%N"]
    launched: dict[int, float] = {}
    started: dict[int, float] = {}
    finished: dict[int, tuple[float, EventKind, str]] = {}
    calls_before = dict(getattr(backend, "calls", {}) or {})
    t0 = time.time()
    for i, (node, gpu) in enumerate(slots):
        job_id = FIRST_ID + i
        device = DeviceRef(f"gpu-{gpu}", gpu_uuid(node, gpu), gpu, DeviceKind.GPU)
        pod = PodPlacement("main", 0, 0, node, 100, 64 << 20, (device,))
        launched[job_id] = time.time()
        spec = {"command": command, "duration": duration}  # the simulated fleet reads duration
        backend.launch(BackendJob(job_id, f"bench-{i}", spec, (pod,)))
    launch_seconds = time.time() - t0
    polls, poll_seconds = 0, []
    deadline = time.monotonic() + timeout
    while len(finished) < jobs and time.monotonic() < deadline:
        began = time.perf_counter()
        events = backend.poll(time.time())
        seen = time.time()
        poll_seconds.append(time.perf_counter() - began)
        polls += 1
        for event in events:
            if event.kind is EventKind.STARTED:
                started.setdefault(event.job_id, seen)
            else:
                finished.setdefault(event.job_id, (seen, event.kind, event.reason))
        time.sleep(interval)
    calls = {
        k: v - calls_before.get(k, 0) for k, v in (getattr(backend, "calls", {}) or {}).items()
    }
    to_running = [started[j] - launched[j] for j in started]
    changes = []
    for job_id, (seen, kind, _) in finished.items():
        ended = _ended_at(layout, job_id) if kind is EventKind.SUCCEEDED else None
        if ended is not None:
            changes.append(max(0.0, seen - ended))
    failures = sorted({f"{k.value}: {r}"[:200] for _, k, r in finished.values()
                       if k is not EventKind.SUCCEEDED})  # fmt: skip
    result = {
        "backend": backend_name,
        "jobs": jobs,
        "duration_s": duration,
        "poll_interval_s": interval,
        "launch_calls_s": round(launch_seconds, 3),
        "started": len(started),
        "succeeded": sum(1 for _, k, _ in finished.values() if k is EventKind.SUCCEEDED),
        "unfinished": jobs - len(finished),
        "failures": failures[:5],
        "submit_to_running_s": _quantiles(to_running, (0.5, 0.99)),
        "state_change_s": _quantiles(changes, (0.5, 0.95, 0.99)),
        "polls": polls,
        "poll_s": _quantiles(poll_seconds, (0.5, 0.99)),
        "backend_calls": calls,
        "listings_per_poll": round(calls.get("list", 0) / polls, 3) if polls and calls else None,
    }
    if hasattr(backend, "close"):
        backend.close()
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table(title=f"bench backend --backend {backend_name} --jobs {jobs}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict | list) else str(value))
    Console().print(table)


def _quantiles(values: list[float], qs: tuple[float, ...]) -> dict[str, float | int | None]:
    """Quantiles, count and mean; None (JSON null) where nothing was measured."""
    found: dict[str, float | int | None] = {
        f"p{round(q * 100)}": round(percentile(values, q), 3) if values else None for q in qs
    }
    found["n"] = len(values)
    found["mean"] = round(statistics.fmean(values), 3) if values else None
    return found
