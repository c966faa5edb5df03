"""The ``gpuaas`` command. Each command group lives in a module of its own."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="gpuaas",
    help="gpuaas: GPU-as-a-Service — fleet, scheduling engine and benchmarks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Sub-command modules register themselves on import; a missing one is simply not offered.
    import importlib

    for module in (
        "fleet",
        "bench",
        "bench_placement",
        "demo",
        "scenario",
        "bench_admission",
        "simulate",
        "serve",
        "client",
        "bench_api",
    ):
        try:
            importlib.import_module(f"gpuaas.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gpuaas.cli.{module}":
                raise


_register()


if __name__ == "__main__":
    app()
