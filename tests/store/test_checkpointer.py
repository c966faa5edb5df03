"""WAL checkpoints out of the commits (store/checkpointer.py): a server's connections leave
the WAL to the checkpointer thread, which copies it back; SQLite's default checkpoints in the
commit that fills it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sqlalchemy import text

from gpuaas.store import checkpointer as checkpointer_module
from gpuaas.store.checkpointer import FALLBACK_PAGES, Checkpointer, Checkpoints
from gpuaas.store.db import Database


def fill(db: Database, rows: int = 300) -> None:
    """About 1,500 WAL pages: each commit rewrites a page of 4 KiB values."""
    with db.session() as s:
        s.execute(text("CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, v BLOB)"))
    for i in range(rows):
        with db.session() as s:
            s.execute(text("INSERT INTO filler (v) VALUES (randomblob(16000))"), {"i": i})


def frames(path: Path) -> tuple[int, int]:
    """(frames in the WAL, frames copied back), by a checkpoint that copies nothing new."""
    connection = sqlite3.connect(path)
    try:
        _, in_wal, copied = Checkpointer(str(path)).step(connection)
        return in_wal, copied
    finally:
        connection.close()


def autocheckpoint(db: Database) -> int:
    with db.sessions() as s:
        return int(s.scalar(text("PRAGMA wal_autocheckpoint")) or 0)


def test_sqlites_default_checkpoints_in_the_commit_that_fills_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(f"sqlite:///{path}")
    try:
        assert autocheckpoint(db) == 1000 and db.checkpointer is None
        fill(db)
        in_wal, _ = frames(path)
        assert 0 < in_wal < 1000  # a commit checkpointed, the WAL started over after it
    finally:
        db.dispose()


def test_a_servers_commits_leave_the_wal_to_the_checkpointer(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(f"sqlite:///{path}", Checkpoints.THREAD)
    assert db.checkpointer is not None
    db.checkpointer.stop()  # paused: what the commits alone do
    try:
        assert autocheckpoint(db) == FALLBACK_PAGES
        fill(db)
        in_wal, _ = frames(path)  # (this look copies them back)
        assert in_wal > 1000  # no commit checkpointed
    finally:
        db.dispose()


def test_the_checkpointer_thread_copies_the_wal_back(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(f"sqlite:///{path}", Checkpoints.THREAD)
    assert db.checkpointer is not None
    db.checkpointer.stop()
    db.checkpointer.every = 0.05
    db.checkpointer.start()
    try:
        fill(db, rows=50)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and db.checkpointer.checkpoints < 3:
            time.sleep(0.05)
        assert db.checkpointer.checkpoints >= 3
        in_wal, copied = frames(path)
        assert in_wal > 0 and copied == in_wal
    finally:
        db.dispose()
    assert db.checkpointer._thread is None  # dispose stopped it


def test_the_reconciler_childs_connections_leave_the_wal_to_the_server(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'a.db'}", Checkpoints.ELSEWHERE)
    try:
        assert db.checkpointer is None
        assert autocheckpoint(db) == FALLBACK_PAGES
    finally:
        db.dispose()


def test_the_checkpoints_interval_is_short() -> None:
    assert 0 < checkpointer_module.EVERY <= 1.0
