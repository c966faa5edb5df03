"""``gpuaas simulate``: replay a trace on a fleet through the engine; ``simulate compare`` runs
several queue policies / placement policies / traces and shows them side by side."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaas.cli.main import app
from gpuaas.engine.policies import POLICY_NAMES
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import Governance
from gpuaas.model.node import Node
from gpuaas.sim.fleet_auto import auto_fleet, offered_load
from gpuaas.sim.metrics import summarize, write_csv
from gpuaas.sim.report import render_html
from gpuaas.sim.simulate import NodeFailure, QueuePolicy, ScaleEvent, SimConfig, SimResult, simulate
from gpuaas.sim.traces import SimJob, load_generator, load_itp, load_openb_dynamic, parse_seconds

simulate_app = typer.Typer(
    help="Replay a GPU workload trace through the scheduling engine on a virtual clock.",
    no_args_is_help=False,
    invoke_without_command=True,
)
app.add_typer(simulate_app, name="simulate")

TRACE_HELP = "itp:PATH (ITP clusterNN.csv), openb:PATH (openb pod list, replayed in time), gen:FILE"


@dataclass(slots=True)
class Inputs:
    nodes: list[Node]
    jobs: list[SimJob]
    weights: dict[str, float]
    label: str
    load: float


def load_inputs(fleet: str, trace: str, load: float, seed: int, limit_factor: float) -> Inputs:
    """Parse ``--trace`` and ``--fleet`` (``auto``: sized for ``load``)."""
    kind, sep, path = trace.partition(":")
    if not sep or kind not in ("itp", "openb", "gen") or not path:
        raise InvalidValue("--trace", f"expected {TRACE_HELP}; got {trace!r}")
    nodes: list[Node] | None = None
    if fleet != "auto":
        from gpuaas.supply.loaders import load_fleet

        nodes = list(load_fleet(fleet).nodes)
        if not nodes:
            raise InvalidValue("--fleet", f"{fleet}: has no nodes")
    weights: dict[str, float] = {}
    if kind == "itp":
        if limit_factor < 1:
            raise InvalidValue("--limit-factor", "must be >= 1")
        jobs = load_itp(path, limit_factor)
    elif kind == "openb":
        jobs = load_openb_dynamic(path, nodes)
    else:
        jobs, weights = load_generator(path)
    if nodes is None:
        nodes = auto_fleet(jobs, load, seed)
    return Inputs(nodes, jobs, weights, Path(path).stem, offered_load(jobs, nodes))


def _parse_scale(values: list[str]) -> tuple[ScaleEvent, ...]:
    out = []
    for v in values:
        at, sep, delta = v.partition(":")
        try:
            count = int(delta)
        except ValueError:
            count = 0
        if not sep or count == 0:
            raise InvalidValue("--scale", f"expected TIME:+N or TIME:-N (e.g. 2d:+16), got {v!r}")
        out.append(ScaleEvent(parse_seconds(at, "--scale"), count))
    return tuple(out)


def _parse_failures(values: list[str]) -> tuple[NodeFailure, ...]:
    out = []
    for v in values:
        node, sep, rest = v.partition("@")
        at, sep2, down = rest.partition("+")
        if not sep or not sep2 or not node:
            raise InvalidValue(
                "--fail", f"expected NODE@TIME+DOWNTIME (e.g. node-00003@6h+2h), got {v!r}"
            )
        out.append(NodeFailure(parse_seconds(at, "--fail"), node, parse_seconds(down, "--fail")))
    return tuple(out)


def _run(
    inputs: Inputs,
    config: SimConfig,
    console: Console,
    quiet: bool,
    label: str,
    gov: Governance | None = None,
) -> SimResult:
    """One run with a rich progress bar on stderr (``quiet``: none)."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} jobs arrived"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet or not console.is_terminal,  # no bar in logs and pipes
    ) as progress:
        task = progress.add_task(label, total=len(inputs.jobs))

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done)

        start = time.perf_counter()
        if gov is None:
            result = simulate(inputs.nodes, inputs.jobs, config, report)
        else:
            from gpuaas.sim.queues import simulate_with_queues

            result = simulate_with_queues(inputs.nodes, inputs.jobs, gov, config, report)
        result.wall_seconds = time.perf_counter() - start
    return result


