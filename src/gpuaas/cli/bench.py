"""``gpuaas bench``: benchmarks; ``bench fgd`` runs the FGD protocol on the Alibaba trace.

The sub-app is :data:`bench_app`; other modules (``gpuaas.cli.bench_placement``) add commands to it.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaas.cli.main import app
from gpuaas.engine.policies import DEFAULT_POLICY, POLICY_NAMES, PUBLISHED_NAMES
from gpuaas.model.errors import GpuaasError
from gpuaas.sim.openb import (
    derive_variant,
    load_openb_pods,
    parse_variant,
    protocol_order,
    run_protocol,
    unallocated_lower_bound,
)

bench_app = typer.Typer(help="Benchmarks: placement quality and speed.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` or ``42`` -> list of seeds."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else (part, "")
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise typer.BadParameter(f"{text!r}: use a range like 42-51 or a list like 42,43") from None
    if not seeds:
        raise typer.BadParameter("no seeds given")
    return seeds


def load_published(path: Path, trace: str) -> dict[str, tuple[float, float]]:
    """Published medians (unallocated % at arrived 100 and 130) per our policy name."""
    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except OSError as exc:
        raise GpuaasError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if rows and not {"workload", "sc_policy", "100", "130"} <= set(rows[0]):
        raise GpuaasError(f"{path}: expected columns workload, sc_policy, 100, 130")
    ours = {published: name for name, published in PUBLISHED_NAMES.items()}
    values: dict[str, tuple[list[float], list[float]]] = {}
    for line, row in enumerate(rows, start=2):
        if row["workload"] != trace or row["sc_policy"] not in ours:
            continue
        try:
            at100, at130 = 100.0 - float(row["100"]), 100.0 - float(row["130"])
        except ValueError:
            raise GpuaasError(f"{path}: line {line}: columns 100/130 must be numbers") from None
        lists = values.setdefault(ours[row["sc_policy"]], ([], []))
        lists[0].append(at100)
        lists[1].append(at130)
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in values.items()}


@bench_app.command("fgd")
def bench_fgd(
    nodes: Path = typer.Option(..., "--nodes", help="openb_node_list_*.csv"),
    pods: Path = typer.Option(..., "--pods", help="openb_pod_list_*.csv"),
    policy: str = typer.Option(
        DEFAULT_POLICY, "--policy", help="a policy name, several separated by commas, or 'all'"
    ),
    seeds: str = typer.Option("42-51", "--seeds", help="e.g. 42-51 or 42,43"),
    inflation: float = typer.Option(1.3, "--inflation", help="stop arrivals at this x capacity"),
    published: Path | None = typer.Option(None, "--published", help="published results CSV"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    variant: str | None = typer.Option(
        None,
        "--variant",
        help="derive a trace variant from --pods first: gpushare:P, multigpu:P, gpuspec:P "
        "(P % of the GPU milli / GPU tasks) or cpu:P (P % of the CPU-only tasks); "
        "see gpuaas.sim.openb.derive_variant",
    ),
    variant_seed: int = typer.Option(0, "--variant-seed", help="seed of the variant's draw"),
    spec_pool: Path | None = typer.Option(
        None,
        "--spec-pool",
        help="gpuspec: draw the model-restricted tasks from this pod list (e.g. gpuspec10)",
    ),
) -> None:
    """Run the FGD protocol and print median unallocated GPU % at arrived 100% and 130%.

    With ``--variant`` the pod list is first resampled into a variant (one derived list for
    every seed, as the authors ran their fixed variant files)."""
    console = Console(stderr=as_json)
    try:
        from gpuaas.supply.loaders.openb import load_openb_nodes

        if policy.strip().lower() == "all":
            names = list(POLICY_NAMES)
        else:  # one name, or several separated by commas
            names = list(dict.fromkeys(n.strip().lower() for n in policy.split(",") if n.strip()))
        unknown = [n for n in names if n not in POLICY_NAMES]
        if not names:
            raise GpuaasError(f"--policy: give a policy name ({', '.join(POLICY_NAMES)}) or all")
        if unknown:
            raise GpuaasError(
                f"unknown policy {unknown[0]!r}; choose one of {', '.join(POLICY_NAMES)} or all"
            )
        if not 1.0 <= inflation <= 3.0:
            raise GpuaasError(f"--inflation must be between 1.0 and 3.0, got {inflation}")
        seed_list = parse_seeds(seeds)
        wanted: tuple[str, float] | None = None
        if variant is not None:
            try:
                wanted = parse_variant(variant)
            except ValueError as exc:
                raise GpuaasError(f"--variant: {exc}") from None
        if spec_pool is not None and (wanted is None or wanted[0] != "gpuspec"):
            raise GpuaasError("--spec-pool only applies to --variant gpuspec:P")
        fleet = load_openb_nodes(nodes)
        tasks = load_openb_pods(pods)
        trace = pods.stem
        if wanted is not None:
            kind, percent = wanted
            pool = load_openb_pods(spec_pool) if spec_pool is not None else None
            try:
                tasks = derive_variant(tasks, kind, percent, variant_seed, spec_tasks=pool)
            except ValueError as exc:
                raise GpuaasError(f"--variant: {exc}") from None
            trace = f"{pods.stem} as {kind}:{percent:g}"
        reference = load_published(published, trace) if published else {}
    except (GpuaasError, ValueError, typer.BadParameter) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None

    at100 = 100
    at_end = round(inflation * 100)
    results: dict[str, dict[str, float]] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=as_json and not console.is_terminal,
    ) as progress:
        overall = progress.add_task("runs", total=len(names) * len(seed_list))
        for name in names:
            u100: list[float] = []
            u_end: list[float] = []
            seconds: list[float] = []
            for seed in seed_list:
                progress.update(overall, description=f"{name} seed {seed}")
                run = run_protocol(fleet.nodes, tasks, name, seed, inflation)
                u100.append(run.unallocated_at(at100))
                u_end.append(run.unallocated_at(at_end))
                seconds.append(run.seconds)
                progress.advance(overall)
            results[name] = {
                "unallocated_pct_at_100": round(statistics.median(u100), 3),
                f"unallocated_pct_at_{at_end}": round(statistics.median(u_end), 3),
                "seconds_per_run": round(statistics.mean(seconds), 3),
            }
            if name in reference:
                results[name]["published_pct_at_100"] = round(reference[name][0], 3)
                results[name]["published_pct_at_130"] = round(reference[name][1], 3)

    capacity = sum(len(node.gpus) for node in fleet.nodes) * 1000
    floor = statistics.median(
        unallocated_lower_bound(tasks, protocol_order(tasks, capacity, seed, inflation), capacity)
        for seed in seed_list
    )
    if as_json:
        typer.echo(
            json.dumps(
                {"trace": trace, "policies": results, "lower_bound_pct_at_100": round(floor, 3)}
            )
        )
        return
    table = Table(title=f"FGD protocol: {trace}, seeds {seeds}, median unallocated GPU %")
    table.add_column("policy")
    table.add_column("@100%", justify="right")
    table.add_column(f"@{at_end}%", justify="right")
    if reference:
        table.add_column("published @100%", justify="right")
        table.add_column("published @130%", justify="right")
    table.add_column("s/run", justify="right")
    for name, row in results.items():
        cells = [name, f"{row['unallocated_pct_at_100']:.2f}"]
        cells.append(f"{row[f'unallocated_pct_at_{at_end}']:.2f}")
        if reference:
            pub = reference.get(name)
            cells += [f"{pub[0]:.2f}", f"{pub[1]:.2f}"] if pub else ["-", "-"]
        cells.append(f"{row['seconds_per_run']:.2f}")
        table.add_row(*cells)
    console.print(table)
    console.print(
        f"No policy can do better than {floor:.2f}% unallocated at arrived 100% on this trace "
        "(median over the seeds; see gpuaas.sim.openb.unallocated_lower_bound)."
    )
