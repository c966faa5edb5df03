"""``gpuaas bench console``: the web console's pages on the openb fleet (1,213 nodes) with
20,000 jobs: each page's server time (p50 / p99, CPU) and, in Debian's Chromium, its first
render (docs/benchmarks.md). Targets: server <= 200 ms, first render <= 1.5 s."""

from __future__ import annotations

import gc
import json
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.service.settings import Settings

OPENB_NODES = Path("../shared/data/openb/openb_node_list_gpu_node.csv")


@bench_app.command("console")
def bench_console(
    nodes: Path = typer.Option(OPENB_NODES, "--nodes", help="openb_node_list_gpu_node.csv"),
    jobs: int = typer.Option(20_000, "--jobs", min=1, help="jobs in the store"),
    requests: int = typer.Option(20, "--requests", min=2, help="timed requests per page"),
    browser: bool = typer.Option(True, "--browser/--no-browser", help="first render in Chromium"),
    chromium: str = typer.Option("", "--chromium", help="Chromium binary (default: Debian's)"),
    tenant_pages: bool = typer.Option(
        True, "--tenant-pages/--no-tenant-pages", help="also time the busiest tenant's pages"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Build the store (fresh SQLite), then time every provider page (and the busiest
    tenant's) in this process and, with --browser, in headless Chromium."""
    from fastapi.testclient import TestClient

    from gpuaas.service import console_bench as cb
    from gpuaas.service.app import create_app
    from gpuaas.service.headless import chromium_binary
    from gpuaas.store.db import Database

    if not nodes.exists():
        raise typer.BadParameter(f"{nodes}: not found (the openb node list, ../shared/data)")
    binary = chromium or chromium_binary()
    paths = [*cb.PROVIDER_PAGES, *(cb.TENANT_PAGES if tenant_pages else ())]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        db = Database(url)
        db.upgrade()
        store = cb.build(db, nodes, jobs)
        db.dispose()
        # the store is written in this process, which a real server's is not: its garbage is
        # collected now, not during the first page timed (service/collector.py)
        gc.collect()
        settings = Settings(
            db_url=url, data_dir=Path(tmp), reconcile=False, admin_token=cb.ADMIN_TOKEN
        )
        with TestClient(create_app(settings), base_url="http://localhost") as client:
            r = client.post(
                "/login", data={"token": cb.ADMIN_TOKEN, "next": "/"}, follow_redirects=False
            )
            if r.status_code != 303:
                raise typer.Exit(f"log-in failed: {r.status_code}")
            times = cb.time_pages(client, paths, requests)
        renders: dict[str, float] = {}
        if browser and Path(binary).exists():
            renders = _render(settings, binary, paths)
    if renders:
        times = [cb.PageTime(**{**_fields(t), "render": renders.get(t.path)}) for t in times]
    result = {
        "nodes": store.nodes,
        "gpus": store.gpus,
        "jobs": store.jobs,
        "active_jobs": store.active,
        "usage_records": store.usage_records,
        "tenants": store.tenants,
        "build_seconds": round(store.seconds, 1),
        "requests_per_page": requests,
        "browser": bool(renders),
        "server_target_ms": cb.SERVER_TARGET * 1000,
        "render_target_s": cb.RENDER_TARGET,
        "pages": [t.to_json() for t in times],
        "met": all(t.met for t in times),
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table(
        title=f"console: {store.nodes} nodes, {store.gpus} GPUs, {store.jobs:,} jobs "
        f"({store.active:,} active), {store.usage_records:,} usage records"
    )
    for column in ("page", "status", "KB", "first", "p50", "p99", "CPU", "render", "met"):
        table.add_column(column, justify="left" if column == "page" else "right")
    for t in times:
        table.add_row(
            t.path,
            str(t.status),
            f"{t.bytes / 1024:.0f}",
            f"{t.first * 1000:.0f} ms",
            f"{t.p50 * 1000:.0f} ms",
            f"{t.p99 * 1000:.0f} ms",
            f"{t.cpu * 1000:.0f} ms",
            "—" if t.render is None else f"{t.render:.2f} s",
            "yes" if t.met else "NO",
        )
    Console().print(table)
    typer.echo(
        f"targets: server p99 <= {cb.SERVER_TARGET * 1000:.0f} ms, first render <= "
        f"{cb.RENDER_TARGET} s; store built in {store.seconds:.0f} s"
    )


def _fields(t: object) -> dict[str, object]:
    from dataclasses import fields

    return {f.name: getattr(t, f.name) for f in fields(t)}  # type: ignore[arg-type]


def _render(settings: Settings, chromium: str, paths: list[str]) -> dict[str, float]:
    """Serve the same store over HTTP and measure in Chromium."""
    from gpuaas.service import console_bench as cb

    with cb.serving(settings) as base:
        return cb.render_times(base, cb.ADMIN_TOKEN, paths, chromium)
