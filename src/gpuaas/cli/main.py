"""The ``gpuaas`` command. Each command group lives in a module of its own, imported only when
one of its commands runs: a client command (``gpuaas jobs list``) then starts without loading
numpy, the engine or the server."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

#: Top-level command -> the modules that register it, in the order ``--help`` lists them. A test
#: checks this against what the modules register, so a new command cannot be forgotten here.
COMMANDS: dict[str, tuple[str, ...]] = {
    "fleet": ("fleet",),
    "demo": ("demo",),
    "scenario": ("scenario",),
    "simulate": ("simulate",),
    "bench": (
        "bench",
        "bench_placement",
        "bench_admission",
        "bench_api",
        "bench_abuse",
        "bench_backend",
        "bench_locality",
        "bench_autoscale",
        "bench_billing",
        "bench_failover",
        "bench_metering",
        "bench_console",
    ),
    "serve": ("serve",),
    "db": ("serve",),
    "admin": ("admin",),
    "login": ("client",),
    "whoami": ("client",),
    "tenants": ("client_identity",),
    "users": ("client_identity",),
    "members": ("client_identity",),
    "invitations": ("client_identity",),
    "tokens": ("client_identity",),
    "nodes": ("client_fleet",),
    "network": ("client_fleet",),
    "flavors": ("client_governance",),
    "cohorts": ("client_governance",),
    "cluster-queues": ("client_governance",),
    "queues": ("client_governance",),
    "priority-classes": ("client_governance",),
    "profiles": ("client_governance",),
    "volumes": ("client_governance",),
    "datasets": ("client_governance", "client_datasets"),
    "prices": ("client_governance",),
    "usage": ("client_usage",),
    "kueue": ("client_governance",),
    "kai": ("client_governance",),
    "volcano": ("client_governance",),
    "jobs": ("client_jobs",),
    "workloads": ("client_jobs",),
    "clusters": ("client_clusters",),
    "utilization": ("client_utilisation",),
    "pool": ("client_governance",),
    "budgets": ("client_governance",),
    "invoices": ("client_invoices",),
}


def load(modules: tuple[str, ...]) -> None:
    """Import command modules (they register themselves on :data:`app`)."""
    for module in modules:
        importlib.import_module(f"gpuaas.cli.{module}")


class LazyGroup(TyperGroup):
    """The top-level group: a command's modules are imported when it is looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        known = super().list_commands(ctx)
        return list(COMMANDS) + [name for name in known if name not in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        modules = COMMANDS.get(cmd_name, ())
        if any(f"gpuaas.cli.{module}" not in sys.modules for module in modules):
            load(modules)
        if modules and cmd_name not in getattr(self, "_built", set()):
            # the group was built before these modules registered: build the command now
            built = typer.main.get_command(app)  # a TyperGroup (typer vendors click)
            command = getattr(built, "commands", {}).get(cmd_name)
            if command is not None:
                self.commands[cmd_name] = command
            self._built = getattr(self, "_built", set()) | {cmd_name}
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="gpuaas",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(
    catalogue: str | None = typer.Option(
        None,
        "--catalogue",
        envvar="GPUAAS_CATALOGUE",
        help="GPU catalogue file adding the provider's own models (docs/inventory.md).",
    ),
) -> None:
    """gpuaas: GPU-as-a-Service — fleet, scheduling engine and benchmarks."""
    if catalogue:
        import os

        from gpuaas.supply.catalogue_file import use_catalogue
        from gpuaas.supply.loaders.errors import FleetFileError

        try:
            use_catalogue(catalogue)
        except FleetFileError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        os.environ["GPUAAS_CATALOGUE"] = os.path.abspath(catalogue)  # the server and its child


if __name__ == "__main__":
    app()