def _summary(inputs: Inputs, result: SimResult, fleet: str) -> dict[str, Any]:
    out = summarize(result)
    out["trace"] = inputs.label
    out["fleet"] = fleet
    out["fleet_nodes"] = len(inputs.nodes)
    out["offered_load"] = inputs.load
    return out


def _gang_max(s: dict[str, Any]) -> str:
    gangs = s["gang_queueing_delay_s"]
    return _fmt_s(gangs["max"]) if gangs["count"] else "no gangs"


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _check_policy(policy: str, queue_policy: str) -> tuple[str, QueuePolicy]:
    name = policy.strip().lower()
    if name not in POLICY_NAMES:
        raise InvalidValue(
            "--policy", f"unknown policy {policy!r}; choose one of {', '.join(POLICY_NAMES)}"
        )
    try:
        qp = QueuePolicy(queue_policy.strip().lower())
    except ValueError:
        raise InvalidValue(
            "--queue-policy", f"unknown {queue_policy!r}; choose default, fifo or backfill"
        ) from None
    return name, qp


def _governance(queues: Path | None) -> Governance | None:
    if queues is None:
        return None
    from gpuaas.supply.kueue import load_yaml

    return load_yaml(queues)


@simulate_app.callback()
def simulate_cmd(
    ctx: typer.Context,
    fleet: str = typer.Option("auto", "--fleet", help="a fleet file (YAML/CSV/kubectl) or auto"),
    trace: str | None = typer.Option(None, "--trace", help=TRACE_HELP),
    queues: Path | None = typer.Option(
        None, "--queues", help="Kueue YAML: admission by its quotas (tenant = LocalQueue)"
    ),
    policy: str = typer.Option("gpuaas", "--policy", help="placement policy"),
    queue_policy: str = typer.Option("default", "--queue-policy", help="default, fifo or backfill"),
    load: float = typer.Option(0.85, "--load", help="offered load for --fleet auto"),
    seed: int = typer.Option(0, "--seed"),
    reserve_after: str = typer.Option(
        "1h", "--reserve-after", help="default queue policy: reserve for a job waiting this long"
    ),
    limit_factor: float = typer.Option(
        1.0, "--limit-factor", help="ITP: declared limit = duration x this (backfill plans with it)"
    ),
    mtbf: str = typer.Option("0", "--mtbf", help="per-node mean time between failures (0 = none)"),
    mttr: str = typer.Option("1h", "--mttr", help="mean time to repair a failed node"),
    fail: list[str] = typer.Option([], "--fail", help="NODE@TIME+DOWNTIME, repeatable"),
    scale: list[str] = typer.Option([], "--scale", help="TIME:+N or TIME:-N nodes, repeatable"),
    until: str | None = typer.Option(None, "--until", help="stop at this virtual time"),
    report: Path | None = typer.Option(None, "--report", help="write a self-contained HTML report"),
    csv_dir: Path | None = typer.Option(None, "--csv", help="write time series and per-job CSV"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Replay TRACE on FLEET and print what happened: jobs, utilisation, queueing delay."""
    if ctx.invoked_subcommand is not None:
        return
    console = Console(stderr=True)
    try:
        if trace is None:
            raise InvalidValue("--trace", f"is required: {TRACE_HELP}")
        gov = _governance(queues)
        name, qp = _check_policy(policy, queue_policy)
        inputs = load_inputs(fleet, trace, load, seed, limit_factor)
        config = SimConfig(
            policy=name,
            queue_policy=qp,
            seed=seed,
            reserve_after=parse_seconds(reserve_after, "--reserve-after"),
            mtbf=parse_seconds(mtbf, "--mtbf"),
            mttr=parse_seconds(mttr, "--mttr"),
            failures=_parse_failures(fail),
            scale=_parse_scale(scale),
            until=parse_seconds(until, "--until") if until is not None else None,
            tenant_weights=inputs.weights,
        )
        quiet = as_json and not console.is_terminal
        label = f"{inputs.label} {name}/{qp}" + (" +queues" if gov is not None else "")
        result = _run(inputs, config, console, quiet, label, gov)
        summary = _summary(inputs, result, fleet)
        if report is not None:
            report.write_text(
                render_html([(label, result, summary)], f"gpuaas simulate: {label}"),
                encoding="utf-8",
            )
        if csv_dir is not None:
            write_csv(result, csv_dir)
    except (GpuaasError, ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(summary))
        return
    out = Console()
    out.print(_single(summary, f"{label} on {len(inputs.nodes)} nodes"))
    for reason, count in sorted(summary["pending_reasons"].items(), key=lambda kv: -kv[1])[:5]:
        out.print(f"pending ({count}): {reason}")


def _single(s: dict[str, Any], title: str) -> Table:
    """One run as metric / value rows (fits a narrow terminal)."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    q = s["queueing_delay_s"]
    jobs = s["jobs"]
    gh = s["gpu_hours"]
    rows = [
        ("fleet GPUs / offered load", f"{s['fleet_gpus']} / {s['offered_load']:.2f}"),
        ("jobs finished / total", f"{jobs['finished']} / {jobs['total']}"),
        ("pending / running at the end", f"{jobs['pending']} / {jobs['running']}"),
        ("GPU utilisation", f"{s['gpu_utilization']:.1%}"),
        ("mean fragmentation of free GPUs", f"{s['mean_fragmentation']:.1%}"),
        ("queueing delay mean / p50", f"{_fmt_s(q['mean'])} / {_fmt_s(q['p50'])}"),
        ("queueing delay p95 / p99", f"{_fmt_s(q['p95'])} / {_fmt_s(q['p99'])}"),
        ("mean slowdown", f"{s['slowdown']['mean']:.2f}"),
        ("makespan", _fmt_s(s["makespan_s"])),
        ("preemptions / restarts", f"{s['preemptions']} / {s['restarts']}"),
        ("node failures", str(s["node_failures"])),
        ("GPU-hours served / lost", f"{gh['served']:.1f} / {gh['lost_to_restarts']:.1f}"),
        ("wall seconds", f"{s['wall_seconds']:.2f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _table(rows: list[tuple[str, dict[str, Any]]], title: str) -> Table:
    table = Table(title=title)
    for col in (
        "run",
        "finished",
        "pending",
        "running",
        "util",
        "mean delay",
        "p50",
        "p95",
        "p99",
        "slowdown",
        "preempt.",
        "lost GPU-h",
        "wall s",
    ):
        table.add_column(col, justify="left" if col == "run" else "right")
    for label, s in rows:
        q = s["queueing_delay_s"]
        table.add_row(
            label,
            str(s["jobs"]["finished"]),
            str(s["jobs"]["pending"]),
            str(s["jobs"]["running"]),
            f"{s['gpu_utilization']:.1%}",
            _fmt_s(q["mean"]),
            _fmt_s(q["p50"]),
            _fmt_s(q["p95"]),
            _fmt_s(q["p99"]),
            f"{s['slowdown']['mean']:.2f}",
            str(s["preemptions"]),
            f"{s['gpu_hours']['lost_to_restarts']:.1f}",
            f"{s['wall_seconds']:.2f}",
        )
    return table


@simulate_app.command("compare")
def compare_cmd(
    fleet: str = typer.Option("auto", "--fleet", help="a fleet file or auto (sized per trace)"),
    trace: list[str] = typer.Option(..., "--trace", help=TRACE_HELP + "; repeatable"),
    queues: Path | None = typer.Option(None, "--queues", help="Kueue YAML for every run"),
    policy: str = typer.Option("gpuaas", "--policy", help="comma-separated placement policies"),
    queue_policy: str = typer.Option(
        "default,fifo,backfill", "--queue-policy", help="comma-separated queue policies"
    ),
    load: float = typer.Option(0.85, "--load"),
    seed: int = typer.Option(0, "--seed"),
    limit_factor: float = typer.Option(1.0, "--limit-factor"),
    reserve_after: str = typer.Option(
        "1h", "--reserve-after", help="default queue policy: reserve for a job waiting this long"
    ),
    report: Path | None = typer.Option(None, "--report", help="one HTML report of all runs"),
    markdown: bool = typer.Option(False, "--markdown", help="print a Markdown table"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Run every (trace, policy, queue policy) combination and show them side by side."""
    console = Console(stderr=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    runs: list[tuple[str, SimResult, dict[str, Any]]] = []
    wall = time.perf_counter()
    try:
        gov = _governance(queues)
        combos = [_check_policy(p, q) for p in policy.split(",") for q in queue_policy.split(",")]
        if gov is not None:  # admission orders the queues: one run per placement policy
            combos = list(dict.fromkeys((n, QueuePolicy.DEFAULT) for n, _ in combos))
        for spec in trace:
            inputs = load_inputs(fleet, spec, load, seed, limit_factor)
            for name, qp in combos:
                label = f"{inputs.label} {name}/{qp}"
                config = SimConfig(
                    policy=name,
                    queue_policy=qp,
                    seed=seed,
                    tenant_weights=inputs.weights,
                    reserve_after=parse_seconds(reserve_after, "--reserve-after"),
                )
                quiet = as_json and not console.is_terminal
                result = _run(inputs, config, console, quiet, label, gov)
                summary = _summary(inputs, result, fleet)
                rows.append((label, summary))
                runs.append((label, result, summary))
        if report is not None:
            report.write_text(render_html(runs, "gpuaas simulate compare"), encoding="utf-8")
    except (GpuaasError, ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    total = time.perf_counter() - wall
    if as_json:
        typer.echo(
            json.dumps({"runs": [dict(s, label=label) for label, s in rows], "wall_seconds": total})
        )
        return
    if markdown:
        typer.echo(
            "| trace | nodes (GPUs) | offered load | queue policy | mean delay | p95 delay | "
            "gang max delay | utilisation (makespan) | utilisation (arrivals) | wall s |"
        )
        typer.echo("|---|---|---|---|---|---|---|---|---|---|")
        for _, s in rows:
            q = s["queueing_delay_s"]
            typer.echo(
                f"| {s['trace']} | {s['fleet_nodes']} ({s['fleet_gpus']}) "
                f"| {s['offered_load']:.2f} "
                f"| {s['policy']}/{s['queue_policy']} | {_fmt_s(q['mean'])} | {_fmt_s(q['p95'])} "
                f"| {_gang_max(s)} "
                f"| {s['gpu_utilization']:.1%} | {s['gpu_utilization_while_arriving']:.1%} "
                f"| {s['wall_seconds']:.1f} |"
            )
        typer.echo(f"\ntotal wall time {total:.1f} s")
        return
    out = Console()
    out.print(_table(rows, f"simulate compare ({total:.1f} s)"))


WHATIF_TRACE_HELP = (
    "diurnal (the day/night generator, the default), itp:PATH (an ITP clusterNN.csv, its "
    "timestamps, jobs split over the tenants) or gen:FILE (a generator YAML; its tenants)"
)


def _whatif_jobs(trace: str, tenants: int, gpus: int, opts: dict[str, Any]) -> list[SimJob]:
    """The what-if's jobs: generated, or a trace with its jobs dealt to ``t0..t{n-1}``."""
    import dataclasses
    import zlib

    from gpuaas.sim.diurnal import DiurnalSpec, diurnal_jobs, itp_sizes

    if trace == "diurnal":
        sizes = opts["sizes"]
        spec = DiurnalSpec(
            gpus=gpus,
            days=opts["days"],
            peak_to_trough=opts["peak_to_trough"],
            peak_load=opts["peak_load"],
            peak_hour=opts["peak_hour"],
            tenants=tenants,
            sizes=itp_sizes(sizes[4:]) if sizes.startswith("itp:") else DiurnalSpec(1).sizes,
            max_job_gpus=opts["max_job_gpus"],
            duration_median=opts["duration_median"],
            seed=opts["seed"],
        )
        return diurnal_jobs(spec)
    kind, sep, path = trace.partition(":")
    if not sep or kind not in ("itp", "gen") or not path:
        raise InvalidValue("--trace", f"expected {WHATIF_TRACE_HELP}; got {trace!r}")
    jobs = load_itp(path) if kind == "itp" else load_generator(path)[0]
    start = jobs[0].submit
    horizon = start + opts["days"] * 86400.0
    out = []
    for job in jobs:
        if job.submit > horizon:
            break
        tenant = job.tenant
        if kind == "itp":
            tenant = f"t{zlib.crc32(job.name.encode()) % tenants}"
        out.append(dataclasses.replace(job, tenant=tenant, submit=job.submit - start))
    return out


def _fleet(gpus: int) -> list[Node]:
    from gpuaas.sim.fleet_auto import GPUS_PER_NODE
    from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet

    if gpus < GPUS_PER_NODE or gpus % GPUS_PER_NODE:
        raise InvalidValue("--gpus", f"must be a positive multiple of {GPUS_PER_NODE}, got {gpus}")
    spec = FleetSpec(
        nodes=gpus // GPUS_PER_NODE,
        model_shares=((H100, 1.0),),
        mig_node_share=0.0,
        time_sliced_node_share=0.0,
    )
    return synthetic_fleet(spec)


def _split(value: str, allowed: tuple[str, ...], option: str) -> list[str]:
    items = [v.strip().lower() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise InvalidValue(option, f"expected a comma-separated list of {', '.join(allowed)}")
    return items


@simulate_app.command("whatif")
def whatif_cmd(
    trace: str = typer.Option("diurnal", "--trace", help=WHATIF_TRACE_HELP),
    gpus: int = typer.Option(512, "--gpus", help="fleet GPUs (8-GPU H100 nodes)"),
    tenants: int = typer.Option(4, "--tenants", help="tenants, one autoscaling cluster each"),
    days: float = typer.Option(7.0, "--days", help="simulated days (a trace: from its start)"),
    peak_to_trough: float = typer.Option(10.0, "--peak-to-trough", help="diurnal load swing"),
    peak_load: float = typer.Option(0.7, "--peak-load", help="diurnal: peak load / fleet GPUs"),
    peak_hour: float = typer.Option(14.0, "--peak-hour", help="diurnal: hour of the peak, 0-24"),
    sizes: str = typer.Option(
        "default", "--sizes", help="diurnal job sizes: default or itp:PATH (that trace's)"
    ),
    duration_median: str = typer.Option("20m", "--duration-median", help="diurnal run time"),
    cluster_min: int = typer.Option(1, "--cluster-min", help="nodes per cluster at least"),
    cluster_max: int = typer.Option(
        0, "--cluster-max", help="nodes per cluster at most (0: half the fleet)"
    ),
    target: float = typer.Option(95.0, "--target", help="utilisation target, percent"),
    scale_in_below: float = typer.Option(20.0, "--scale-in-below", help="percent"),
    unneeded: str = typer.Option("10m", "--unneeded", help="unneeded time before scale-in"),
    cooldown: str = typer.Option(
        "5m", "--cooldown", help="no scale-in this soon after a scale-out"
    ),
    stabilization: str = typer.Option(
        "0s",
        "--stabilization",
        help="never scale in below the most nodes needed within this window (0s: off)",
    ),
    flap_wait: str = typer.Option(
        "never",
        "--flap-wait",
        help="how long a cluster's oldest waiting job waits before a scale-out takes back a "
        "node the cluster released within 10 min, when no other will do (never: no node flaps)",
    ),
    pool_hold: str = typer.Option(
        "10m",
        "--pool-hold",
        help="a node reclaimed from the pool does not settle back into it within this long",
    ),
    grace: str = typer.Option("30s", "--grace", help="pool jobs' grace period on reclaim (>= 30s)"),
    settle: str = typer.Option("5m", "--settle", help="idle time before a node enters the pool"),
    join: str = typer.Option("10s", "--join", help="a node's time from handover to allocatable"),
    tick: str = typer.Option("15s", "--tick", help="the control loop's period"),
    spot: str = typer.Option("saturated,half", "--spot", help="spot demand levels, or none"),
    rule: str = typer.Option("telemetry,requests", "--rule", help="scale-in rules to run"),
    policy: str = typer.Option("packing", "--policy", help="placement policy in the clusters"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Tenants with autoscaling clusters and the idle-capacity pool on one fleet: idle
    GPU-hours, the share the pool sold, reclaim latency, queueing delay with and without the
    pool, flaps, max; the same run under cluster-autoscaler's requests-only rule."""
    from gpuaas.model.autoscale import AutoscaleSpec, IdlePoolSpec
    from gpuaas.sim.diurnal import peak_to_trough as measured_ratio
    from gpuaas.sim.whatif import ClusterSetup, ScaleInRule, WhatIfConfig
    from gpuaas.sim.whatif_runs import SPOT_LEVELS, whatif_runs

    console = Console(stderr=True)
    wall = time.perf_counter()
    try:
        name, _ = _check_policy(policy, "default")
        if tenants < 1:
            raise InvalidValue("--tenants", "must be at least 1")
        nodes = _fleet(gpus)
        top = cluster_max or max(1, len(nodes) // 2)
        opts = {
            "days": days,
            "peak_to_trough": peak_to_trough,
            "peak_load": peak_load,
            "peak_hour": peak_hour,
            "sizes": sizes,
            "max_job_gpus": top * 8,
            "duration_median": parse_seconds(duration_median, "--duration-median"),
            "seed": seed,
        }
        jobs = _whatif_jobs(trace, tenants, gpus, opts)
        names = (
            sorted({j.tenant for j in jobs})
            if trace.startswith("gen:")
            else [f"t{k}" for k in range(tenants)]
        )
        spec = AutoscaleSpec(
            target_percent=target,
            scale_in_below_percent=scale_in_below,
            unneeded_seconds=parse_seconds(unneeded, "--unneeded"),
            cooldown_seconds=parse_seconds(cooldown, "--cooldown"),
            stabilization_seconds=parse_seconds(stabilization, "--stabilization"),
        )
        levels = [s for s in _split(spot, (*SPOT_LEVELS, "none"), "--spot") if s != "none"]
        pool = (
            IdlePoolSpec(
                marketplace="whatif",
                settle_seconds=parse_seconds(settle, "--settle"),
                grace_seconds=parse_seconds(grace, "--grace"),
            )
            if levels
            else None
        )
        config = WhatIfConfig(
            clusters=tuple(ClusterSetup(t, cluster_min, top, spec) for t in names),
            pool=pool,
            tick=parse_seconds(tick, "--tick"),
            join_seconds=parse_seconds(join, "--join"),
            pool_hold=parse_seconds(pool_hold, "--pool-hold"),
            flap_wait=math.inf if flap_wait == "never" else parse_seconds(flap_wait, "--flap-wait"),
            until=days * 86400.0,
            seed=seed,
            policy=name,
        )
        config.check()
        rules = [ScaleInRule(r) for r in _split(rule, ("telemetry", "requests"), "--rule")]
        quiet = as_json or not console.is_terminal
        out = whatif_runs(
            nodes,
            jobs,
            config,
            rules,
            levels,
            progress=None if quiet else (lambda what: console.print(f"running {what} ...")),
        )
    except (GpuaasError, ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    out["inputs"] = {
        "trace": trace,
        "gpus": gpus,
        "nodes": len(nodes),
        "tenants": len(names),
        "days": days,
        "jobs": len(jobs),
        "peak_to_trough_measured": _finite(measured_ratio(jobs, days)),
        "cluster_min": cluster_min,
        "cluster_max": top,
        "policy": name,
    }
    out["wall_seconds"] = time.perf_counter() - wall
    if as_json:
        typer.echo(json.dumps(out))
        return
    _whatif_table(out)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _whatif_table(out: dict[str, Any]) -> None:
    i = out["inputs"]
    ratio = i["peak_to_trough_measured"]
    title = (
        f"what-if: {i['trace']}, {i['gpus']} GPUs, {i['tenants']} tenants, {i['days']:g} days, "
        f"{i['jobs']} jobs" + (f", load peak-to-trough {ratio:.1f}:1" if ratio is not None else "")
    )
    table = Table(title=title)
    for col in (
        "run",
        "idle GPU-h",
        "sold",
        "reclaim p50/p99",
        "delay p95",
        "node-h prov./used",
        "flaps node/cluster/pool",
        "max exceeded",
        "cpu s",
    ):
        table.add_column(col, justify="left" if col == "run" else "right")
    for r in out["runs"]:
        lat = r["reclaim_latency_s"]
        nh = r["node_hours"]
        table.add_row(
            r["label"],
            f"{r['gpu_hours']['idle']:.0f}",
            f"{r['monetised_share']:.1%}" if r["pool"] else "-",
            f"{lat['p50']:.0f} / {lat['p99']:.0f} s" if lat["count"] else "-",
            _fmt_s(r["queueing_delay_s"]["p95"]),
            f"{nh['provisioned']:.0f} / {nh['used']:.0f}",
            f"{r['flaps']['node']} / {r['flaps']['cluster']} / {r['flaps']['pool']}",
            str(r["max_exceeded"]),
            f"{r['cpu_seconds']:.1f}",
        )
    out_console = Console()
    out_console.print(table)
    for r in out["runs"]:
        if "targets" not in r:
            continue
        missed = [k for k, v in r["targets"].items() if not v["met"]]
        verdict = "all targets met" if not missed else "missed: " + ", ".join(missed)
        out_console.print(f"{r['label']}: {verdict}")
