"""``gpuaas bench usage``: rating a month of usage records into per-tenant x SKU totals
(docs/billing.md, docs/benchmarks.md): 100 tenants x 10,000 jobs by default, target <= 10 s.
``gpuaas bench billing`` goes on to invoices; this one times the rating query alone."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app


@bench_app.command("usage")
def bench_usage(
    tenants: int = typer.Option(100, "--tenants", min=1, help="tenants"),
    jobs: int = typer.Option(10_000, "--jobs", min=1, help="jobs per tenant in the month"),
    db_url: str = typer.Option(
        "", "--db", help="an EMPTY database URL (default: a fresh SQLite file in a temp dir)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write a month of usage records, then time rating them per tenant x SKU x currency."""
    from gpuaas.service.usage_bench import run
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
    table = Table(title=f"usage rating: {tenants} tenants x {jobs} jobs, a month")
    for column in ("records", "write (setup)", "rating", "rating CPU", "groups", "total"):
        table.add_column(column, justify="right")
    table.add_row(f"{result.records:,}", f"{result.write_seconds:.1f} s",
                  f"{result.rating_seconds:.2f} s", f"{result.rating_cpu_seconds:.2f} s",
                  str(result.groups),
                  f"{result.total:.2f} USD")  # fmt: skip
    Console().print(table)
    met = "met" if result.rating_seconds <= 10 else "NOT met"
    typer.echo(f"rating {result.rating_seconds:.2f} s, {result.rating_cpu_seconds:.2f} s of CPU "
               f"(target <= 10 s: {met})")  # fmt: skip
