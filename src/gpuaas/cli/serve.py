"""``gpuaas serve`` and ``gpuaas db upgrade``: run the control plane, migrate its database."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError

if TYPE_CHECKING:
    from gpuaas.service.settings import Settings

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


def _settings(db: str | None, data_dir: Path | None, **fields: object) -> Settings:
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
        typer.Option(
            "--fleet",
            help="Fleet file whose nodes are registered at first start: an inventory, kubectl "
            "get nodes output or a CSV node list (anything `gpuaas fleet show` reads).",
        ),
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
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            envvar="GPUAAS_BACKEND",
            help="What runs jobs on nodes that name no backend (label gpuaas.io/backend): "
            "sim (simulated fleet), local (processes on this host), slurm, kubernetes "
            "(GPUAAS_KUBE_* settings, docs/kubernetes.md).",
        ),
    ] = None,
    no_reconcile: Annotated[
        bool, typer.Option("--no-reconcile", help="Serve the API only; run no admission.")
    ] = False,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            "--metrics-token",
            envvar="GPUAAS_METRICS_TOKEN",
            help="Bearer token a Prometheus scrape of /metrics must present (default: open).",
        ),
    ] = None,
    no_metering: Annotated[
        bool,
        typer.Option(
            "--no-metering",
            help="Write no usage records (for measuring what metering costs; docs/billing.md).",
        ),
    ] = False,
) -> None:
    """Run the control plane: API, auth, persistence, and the reconcilers."""
    import uvicorn

    from gpuaas.service.app import announce_admin_token, create_app

    if fleet is not None and demo:
        raise typer.BadParameter("give --fleet or --demo, not both")
    if speed <= 0:
        raise typer.BadParameter(f"--speed must be positive, got {speed}")
    if fleet is not None:
        _check_fleet_or_exit(fleet)
    if backend is not None:
        from gpuaas.service.backends import check_backend_name

        try:
            check_backend_name(backend, "--backend")
        except GpuaasError as exc:
            raise typer.BadParameter(str(exc)) from None
    settings = _settings(
        db, data_dir, fleet=fleet, demo=demo, host=host, port=port, speed=speed,
        reconcile=not no_reconcile, reconciler_process=True, metrics_token=metrics_token or None,
        **({"backend": backend} if backend is not None else {}),
        **({"metering": False} if no_metering else {}),
    )  # fmt: skip
    from gpuaas.service.leader import prepare_metrics_dir

    prepare_metrics_dir(settings.data_dir)  # before anything imports prometheus_client
    url = f"http://{host}:{port}"
    if demo and settings.admin_token is None:
        settings.admin_token = demo_admin_token(settings.data_dir)

    def show_token(token: str) -> None:
        # printed on the terminal only, never logged: once at first start, or at every demo start
        print(f"provider admin token: {token}", flush=True)
        print(f"log in with:  gpuaas login {url} {token}", flush=True)

    _migrate_or_exit(settings.url)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # "Context impl SQLiteImpl" is noise
    application = create_app(settings, announce_later=True)
    print(f"gpuaas control plane on {url} (API docs: {url}/docs)", flush=True)

    class Server(uvicorn.Server):
        """Shows the first start's admin token once the port is bound: a start that fails
        shows none, and the next one issues a new token (see ``bootstrap_admin``)."""

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                announce_admin_token(application, None if demo else show_token)
                if demo:
                    show_token(settings.admin_token)

    config = uvicorn.Config(application, host=host, port=port, log_level="warning")
    config.access_log = False
    try:
        Server(config).run()
    except GpuaasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc


def _check_fleet_or_exit(path: Path) -> None:
    """Validate the ``--fleet`` file completely before anything is created (data directory,
    database, admin token): a bad file is one line naming the file, the entry and the field."""
    from gpuaas.service.fleet import fleet_file_entries

    try:
        fleet_file_entries(path)
    except GpuaasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None


def _migrate_or_exit(url: str) -> None:
    """Reach the database and migrate it before serving: a wrong URL is one clear line."""
    from sqlalchemy.exc import SQLAlchemyError

    from gpuaas.store.db import upgrade

    try:
        upgrade(url)
    except SQLAlchemyError as exc:
        print(f"error: cannot reach the database: {exc.orig or exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    except GpuaasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc


def demo_admin_token(data_dir: Path) -> str:
    """The demo's admin token, kept (mode 0600) in the data directory so that every demo start can
    show it: a demo is for trying things, and a newcomer restarts it often."""
    import os

    from gpuaas.service.auth import new_token

    path = data_dir / "demo-admin-token"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, data_dir: DataDirOption = None) -> None:
    """Apply every migration not yet applied (the server also does this at start)."""
    from gpuaas.store.db import current_revision

    settings = _settings(db, data_dir)
    _migrate_or_exit(settings.url)
    print(f"database at revision {current_revision(settings.url)}")
