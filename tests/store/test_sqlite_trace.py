"""The debug trace of SQLite's write transactions (store/sqlite_trace.py): off, nothing is
written; on, a write transaction is one ``tx`` line with its times in order, and a span one
``span`` line."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuaas.store import sqlite_trace
from gpuaas.store.db import Database


def write_one(db: Database) -> None:
    with db.session() as s:
        s.execute(text("INSERT INTO meta (key, value) VALUES ('traced', '1')"))


def test_off_nothing_is_traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sqlite_trace.ENV, raising=False)
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        db.upgrade()
        with db.sessions() as s:
            assert not isinstance(s.connection().connection.dbapi_connection,
                                  sqlite_trace.TracingConnection)  # fmt: skip
        write_one(db)
    finally:
        db.dispose()
    assert not list(tmp_path.glob("**/*.trace"))


def test_a_write_transaction_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sqlite_trace.ENV, str(tmp_path / "trace"))
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        db.upgrade()
        write_one(db)
        with sqlite_trace.span("step"):
            pass
    finally:
        db.dispose()
    lines = [line.split() for f in (tmp_path / "trace").glob("*.trace") for line in f.open()]
    tx = [p for p in lines if p[0] == "tx" and "meta" in p[7]]
    assert len(tx) == 1
    sent, got, began, ended = map(float, tx[0][1:5])
    assert sent <= got <= began <= ended
    assert tx[0][6] == "1"  # one statement
    assert any(p[0] == "span" and p[4] == "step" for p in lines)


def test_turned_off_again_a_collection_writes_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(sqlite_trace.ENV, str(tmp_path / "trace"))
    with sqlite_trace.span("on"):
        pass
    gc.collect()  # registers nothing twice, writes its line
    written = own_lines(tmp_path / "trace")
    assert any(line.startswith("gc ") for line in written)
    monkeypatch.delenv(sqlite_trace.ENV)
    gc.collect()
    assert own_lines(tmp_path / "trace") == written
    assert not list(tmp_path.glob("*.trace"))  # nothing in the working directory


def own_lines(folder: Path) -> list[str]:
    """This thread's trace lines (the thread is the fourth field): another thread of the test
    process, such as a server's WAL checkpointer left by an earlier test, traces while the
    variable is set too."""
    me = threading.current_thread().name
    lines = [line for f in folder.glob("*.trace") for line in f.read_text().splitlines()]
    return sorted(line for line in lines if line.split()[3] == me)
