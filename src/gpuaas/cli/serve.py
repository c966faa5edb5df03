"""``gpuaas serve`` and ``gpuaas db upgrade``: run the control plane, migrate its database."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError

db_app = typer.Typer(help="The control plane's database.", no_args_is_help=True)
app.add_typer(db_app, name="db")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL: sqlite:///path or postgresql://user@host:port/db "
        "(default: SQLite in the data directory).",
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Where the default SQLite database lives."),
]


def _settings(db: str | None, data_dir: Path | None, **fields: object) -> object:
    from gpuaas.service.settings import Settings

    settings = Settings(db_url=db, **fields)  # type: ignore[arg-type]
    if data_dir is not None:
        settings.data_dir = data_dir
    return settings


@app.command()
def serve(
    db: DbOption = None,
    data_dir: DataDirOption = None,
    fleet: Annotated[
        Path | None,
        typer.Option("--fleet", help="Inventory file whose nodes are registered at first start."),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Demo fleet, tenants, queues and a background stream of jobs (SQLite default).",
        ),
    ] = False,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8080,
    speed: Annotated[
        float,
        typer.Option("--speed", help="Simulated jobs run this many times faster than declared."),
    ] = 1.0,
    no_reconcile: Annotated[
        bool, typer.Option("--no-reconcile", help="Serve the API only; run no admission.")
    ] = False,
) -> None:
    """Run the control plane: API, auth, persistence, and the reconcilers."""
    import uvicorn

    from gpuaas.service.app import create_app

    if fleet is not None and demo:
        raise typer.BadParameter("give --fleet or --demo, not both")
    if speed <= 0:
        raise typer.BadParameter(f"--speed must be positive, got {speed}")
    settings = _settings(
        db, data_dir, fleet=fleet, demo=demo, host=host, port=port, speed=speed,
        reconcile=not no_reconcile,
    )  # fmt: skip
    url = f"http://{host}:{port}"

    def show_token(token: str) -> None:
        # printed once, on the terminal only; never logged
        print(f"provider admin token (shown once, keep it): {token}", flush=True)
        print(f"log in with:  gpuaas login {url} {token}", flush=True)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    application = create_app(settings, on_admin_token=show_token)  # type: ignore[arg-type]
    print(f"gpuaas control plane on {url} (API docs: {url}/docs)", flush=True)
    try:
        uvicorn.run(application, host=host, port=port, log_level="warning", access_log=False)
    except GpuaasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, data_dir: DataDirOption = None) -> None:
    """Apply every migration not yet applied (the server also does this at start)."""
    from gpuaas.store.db import current_revision, upgrade

    from sqlalchemy.exc import SQLAlchemyError

    settings = _settings(db, data_dir)
    try:
        upgrade(settings.url)  # type: ignore[attr-defined]
    except SQLAlchemyError as exc:
        print(f"error: cannot reach the database: {exc.orig or exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    except GpuaasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    print(f"database at revision {current_revision(settings.url)}")  # type: ignore[attr-defined]
