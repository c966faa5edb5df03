"""``gpuaas bench api`` on a small run: one JSON object, and every acknowledged job is listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaas.cli.bench_api import percentile
from gpuaas.cli.main import app

runner = CliRunner()


def test_small_run_acknowledges_and_lists_every_job(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    result = runner.invoke(
        app, ["bench", "api", "--clients", "4", "--jobs", "200", "--json", "--trace", str(trace)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # exactly one JSON object on stdout
    assert {"submissions_per_s", "p50_ms", "p99_ms", "max_ms", "errors"} <= summary.keys()
    assert summary["errors"] == 0
    assert summary["acknowledged"] == summary["created"] == summary["listed"] == 200
    assert summary["missing"] == 0
    assert summary["reconciler"] is True and summary["database"] == "sqlite"
    assert 0 < summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    assert sum(summary["states"].values()) == 200
    lines = [tuple(map(float, line.split())) for line in trace.read_text().splitlines()]
    assert len(lines) == 200  # one per answered request: send time, latency
    # the trace keeps microseconds and the summary rounds the unrounded figure to 0.01 ms,
    # so the two may differ by one in the last place of the summary
    assert max(lat for _, lat in lines) * 1000 == pytest.approx(summary["max_ms"], abs=0.011)


def test_given_database_is_used(db_url: str) -> None:
    """An empty database given with --db (SQLite file and a fresh PostgreSQL database)."""
    result = runner.invoke(
        app, ["bench", "api", "--clients", "3", "--jobs", "60", "--db", db_url, "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    expected = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    assert summary["database"] == expected
    assert summary["listed"] == summary["acknowledged"] == 60 and summary["errors"] == 0
    second = runner.invoke(app, ["bench", "api", "--jobs", "1", "--db", db_url])
    assert second.exit_code == 1 and "not empty" in second.stderr


def test_a_database_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "used.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE precious (id INTEGER)")
    result = runner.invoke(app, ["bench", "api", "--jobs", "1", "--db", f"sqlite:///{path}"])
    assert result.exit_code == 1
    assert "not empty" in result.stderr and "Traceback" not in result.output
    with sqlite3.connect(path) as conn:  # untouched
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["precious"]


@pytest.mark.parametrize(
    ("q", "expected"), [(50, 5.0), (99, 10.0), (100, 10.0), (10, 1.0), (1, 1.0)]
)
def test_nearest_rank_percentile(q: float, expected: float) -> None:
    assert percentile([float(v) for v in range(1, 11)], q) == expected
