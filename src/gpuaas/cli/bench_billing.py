"""``gpuaas bench usage`` and ``gpuaas bench billing``: rating a month of usage records
(docs/billing.md, docs/benchmarks.md), 100 tenants x 10,000 jobs (1M+ records) by default,
target <= 10 s. ``usage`` times metering's rating query alone (per tenant x SKU x currency);
``billing`` goes on to every tenant's invoice. Both write the month with metering's
benchmark writer (:mod:`gpuaas.service.usage_bench`) into ``--db`` or a fresh SQLite file."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.store.db import Database

R = TypeVar("R")
TARGET = 10.0

TenantsOption = typer.Option(100, "--tenants", min=1, help="tenants")
JobsOption = typer.Option(10_000, "--jobs", min=1, help="jobs per tenant in the month")
DbOption = typer.Option(
    "", "--db", help="an EMPTY database URL (default: a fresh SQLite file in a temp dir)"
)
JsonOption = typer.Option(False, "--json", help="print one JSON object")


def _on_database(db_url: str, work: Callable[[Database], R]) -> R:
    """``work`` on ``db_url``, or on a fresh SQLite file in a temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(db_url or f"sqlite:///{Path(tmp) / 'bench.db'}")
        try:
            return work(db)
        finally:
            db.dispose()


def _report(result: Any, as_json: bool, title: str, cells: dict[str, str], what: str,
            seconds: float, cpu: float) -> None:  # fmt: skip
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    table = Table(title=title)
    for column in cells:
        table.add_column(column, justify="right")
    table.add_row(*cells.values())
    Console().print(table)
    met = "met" if seconds <= TARGET else "NOT met"
    typer.echo(f"{what} {seconds:.2f} s, {cpu:.2f} s of CPU (target <= {TARGET:.0f} s: {met})")


@bench_app.command("usage")
def bench_usage(
    tenants: int = TenantsOption, jobs: int = JobsOption, db_url: str = DbOption,
    as_json: bool = JsonOption,
) -> None:  # fmt: skip
    """Write a month of usage records, then time rating them per tenant x SKU x currency."""
    from gpuaas.service.usage_bench import run

    r = _on_database(db_url, lambda db: run(db, tenants, jobs))
    cells = {"records": f"{r.records:,}", "write (setup)": f"{r.write_seconds:.1f} s",
             "rating": f"{r.rating_seconds:.2f} s", "rating CPU": f"{r.rating_cpu_seconds:.2f} s",
             "groups": str(r.groups), "total": f"{r.total:.2f} USD"}  # fmt: skip
    _report(r, as_json, f"usage rating: {tenants} tenants x {jobs} jobs, a month", cells,
            "rating", r.rating_seconds, r.rating_cpu_seconds)  # fmt: skip


@bench_app.command("billing")
def bench_billing(
    tenants: int = TenantsOption, jobs: int = JobsOption, db_url: str = DbOption,
    as_json: bool = JsonOption,
) -> None:  # fmt: skip
    """Write a month of usage records, then time rating them (one SQL aggregate per tenant x
    SKU x price entry) and turning the totals into every tenant's invoice."""
    from gpuaas.service.billing_bench import run

    r = _on_database(db_url, lambda db: run(db, tenants, jobs))
    cells = {"write (setup)": f"{r.write_seconds:.1f} s", "rating": f"{r.rating_seconds:.2f} s",
             "invoices": f"{r.invoice_seconds:.3f} s", "rating + invoices": f"{r.seconds:.2f} s",
             "CPU": f"{r.cpu_seconds:.2f} s", "lines": str(r.lines),
             "total": f"{r.total:.2f} USD"}  # fmt: skip
    _report(r, as_json, f"billing: {tenants} tenants x {jobs} jobs, {r.records} records", cells,
            "rating + invoices", r.seconds, r.cpu_seconds)  # fmt: skip
