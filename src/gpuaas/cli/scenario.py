"""``gpuaas scenario``: replay an admission scenario (conformance format) and check its outcome.

A platform admin can replay their own queue configuration against a situation before changing
production ("what happens to team B if we lower its quota?").
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError
from gpuaas.sim.scenario import Outcome, Scenario, diff_outcomes, load_scenario, run_scenario

scenario_app = typer.Typer(
    help="Replay admission scenarios (Kueue objects + workloads) and check their outcome.",
    no_args_is_help=True,
)
app.add_typer(scenario_app, name="scenario")


def _load_and_run(file: Path) -> tuple[Scenario, Outcome]:
    try:
        scenario = load_scenario(file)
        return scenario, run_scenario(scenario)
    except GpuaasError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _format(outcome: Outcome) -> str:
    lines = ["admitted:"]
    for name, flavors in sorted(outcome.admitted.items()):
        text = "; ".join(
            f"{ps}: " + ", ".join(f"{r}={f}" for r, f in sorted(rs.items()))
            for ps, rs in sorted(flavors.items())
        )
        lines.append(f"  {name}  ({text})")
    lines.append("evicted:")
    lines.extend(f"  {name}  {reason}" for name, reason in sorted(outcome.evicted.items()))
    lines.append("pending:")
    for name in sorted(outcome.pending):
        lines.append(f"  {name}  {outcome.reasons.get(name, '')}".rstrip())
    return "\n".join(lines)


@scenario_app.command("run")
def run(
    file: Path = typer.Argument(..., help="scenario YAML file"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON"),
) -> None:
    """Run a scenario and print the settled outcome (admitted, evicted, pending with reasons)."""
    scenario, outcome = _load_and_run(file)
    if as_json:
        typer.echo(json.dumps(outcome.to_json(), indent=2, sort_keys=True))
        return
    typer.echo(f"scenario {scenario.name}")
    if scenario.origin is not None:
        typer.echo(f"source: {scenario.origin}")
    typer.echo(_format(outcome))
    if outcome.oscillated:
        typer.echo(
            "note: workloads kept preempting each other; the state shown is where the loop "
            "first repeated"
        )


@scenario_app.command("check")
def check(
    file: Path = typer.Argument(..., help="scenario YAML file with an `expect` section"),
) -> None:
    """Exit 0 when the outcome equals the scenario's `expect`, else 1 with a readable diff."""
    scenario, outcome = _load_and_run(file)
    if scenario.expect is None:
        typer.echo(f"error: {file}: no `expect` section to check against", err=True)
        raise typer.Exit(2)
    differences = diff_outcomes(scenario.expect, outcome)
    origin = f" (from {scenario.origin})" if scenario.origin is not None else ""
    if not differences:
        typer.echo(f"ok: {scenario.name}{origin}")
        return
    typer.echo(f"FAIL: {scenario.name}{origin}: {len(differences)} difference(s)")
    for line in differences:
        typer.echo(f"  - {line}")
    raise typer.Exit(1)
