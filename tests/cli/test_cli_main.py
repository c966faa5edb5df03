"""The top-level command: every command is in the lazy table, and a client command starts
without the engine."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from typing import Any

from gpuaas.cli.main import COMMANDS, app, load


def _modules(typer_app: Any) -> set[str]:
    found = {c.callback.__module__ for c in typer_app.registered_commands}
    for group in typer_app.registered_groups:
        found |= _modules(group.typer_instance)
    return found


def test_the_lazy_table_names_every_command_and_its_modules() -> None:
    load(tuple({m for modules in COMMANDS.values() for m in modules}))
    registered: dict[str, set[str]] = defaultdict(set)
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        registered[name].add(command.callback.__module__)
    for group in app.registered_groups:
        registered[group.name] |= _modules(group.typer_instance)
    assert {name: {f"gpuaas.cli.{m}" for m in modules} for name, modules in COMMANDS.items()} == (
        dict(registered)
    )


def test_every_bench_is_listed_whichever_bench_module_came_first() -> None:
    code = (
        "import gpuaas.cli.bench\n"  # alone, it registers only `bench fgd`
        "from gpuaas.cli.main import app\n"
        "app(['bench', '--help'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("fgd", "placement", "admission", "api"):
        assert f" {name} " in out.stdout, out.stdout


def test_a_client_command_does_not_load_the_engine() -> None:
    code = (
        "import sys\n"
        "from gpuaas.cli.main import app\n"
        "try:\n"
        "    app(['jobs', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('numpy', 'gpuaas.engine', 'gpuaas.service', 'sqlalchemy')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout[-500:] + out.stderr[-2000:]
