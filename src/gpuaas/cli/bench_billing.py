"""``gpuaas bench billing``: rating a month of usage records into invoices (docs/billing.md,
docs/benchmarks.md): 100 tenants x 10,000 jobs (1M+ records) by default, target <= 10 s."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app


@bench_app.command("billing")
def bench_billing(
    tenants: int = typer.Option(100, "--tenants", min=1, help="tenants"),
    jobs: int = typer.Option(10_000, "--jobs", min=1, help="jobs per tenant in the month"),
    db_url: str = typer.Option(
        "", "--db", help="database URL (default: a fresh SQLite file in a temporary directory)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write a month of usage records, then time rating them (one SQL aggregate per tenant x
    SKU x price entry) and turning the totals into every tenant's invoice."""
    from gpuaas.service.billing_bench import run
    from gpuaas.store.db import Database

    with tempfile.TemporaryDirectory() as tmp:
        db = Database(db_url or f"sqlite:///{Path(tmp) / 'bench.db'}")
        try:
            result = run(db, tenants, jobs)
        finally:
            db.dispose()
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    table = Table(title=f"billing: {tenants} tenants x {jobs} jobs, {result.records} records")
    for column in ("write (setup)", "rating", "invoices", "rating + invoices", "CPU", "lines",
                   "total"):  # fmt: skip
        table.add_column(column, justify="right")
    table.add_row(
        f"{result.write_seconds:.1f} s",
        f"{result.rating_seconds:.2f} s",
        f"{result.invoice_seconds:.3f} s",
        f"{result.seconds:.2f} s",
        f"{result.cpu_seconds:.2f} s",
        str(result.lines),
        f"{result.total:.2f} USD",
    )
    Console().print(table)
    met = "met" if result.seconds <= 10 else "NOT met"
    typer.echo(f"rating + invoices {result.seconds:.2f} s (target <= 10 s: {met})")
