"""Scenarios translated from Kueue's own scheduler and preemption tests
(``tests/sim/scenarios/kueue/``): each passes ``gpuaas scenario check`` and names its source."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError
from gpuaas.sim.scenario import load_scenario, parse_scenario

KUEUE = Path(__file__).resolve().parent / "scenarios" / "kueue"
FILES = sorted(KUEUE.glob("*.yaml"))
runner = CliRunner()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_kueue_scenario_checks(path: Path) -> None:
    result = runner.invoke(app, ["scenario", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: ")
    assert "(from kubernetes-sigs/kueue@" in result.output  # the runner prints the source


def test_at_least_sixty_kueue_scenarios_each_with_its_source() -> None:
    assert len(FILES) >= 60
    tests: set[tuple[str, str]] = set()
    for path in FILES:
        origin = load_scenario(path).origin
        assert origin is not None, f"{path.name} has no source"
        assert origin.repo == "kubernetes-sigs/kueue"
        assert origin.file.startswith("pkg/") and origin.file.endswith("_test.go")
        assert origin.commit is not None and len(origin.commit) == 40
        assert origin.test.startswith("Test") and "/" in origin.test
        tests.add((origin.file, origin.test))
    assert len(tests) == len(FILES)  # no Kueue test is counted twice


def test_source_is_printed_by_run() -> None:
    path = FILES[0]
    result = runner.invoke(app, ["scenario", "run", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].startswith("source: kubernetes-sigs/kueue@")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("kueue", "source: expected a mapping"),
        ({"repo": "r", "file": "f"}, "source.test: expected a non-empty string"),
        ({"repo": "r", "file": "f", "test": "t", "line": 3}, "source.line: unknown field"),
        ({"repo": "r", "file": "f", "test": ""}, "source.test: expected a non-empty string"),
    ],
)
def test_a_bad_source_is_refused_naming_the_field(source: object, message: str) -> None:
    doc = yaml.safe_load(FILES[0].read_text())
    doc["source"] = source
    with pytest.raises(GpuaasError, match=message):
        parse_scenario(doc, "x.yaml")
