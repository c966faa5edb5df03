"""The SQLite database and its directory are private to the server's user: 0700 and 0600,
including the -wal and -shm files SQLite creates beside the database."""

from __future__ import annotations

import stat
from pathlib import Path

from sqlalchemy import text

from gpuaas.store.db import Database, upgrade


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_directory_and_database_are_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "nested" / "gpuaas.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    db = Database(url)
    with db.engine.begin() as conn:  # a write, so the WAL exists
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        files = sorted(p.name for p in path.parent.iterdir())
        assert "gpuaas.db-wal" in files
        for name in files:
            assert _mode(path.parent / name) == 0o600, name
    db.engine.dispose()
    assert _mode(path.parent) == 0o700
    assert _mode(tmp_path / "data") == 0o700


def test_an_existing_directory_keeps_its_owners_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    Database(f"sqlite:///{shared / 'gpuaas.db'}").engine.dispose()
    assert _mode(shared) == 0o755
    assert _mode(shared / "gpuaas.db") == 0o600
