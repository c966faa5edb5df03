"""``gpuaas bench failover``: a new leader's time to its first admission and to its whole backlog,
after a restart and after a takeover, at several backlog sizes (see
:mod:`gpuaas.service.failover_bench`; docs/benchmarks.md)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app

TARGET_SECONDS = 2.0


MODES = {
    "restart": lambda fb: fb.restart,
    "takeover": lambda fb: fb.takeover,
    "kill": lambda fb: fb.kill,
}


def _modes(text: str) -> list[str]:
    chosen = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODES]
    if unknown or not chosen:
        raise typer.BadParameter(f"--modes: {', '.join(unknown) or 'none'}: choose among "
                                 f"{', '.join(MODES)}")  # fmt: skip
    return list(dict.fromkeys(chosen))


def _sizes(text: str, pending: int) -> list[int]:
    try:
        sizes = sorted({int(p) for p in text.split(",") if p.strip()} | {pending})
    except ValueError:
        raise typer.BadParameter(f"--sizes: {text!r} is not a list of numbers") from None
    if any(s < 1 for s in sizes):
        raise typer.BadParameter("--sizes: every size must be at least 1")
    return sizes


@bench_app.command("failover")
def bench_failover(
    pending: int = typer.Option(100_000, "--pending", min=1, help="the largest backlog"),
    sizes: str = typer.Option("10000,40000", "--sizes", help="further backlog sizes, a list"),
    nodes: int = typer.Option(32, "--nodes", min=1, help="nodes of 8 GPUs, full at the start"),
    tenants: int = typer.Option(4, "--tenants", min=1, help="tenants, one ClusterQueue each"),
    freed: int = typer.Option(12, "--freed", min=1, help="running jobs that end meanwhile"),
    full_rebuild: bool = typer.Option(
        False, "--full-rebuild", help="load the whole backlog before the first admission"
    ),
    db_url: str = typer.Option(
        "", "--db", help="an EMPTY PostgreSQL URL, emptied again after each run (default: SQLite)"
    ),
    modes: str = typer.Option(
        "restart,takeover",
        "--modes",
        help="restart, takeover (in this process), kill (two `gpuaas serve`, the leader SIGKILLed)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Time a new leader (restart and takeover) to its first admission and its full load."""
    from gpuaas.service import failover_bench as fb
    from gpuaas.service.settings import Settings
    from gpuaas.store.db import Database

    if db_url and not db_url.startswith("postgresql"):
        typer.echo("error: --db: give an empty PostgreSQL database (SQLite runs use a "
                   "temporary file of their own)", err=True)  # fmt: skip
        raise typer.Exit(2)
    if db_url:
        from gpuaas.cli.bench_api import BenchError, require_empty_database

        try:
            require_empty_database(db_url)
        except BenchError as exc:
            typer.echo(f"error: {exc}".replace("bench api", "bench failover"), err=True)
            raise typer.Exit(2) from None
    chosen = _modes(modes)
    runs = []
    for size in _sizes(sizes, pending):
        for mode in chosen:
            with tempfile.TemporaryDirectory() as tmp:
                db = Database(db_url or f"sqlite:///{Path(tmp) / 'bench.db'}")
                try:
                    settings = Settings(db_url=db.url, data_dir=Path(tmp))
                    if full_rebuild:
                        settings.backlog_budget = math.inf
                    world = fb.build(db, tenants, nodes)
                    fb.seed(db, world, settings, size)
                    timing = MODES[mode](fb)(db, settings, freed)
                finally:
                    if db_url:
                        fb.empty(db)
                    db.dispose()
            runs.append({"pending": size, "mode": mode, **timing.to_json()})
            if not as_json:
                typer.echo(f"{size:,} pending, {mode}: first admission "
                           f"{timing.first_admission:.2f} s", err=True)  # fmt: skip
    worst = max(r["first_admission_s"] for r in runs if r["pending"] == pending)
    result = {
        "database": "postgresql" if db_url.startswith("postgresql") else "sqlite",
        "nodes": nodes, "gpus": nodes * fb.GPUS_PER_NODE, "tenants": tenants, "freed": freed,
        "full_rebuild": full_rebuild, "runs": runs, "target_seconds": TARGET_SECONDS,
        "met": worst <= TARGET_SECONDS,
    }  # fmt: skip
    if as_json:
        typer.echo(json.dumps(result))
        return
    title = f"a new leader, {nodes * fb.GPUS_PER_NODE} GPUs full, {freed} jobs ended meanwhile"
    table = Table(title=title + (" (full rebuild)" if full_rebuild else ""))
    for column in ("pending", "mode", "first admission", "CPU", "full load", "CPU", "steps"):
        table.add_column(column, justify="right")
    for r in runs:
        table.add_row(f"{r['pending']:,}", r["mode"], f"{r['first_admission_s']:.2f} s",
                      f"{r['first_admission_cpu_s']:.2f} s", _seconds(r["full_load_s"]),
                      _seconds(r["full_load_cpu_s"]),
                      str(r["steps_to_full_load"]))  # fmt: skip
    Console().print(table)
    met = "met" if result["met"] else "NOT met"
    typer.echo(f"first admission at {pending:,} pending: {worst:.2f} s at worst "
               f"(target <= {TARGET_SECONDS:.0f} s: {met})")  # fmt: skip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
