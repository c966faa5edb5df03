"""Test-wide settings and fixtures: hypothesis runs without per-example deadlines (CI shares 2
cores); databases for the store and the service."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci")


# --- parallel runs: `make test` runs `pytest -n 2 --dist loadgroup` (pytest-xdist) -------------
# Each xdist worker is its own pytest session, so each starts its own session fixtures: the
# PostgreSQL server below (its own temp dir and a free port). The Slurm tests share one cluster
# (tests/backends/slurm/conftest.py) and its state (jobs, node states), as in a serial run, and a
# cluster is the heaviest thing the suite starts: every test under tests/backends/slurm/ goes to
# ONE worker, in order, so at most one cluster runs. The grouping is done here, in the
# scheduler, by path: xdist 3.8's `xdist_group` mark has no effect under pytest 9.2 (it renames
# `item._nodeid`, which pytest 9 no longer reads). A plain `pytest` stays serial.

SERIAL_GROUPS = {"tests/backends/slurm/": "slurm"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupedByPath(LoadGroupScheduling):
        """``loadgroup``, with every test under a ``SERIAL_GROUPS`` folder in one work unit."""

        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in SERIAL_GROUPS.items():
                if nodeid.startswith(prefix):
                    return group
            return super()._split_scope(nodeid)

    return GroupedByPath(config, log)


# --- databases: a fresh one per test, on SQLite and on a real PostgreSQL ------------------------
# PostgreSQL 15 is started once per test session as the ``postgres`` user (it refuses root), as
# ../shared/recipes/postgres-local.md describes, and stopped at the end; every test gets a
# database of its own. Tests that take ``db_url`` run on both databases.

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*args: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return list(args)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the session: yields its base URL (no database name)."""
    initdb = PG_BIN / "initdb"
    if not initdb.exists():
        pytest.skip(f"PostgreSQL 15 is not installed ({initdb} is missing)")
    root = Path(tempfile.mkdtemp(prefix="gpuaas-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = _free_port()
    subprocess.run(
        _as_postgres(
            str(initdb), "-D", str(data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C.UTF-8",
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
        "-c synchronous_commit=off -c max_connections=300"
    )
    subprocess.run(
        _as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w",
            "-o", options, "start",
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _pg_admin(base: str, sql: str) -> None:
    import psycopg

    url = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpuaas.db'}"
        return
    base = request.getfixturevalue("postgres_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    _pg_admin(base, f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        _pg_admin(base, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuaas.db'}"
